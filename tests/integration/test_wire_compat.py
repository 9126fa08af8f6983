"""nsqd 1.3.0 behaviours that need their own broker flags or several clients:
--max-channel-consumers, sample_rate, #ephemeral deletion, /stats producers."""
from __future__ import annotations

import pytest

from nsqmp.client import Connection
from nsqmp.client import wire
from tests.harness import wait_for


def _consumer(broker, topic: str, channel: str, rdy: int = 0, **identify) -> Connection:
    c = Connection.connect(broker.tcp_address)
    if identify:
        c.identify(**identify)
    c.sub(topic, channel, rdy=rdy)
    return c


def _channels(broker, topic: str) -> dict[str, dict]:
    for t in broker.stats(topic=topic)["topics"]:
        if t["topic_name"] == topic:
            return {ch["channel_name"]: ch for ch in t["channels"]}
    return {}


def test_max_channel_consumers_refuses_the_next_sub_and_closes(make_broker):
    broker = make_broker("--max-channel-consumers", "2")
    first = _consumer(broker, "limited", "ch")
    second = _consumer(broker, "limited", "ch")
    third = Connection.connect(broker.tcp_address)
    third.send(wire.sub("limited", "ch"))
    frame = third.read_frame()
    assert (frame.type, frame.data) == (
        wire.FRAME_ERROR, b"E_SUB_FAILED SUB failed consumers for limited:ch exceeds limit of 2")
    with pytest.raises((EOFError, ConnectionResetError)):
        third.read_frame()
    third.close()
    # the limit is per channel: another channel of the same topic still takes consumers
    other = _consumer(broker, "limited", "other")
    # a consumer leaving makes room again
    second.close()
    wait_for(lambda: _channels(broker, "limited")["ch"]["client_count"] == 1, what="one consumer left")
    again = _consumer(broker, "limited", "ch")
    for c in (first, other, again):
        c.close()
