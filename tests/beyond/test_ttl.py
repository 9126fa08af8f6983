"""Message TTL (docs/beyond-nsq.md, "Message TTL"): a message older than its topic's TTL
is dropped and counted instead of delivered, wherever it waits (memory, files, deferred,
requeued, held by a paused topic), and a restart or a kill -9 of the router brings
neither the messages nor a wrong count back."""
from __future__ import annotations

import time

import orjson
import pytest

from nsqmp.client import Connection, wire
from tests.harness import channel_stats, wait_for


def post(b, path: str) -> tuple[int, dict | bytes]:
    status, body, _ = b.http("POST", path)
    return status, orjson.loads(body) if body.startswith(b"{") else body


def topic_stats(b, topic: str) -> dict:
    return next(t for t in b.stats(topic=topic)["topics"] if t["topic_name"] == topic)


def setup_topic(b, topic: str, channel: str | None = "c", ttl: str | None = None) -> None:
    assert post(b, f"/topic/create?topic={topic}")[0] == 200
    if channel:
        assert post(b, f"/channel/create?topic={topic}&channel={channel}")[0] == 200
    if ttl:
        assert post(b, f"/topic/ttl?topic={topic}&ttl={ttl}") == (200, b"")


def publish(b, topic: str, bodies: list[bytes]) -> None:
    with Connection.connect(b.tcp_address) as p:
        for i in range(0, len(bodies), 500):
            p.mpub(topic, bodies[i:i + 500])


def read_all(b, topic: str, channel: str, seconds: float = 1.0, **identify) -> list:
    """Every message the channel hands out within `seconds` (FIN'd)."""
    got = []
    with Connection.connect(b.tcp_address) as c:
        c.identify(**identify)
        c.sub(topic, channel, rdy=1000)
        c.sock.settimeout(seconds)
        try:
            while True:
                m = c.read_message()
                got.append(m)
                c.fin(m.id)
        except (TimeoutError, OSError):
            pass
    return got


def test_expiry_in_memory_and_on_disk(make_broker):
    """Queued in memory (a few) and in the files (mem-queue-size 100, thousands): all
    dropped by the sweep, depth 0, counted; later messages still delivered."""
    b = make_broker("--mem-queue-size", "100")
    setup_topic(b, "mem", ttl="1s")
    setup_topic(b, "disk", ttl="1s")
    publish(b, "mem", [b"m%d" % i for i in range(10)])
    publish(b, "disk", [b"d%d" % i for i in range(5000)])
    assert channel_stats(b, "disk", "c")["depth"] == 5000
    wait_for(lambda: channel_stats(b, "mem", "c")["expired_count"] == 10, timeout=5)
    wait_for(lambda: channel_stats(b, "disk", "c")["expired_count"] == 5000, timeout=10)
    for topic in ("mem", "disk"):
        c = channel_stats(b, topic, "c")
        assert (c["depth"], c["backend_depth"]) == (0, 0)
        assert topic_stats(b, topic)["ttl_ms"] == 1000
    publish(b, "mem", [b"fresh"])
    assert [m.body for m in read_all(b, "mem", "c")] == [b"fresh"]
    text = b.http("GET", "/stats")[1].decode()
    assert "expired: 10" in text
    metrics = b.http("GET", "/metrics")[1].decode()
    assert 'nsqmp_channel_expired_messages_total{channel="c",topic="disk"} 5000.0' in metrics


def test_never_delivered_past_ttl(make_broker):
    """A consumer already waiting: the check at delivery time keeps an expired message
    from going out even before the sweep sees it (a message published with a stale
    timestamp is not possible, so: a message REQ'd until it is past its TTL)."""
    b = make_broker()
    setup_topic(b, "req", ttl="700ms")
    publish(b, "req", [b"x"])
    with Connection.connect(b.tcp_address) as c:
        c.identify()
        c.sub("req", "c", rdy=1)
        m = c.read_message()
        time.sleep(0.8)
        c.send(wire.req(m.id, 0))  # back in the queue, past its TTL
        c.sock.settimeout(1.0)
        with pytest.raises((TimeoutError, OSError)):
            c.read_message()
    wait_for(lambda: channel_stats(b, "req", "c")["expired_count"] == 1)


def test_expiry_deferred_timed_out_and_paused(make_broker):
    """Deferred (DPUB), back from a time-out, and held by a paused topic: all expire."""
    b = make_broker()
    setup_topic(b, "def", ttl="1s")
    with Connection.connect(b.tcp_address) as p:
        p.send(wire.dpub("def", 30_000, b"later"))
        p.expect_ok()
    assert channel_stats(b, "def", "c")["deferred_count"] == 1
    wait_for(lambda: channel_stats(b, "def", "c")["expired_count"] == 1, timeout=5)
    assert channel_stats(b, "def", "c")["deferred_count"] == 0

    setup_topic(b, "tmo", ttl="1500ms")
    publish(b, "tmo", [b"slow"])
    with Connection.connect(b.tcp_address) as c:
        c.identify(msg_timeout=1000)
        c.sub("tmo", "c", rdy=1)
        c.read_message()  # never finished: times out after 1 s, back in the queue
        c.sock.settimeout(2.5)
        m2 = None
        try:
            m2 = c.read_message()  # the redelivery, at 1 s (not yet expired), or nothing
        except (TimeoutError, OSError):
            pass
        if m2 is not None:  # its second time-out comes after the TTL
            c.sock.settimeout(2.0)
            with pytest.raises((TimeoutError, OSError)):
                c.read_message()
    wait_for(lambda: channel_stats(b, "tmo", "c")["expired_count"] == 1, timeout=5)

    setup_topic(b, "held", ttl="1s")
    assert post(b, "/topic/pause?topic=held")[0] == 200
    publish(b, "held", [b"h1", b"h2"])
    assert topic_stats(b, "held")["depth"] == 2
    wait_for(lambda: topic_stats(b, "held")["expired_count"] == 2, timeout=5)
    assert topic_stats(b, "held")["depth"] == 0
    assert post(b, "/topic/unpause?topic=held")[0] == 200
    assert read_all(b, "held", "c", 0.5) == []


def test_topic_ttl_overrides_default_and_persists(make_broker, tmp_path):
    """--msg-ttl is the default; a topic's own TTL wins; ttl=0 goes back to the default;
    the setting and the counts survive a graceful restart."""
    b = make_broker("--msg-ttl", "1h", data="d")
    setup_topic(b, "long")
    setup_topic(b, "short", ttl="500ms")
    assert topic_stats(b, "long")["ttl_ms"] == 3_600_000
    publish(b, "long", [b"keep"])
    publish(b, "short", [b"drop1", b"drop2"])
    wait_for(lambda: channel_stats(b, "short", "c")["expired_count"] == 2, timeout=5)
    assert channel_stats(b, "long", "c")["depth"] == 1
    assert b.stop() == 0
    b = make_broker("--msg-ttl", "1h", data="d")
    assert topic_stats(b, "short")["ttl_ms"] == 500
    assert channel_stats(b, "short", "c")["expired_count"] == 2
    assert post(b, "/topic/ttl?topic=short&ttl=0") == (200, b"")
    assert topic_stats(b, "short")["ttl_ms"] == 3_600_000
    assert [m.body for m in read_all(b, "long", "c")] == [b"keep"]


def test_counts_survive_kill_of_the_router(make_broker):
    """Expired messages are acknowledged and their count written: a kill -9 of the router
    brings neither back."""
    b = make_broker("--routers", "1")
    setup_topic(b, "k", ttl="500ms")
    publish(b, "k", [b"k%d" % i for i in range(300)])
    wait_for(lambda: channel_stats(b, "k", "c")["expired_count"] == 300, timeout=5)
    time.sleep(0.3)  # the ack log's append at the end of the tick
    router = next(pid for title, pid in b.children().items() if "router" in title)
    import os
    import signal
    os.kill(router, signal.SIGKILL)
    wait_for(lambda: any("router" in t and p != router for t, p in b.children().items()), timeout=10)
    wait_for(lambda: channel_stats(b, "k", "c")["expired_count"] == 300, timeout=10)
    assert channel_stats(b, "k", "c")["depth"] == 0
    assert read_all(b, "k", "c", 0.5) == []


@pytest.mark.parametrize("query,status,message", [
    ("topic=t&ttl=abc", 400, "INVALID_TTL"),
    ("topic=t&ttl=-1s", 400, "INVALID_TTL"),
    ("topic=t&ttl=1", 400, "INVALID_TTL"),  # Go durations need a unit
    ("topic=t", 400, "MISSING_ARG_TTL"),
    ("ttl=1s", 400, "MISSING_ARG_TOPIC"),
    ("topic=bad!name&ttl=1s", 400, "INVALID_ARG_TOPIC"),
    ("topic=nosuch&ttl=1s", 404, "TOPIC_NOT_FOUND"),
])
def test_bad_input(broker, query, status, message):
    setup_topic(broker, "t", channel=None)
    assert post(broker, f"/topic/ttl?{query}") == (status, {"message": message})


def test_wrong_method(broker):
    status, body, _ = broker.http("GET", "/topic/ttl?topic=t&ttl=1s")
    assert (status, orjson.loads(body)) == (405, {"message": "METHOD_NOT_ALLOWED"})


def test_meta_json_unchanged_when_unused_and_round_trips():
    """An older meta.json reads as "no TTL, the default dead letters"; unset settings add
    no key; set ones come back."""
    from nsqmp.diskqueue.meta import ChannelMeta, TopicMeta

    old = b'{"version": 1, "paused": false, "next_channel_id": 2, "counts": {}, "channels": [{"name": "c", "id": 1}]}'
    meta = TopicMeta.from_json(old)
    assert meta.ttl_ms is None and meta.channels[0].max_attempts is None and meta.channels[0].dead_letter_to is None
    plain = TopicMeta(channels=[ChannelMeta("c", 1)]).to_json()
    assert b"ttl_ms" not in plain and b"max_attempts" not in plain and b"dead_letter_to" not in plain
    meta = TopicMeta(ttl_ms=1500, channels=[ChannelMeta("c", 1, max_attempts=0, dead_letter_to="x.dlq")])
    back = TopicMeta.from_json(meta.to_json())
    assert (back.ttl_ms, back.channels[0].max_attempts, back.channels[0].dead_letter_to) == (1500, 0, "x.dlq")
