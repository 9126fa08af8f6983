"""router/peek.py on a router's nouns without a process (tests/router/nouns.py): the cases a
broker reaches rarely (a record with a due time in a file range, a topic's held DPUBs), and
that a peek takes no segment reference."""
from __future__ import annotations

import base64
import time

from nsqmp.diskqueue.segment import encode
from nsqmp.protocol.frames import MESSAGE_HEADER
from nsqmp.router import peek
from tests.router.nouns import Nouns


class _Router:
    """What the peek handlers read of a Router: its topics."""

    def __init__(self, *topics) -> None:
        self.topics = {t.name: t for t in topics}


def _ask(router, op: str, **request) -> dict:
    return getattr(peek, op)(router, {"op": op, "topic": "t", "n": 100, "state": "all", "max_body": 4096,
                                      **request})


def _bodies(reply: dict) -> list[tuple[str, bytes]]:
    return [(m["state"], base64.b64decode(m["body"])) for m in reply["messages"]]


def test_a_file_record_due_later_is_shown_deferred_and_no_reference_is_taken(tmp_path):
    n = Nouns(tmp_path, mem_queue_size=100)
    ch = n.topic.get_channel(b"c")
    n.publish([b"mem-%d" % i for i in range(100)])
    n.publish([b"file-%d" % i for i in range(50)])
    assert len(ch.pending) == 50
    # a range holding a record with a due time ahead (as a recovery can queue one)
    due = time.time_ns() + 30 * 10**9
    blob = encode([MESSAGE_HEADER.pack(time.time_ns(), 0, b"%016x" % 999) + b"later"], due)
    seq, offset = n.writer.append(blob)
    seg = n.topic.segment(0, seq)
    ch.pending.add(seg, offset, offset + len(blob), 1)
    seg.refs += 1
    refs = {key: s.refs for key, s in n.topic.segments.items()}
    router = _Router(n.topic)
    got = _ask(router, "channel_peek", channel="c", n=1000)
    assert _bodies(got) == ([("queued", b"mem-%d" % i) for i in range(100)]
                            + [("queued", b"file-%d" % i) for i in range(50)] + [("deferred", b"later")])
    assert got["messages"][-1]["due_ns"] == due
    assert _bodies(_ask(router, "channel_peek", channel="c", state="deferred")) == [("deferred", b"later")]
    assert _bodies(_ask(router, "channel_peek", channel="c", n=3)) == [("queued", b"mem-%d" % i) for i in range(3)]
    assert {key: s.refs for key, s in n.topic.segments.items()} == refs
    assert (len(ch.ready), len(ch.pending)) == (100, 51)
    n.close()


def test_a_topic_without_channels_shows_its_dpubs_deferred(tmp_path):
    n = Nouns(tmp_path)
    n.publish([b"now"])
    due = time.time_ns() + 60 * 10**9
    n.publish([b"later"], due_ns=due)
    router = _Router(n.topic)
    got = _ask(router, "topic_peek")
    assert _bodies(got) == [("queued", b"now"), ("deferred", b"later")] and got["depth"] == 2
    assert got["messages"][1]["due_ns"] == due
    assert _bodies(_ask(router, "topic_peek", state="queued")) == [("queued", b"now")]
    assert _bodies(_ask(router, "topic_peek", state="deferred")) == [("deferred", b"later")]
    assert _ask(router, "topic_peek", state="in_flight")["messages"] == []
    n.topic.get_channel(b"c")
    assert _ask(router, "topic_peek") == {"error": "TOPIC_HAS_CHANNELS"}
    assert _ask(router, "channel_peek", channel="nope") == {"error": "CHANNEL_NOT_FOUND"}
    assert _ask(_Router(), "topic_peek") == {"error": "TOPIC_NOT_FOUND"}
    n.close()
