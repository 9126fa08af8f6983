"""The channel a CONTROL request names ({"topic", "channel"}), on the router that owns
its topic: shared by the operations of router/admin.py and the modules it dispatches to
(peek, dead letters), which admin.py imports and so cannot import it back."""
from __future__ import annotations


def find_channel(router, request: dict):
    """(the Channel, None), or (None, {"error": TOPIC_NOT_FOUND | CHANNEL_NOT_FOUND})."""
    topic = router.topics.get(request["topic"].encode())
    if topic is None:
        return None, {"error": "TOPIC_NOT_FOUND"}
    ch = topic.channels.get(request["channel"].encode())
    if ch is None:
        return None, {"error": "CHANNEL_NOT_FOUND"}
    return ch, None
