"""The acceptor's publish path end to end (native encoder, nsqmp.diskqueue.encoder): what a
client publishes comes back byte for byte with unique, increasing IDs, including an MPUB
bigger than one ring record (several PUBLISH descriptors) and over 4,096 messages (several
ID blocks), PUB, DPUB and HTTP /pub and binary /mpub."""
from __future__ import annotations

import struct
import time

from nsqmp.client import Connection


def _drain(broker, topic: str, count: int, rdy: int = 2500, timeout: float = 60.0):
    got = []
    with Connection.connect(broker.tcp_address) as consumer:
        consumer.identify()
        consumer.sub(topic, "ch", rdy=rdy)
        deadline = time.monotonic() + timeout
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} arrived"
            m = consumer.read_message()
            got.append(m)
            consumer.fin(m.id)
    return got


def test_a_big_mpub_travels_in_pieces_and_keeps_its_order_and_ids(broker):
    # 20,000 x 200 B: 4.7 MB of records, more than one ring record (ring-size / 4), and
    # five blocks of IDs
    bodies = [b"%08d" % i + bytes([i % 251]) * 192 for i in range(20_000)]
    with Connection.connect(broker.tcp_address) as producer:
        producer.identify()
        producer.mpub("big", bodies)
        producer.pub("big", b"after")
    got = _drain(broker, "big", len(bodies) + 1)
    assert sorted(m.body for m in got) == sorted(bodies + [b"after"])
    ids = {m.body: m.id for m in got}
    in_order = [ids[b] for b in bodies] + [ids[b"after"]]
    assert len(set(in_order)) == len(in_order)
    assert [int(i, 16) for i in in_order] == sorted(int(i, 16) for i in in_order)
    stats = broker.stats(topic="big")["topics"][0]
    assert stats["message_count"] == len(bodies) + 1


def test_pub_dpub_and_http_bodies_arrive_unchanged(broker):
    with Connection.connect(broker.tcp_address) as producer:
        producer.identify()
        producer.pub("mix", b"tcp-pub")
        producer.send(b"DPUB mix 50\n" + struct.pack(">i", 9) + b"tcp-dpub!")
        producer.expect_ok()
    assert broker.http("POST", "/pub?topic=mix", b"http-pub")[:2] == (200, b"OK")
    assert broker.http("POST", "/pub?topic=mix&defer=30", b"http-defer")[:2] == (200, b"OK")
    binary = [b"bin-1", b"bin-22"]
    body = struct.pack(">i", 2) + b"".join(struct.pack(">i", len(b)) + b for b in binary)
    assert broker.http("POST", "/mpub?topic=mix&binary=true", body)[:2] == (200, b"OK")
    got = _drain(broker, "mix", 6, rdy=10, timeout=20.0)
    assert sorted(m.body for m in got) == sorted(
        [b"tcp-pub", b"tcp-dpub!", b"http-pub", b"http-defer"] + binary)
    assert all(len(m.id) == 16 and m.attempts == 1 for m in got)


def _oks(c: Connection, n: int) -> None:
    for _ in range(n):
        c.expect_ok()


def test_pipelined_pubs_and_dpubs_are_answered_in_order_and_each_kept(broker):
    """A burst of PUB and DPUB in one write, across topics and delays: the acceptor takes
    each run of them to one topic together (one append, one OK write), yet every command
    gets its own OK, every message its own ID, and each DPUB its own due time."""
    from nsqmp.client import wire

    burst, expect = [], {"run_a": [], "run_b": []}
    for i in range(300):
        topic = "run_a" if i % 50 < 40 else "run_b"  # runs of 40 and 10, switching topics
        body = b"p%03d" % i
        burst.append(wire.pub(topic, body))
        expect[topic].append(body)
    # deferred ones among them, each due at its own time (listed out of due order)
    for ms, body in ((900, b"d900"), (300, b"d300"), (600, b"d600"), (0, b"d000")):
        burst.append(wire.dpub("run_b", ms, body))
        expect["run_b"].append(body)
    burst.append(wire.pub("run_b", b"last"))
    expect["run_b"].append(b"last")
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        sent = time.monotonic()
        c.send(b"".join(burst))
        _oks(c, len(burst))
    got_a = _drain(broker, "run_a", len(expect["run_a"]))
    assert [m.body for m in got_a] == expect["run_a"]
    got_b = _drain(broker, "run_b", len(expect["run_b"]), timeout=20.0)
    arrived = time.monotonic() - sent
    bodies = [m.body for m in got_b]
    assert sorted(bodies) == sorted(expect["run_b"])
    assert bodies[-3:] == [b"d300", b"d600", b"d900"], bodies[-5:]  # by due time
    assert arrived >= 0.9
    ids = [m.id for m in got_a + got_b]
    assert len(set(ids)) == len(ids)


def test_a_bad_command_in_a_pub_run_comes_after_the_oks_before_it(broker):
    from nsqmp.client import wire
    from tests.harness import assert_fatal

    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        good = b"".join(wire.pub("run_c", b"ok-%d" % i) for i in range(3))
        c.send(good + b"PUB bad!topic\n" + struct.pack(">i", 1) + b"x" + wire.pub("run_c", b"never"))
        _oks(c, 3)
        assert_fatal(c, b"", "E_BAD_TOPIC PUB topic name \"bad!topic\" is not valid")
    assert sorted(m.body for m in _drain(broker, "run_c", 3)) == [b"ok-0", b"ok-1", b"ok-2"]
    stats = broker.stats(topic="run_c")["topics"][0]
    assert stats["message_count"] == 3, stats
