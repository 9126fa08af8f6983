"""Dead letters (docs/beyond-nsq.md, "Dead letters"): a message that would be delivered
an (N+1)-th time goes to the dead-letter topic instead, as JSON, and is in it before it
leaves its channel: a kill -9 of any process in between gives a duplicate at worst,
never a loss."""
from __future__ import annotations

import asyncio
import base64
import os
import signal
import time

import orjson
import pytest

from nsqmp.client import Connection, wire
from tests.harness import channel_stats, wait_for


def post(b, path: str) -> tuple[int, dict | bytes]:
    status, body, _ = b.http("POST", path)
    return status, orjson.loads(body) if body.startswith(b"{") else body


def setup(b, topic: str = "t", channel: str = "c", max_attempts: int | None = 3, to: str = "") -> None:
    assert post(b, f"/topic/create?topic={topic}")[0] == 200
    assert post(b, f"/channel/create?topic={topic}&channel={channel}")[0] == 200
    if max_attempts is not None:
        extra = f"&to={to}" if to else ""
        assert post(b, f"/channel/dead-letter?topic={topic}&channel={channel}"
                       f"&max_attempts={max_attempts}{extra}") == (200, b"")


def dead_letters(b, topic: str, expect: int, seconds: float = 10.0) -> list[dict]:
    """The dead letters in `topic` (read with a channel of their own, FIN'd), decoded."""
    got: list[dict] = []
    with Connection.connect(b.tcp_address) as c:
        c.identify()
        c.sub(topic, "inspect", rdy=100)
        c.sock.settimeout(seconds)
        try:
            while len(got) < expect:
                m = c.read_message()
                got.append(orjson.loads(m.body))
                c.fin(m.id)
            c.sock.settimeout(0.3)
            while True:  # and nothing more
                m = c.read_message()
                got.append(orjson.loads(m.body))
                c.fin(m.id)
        except (TimeoutError, OSError):
            pass
    return got


def requeue_all(b, topic: str, channel: str, seconds: float, **identify) -> list:
    """A consumer that REQs everything it gets, for `seconds`: what it got."""
    got = []
    with Connection.connect(b.tcp_address) as c:
        c.identify(**identify)
        c.sub(topic, channel, rdy=10)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            c.sock.settimeout(max(0.01, end - time.monotonic()))
            try:
                m = c.read_message()
            except (TimeoutError, OSError):
                break
            got.append(m)
            c.send(wire.req(m.id, 0))
        c.send(wire.NOP)
    return got


def test_requeued_n_times_goes_to_the_dead_letter_topic(make_broker):
    b = make_broker()
    setup(b, max_attempts=3)
    with Connection.connect(b.tcp_address) as p:
        p.pub("t", b"\x00bad\xffbody")
        p.pub("t", b"good")
    got = requeue_all(b, "t", "c", 1.5)
    attempts = sorted((m.body, m.attempts) for m in got)
    assert attempts == [(b"\x00bad\xffbody", n) for n in (1, 2, 3)] + [(b"good", n) for n in (1, 2, 3)]
    letters = dead_letters(b, "t.dead", 2)
    assert len(letters) == 2
    by_body = {base64.b64decode(d["body"]): d for d in letters}
    d = by_body[b"\x00bad\xffbody"]
    ids = {m.body: m.id.decode() for m in got}
    assert d["id"] == ids[b"\x00bad\xffbody"]
    assert (d["attempts"], d["topic"], d["channel"]) == (3, "t", "c")
    assert abs(d["timestamp"] / 1e9 - time.time()) < 60
    c = channel_stats(b, "t", "c")
    assert (c["dead_letter_count"], c["depth"], c["in_flight_count"]) == (2, 0, 0)
    assert (c["max_attempts"], c["dead_letter_topic"]) == (3, "t.dead")
    assert requeue_all(b, "t", "c", 0.5) == []  # the originals are gone
    metrics = b.http("GET", "/metrics")[1].decode()
    assert 'nsqmp_channel_dead_lettered_messages_total{channel="c",topic="t"} 2.0' in metrics
    assert "dead: 2" in b.http("GET", "/stats")[1].decode()


def test_time_outs_count_and_broker_default(make_broker):
    """--max-attempts is every channel's default; a time-out (no FIN) is an attempt too;
    `to` names another topic; max_attempts=0 turns it off for one channel."""
    b = make_broker("--max-attempts", "2")
    setup(b, "a", max_attempts=None)
    setup(b, "b", max_attempts=2, to="graveyard")
    setup(b, "off", max_attempts=0)
    for topic in ("a", "b", "off"):
        with Connection.connect(b.tcp_address) as p:
            p.pub(topic, topic.encode())
    for topic in ("a", "b", "off"):
        with Connection.connect(b.tcp_address) as c:
            c.identify(msg_timeout=1000)
            c.sub(topic, "c", rdy=1)
            c.sock.settimeout(3)
            assert c.read_message().attempts == 1  # never finished: times out
            assert c.read_message().attempts == 2
            if topic == "off":
                assert c.read_message().attempts == 3
            else:
                c.sock.settimeout(1.8)
                with pytest.raises((TimeoutError, OSError)):
                    c.read_message()
    assert [base64.b64decode(d["body"]) for d in dead_letters(b, "a.dead", 1)] == [b"a"]
    assert [base64.b64decode(d["body"]) for d in dead_letters(b, "graveyard", 1)] == [b"b"]
    assert channel_stats(b, "off", "c")["dead_letter_count"] == 0


def test_pynsq_reader_that_always_fails(make_broker):
    """pynsq's Reader, whose handler fails every time (REQ with its backoff delay)."""
    import nsq

    b = make_broker()
    setup(b, max_attempts=2)
    with Connection.connect(b.tcp_address) as p:
        p.mpub("t", [b"p1", b"p2"])

    async def run() -> int:
        seen = []

        def handler(message) -> bool:
            seen.append(message.attempts)
            message.requeue(backoff=False, delay=0)
            return None

        reader = nsq.Reader("t", "c", handler, nsqd_tcp_addresses=[b.tcp_address], max_tries=0,
                            max_in_flight=10)
        deadline = time.monotonic() + 10
        while channel_stats(b, "t", "c")["dead_letter_count"] < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        reader.connect_to_nsqd = lambda *a, **k: None
        reader.close()
        return len(seen)

    assert asyncio.run(run()) == 4
    assert sorted(base64.b64decode(d["body"]) for d in dead_letters(b, "t.dead", 2)) == [b"p1", b"p2"]


def test_settings_and_attempts_survive_a_graceful_restart(make_broker):
    b = make_broker(data="d")
    setup(b, max_attempts=3, to="t.dlq")
    with Connection.connect(b.tcp_address) as p:
        p.pub("t", b"x")
    assert [m.attempts for m in requeue_all(b, "t", "c", 1.0)] == [1, 2, 3]
    wait_for(lambda: channel_stats(b, "t", "c")["dead_letter_count"] == 1)
    assert b.stop() == 0
    b = make_broker(data="d")
    c = channel_stats(b, "t", "c")
    assert (c["max_attempts"], c["dead_letter_topic"]) == (3, "t.dlq")
    letters = dead_letters(b, "t.dlq", 1)
    assert [d["attempts"] for d in letters] == [3]
    assert channel_stats(b, "t", "c")["dead_letter_count"] == 1


def test_attempts_kept_across_graceful_stop(make_broker):
    """Two deliveries before a graceful stop, the third after, then the dead-letter topic."""
    b = make_broker(data="d")
    setup(b, max_attempts=3)
    with Connection.connect(b.tcp_address) as p:
        p.pub("t", b"x")
    with Connection.connect(b.tcp_address) as c:
        c.identify()
        c.sub("t", "c", rdy=1)
        for n in (1, 2):
            m = c.read_message()
            assert m.attempts == n
            c.send(wire.req(m.id, 0) if n == 1 else wire.NOP)
        c.send(wire.rdy(0))
        c.send(wire.req(m.id, 0))
        c.send(wire.NOP)
        time.sleep(0.3)
    assert b.stop() == 0
    b = make_broker(data="d")
    got = requeue_all(b, "t", "c", 1.0)
    assert [m.attempts for m in got] == [3]
    assert len(dead_letters(b, "t.dead", 1)) == 1


@pytest.mark.parametrize("victim", ["acceptor", "router", "supervisor"])
def test_kill_at_the_moment_never_loses(make_broker, victim):
    """Kill -9 a process right as the message reaches its last attempt: afterwards it is
    in the dead-letter topic, or still in its channel and reaches the dead-letter topic
    under a consumer that keeps failing; never lost (a duplicate is allowed)."""
    b = make_broker("--acceptors", "1", "--routers", "1", data="d")
    setup(b, max_attempts=2)
    with Connection.connect(b.tcp_address) as p:
        p.mpub("t", [b"k%d" % i for i in range(20)])
    with Connection.connect(b.tcp_address) as c:
        c.identify()
        c.sub("t", "c", rdy=100)
        seen = 0
        while seen < 40:  # every message twice: after the second REQ each is dead-lettered
            m = c.read_message()
            c.send(wire.req(m.id, 0))
            seen += 1
        if victim == "supervisor":
            b.kill()
        else:
            pid = next(p for t, p in b.children().items() if victim in t)
            os.kill(pid, signal.SIGKILL)
    if victim == "supervisor":
        b = make_broker("--acceptors", "1", "--routers", "1", data="d")
    else:
        wait_for(lambda: any(victim in t for t in b.children()) and b.http("GET", "/ping")[0] == 200,
                 timeout=20)
        time.sleep(0.5)
    # what is still in the channel: fail it until it is dead-lettered
    end = time.monotonic() + 20
    while time.monotonic() < end:
        requeue_all(b, "t", "c", 0.5)
        c = channel_stats(b, "t", "c")
        if c["depth"] + c["in_flight_count"] + c["deferred_count"] == 0:
            break
    letters = dead_letters(b, "t.dead", 20)
    bodies = {base64.b64decode(d["body"]) for d in letters}
    assert bodies == {b"k%d" % i for i in range(20)}, (victim, sorted(bodies))


@pytest.mark.parametrize("query,status,message", [
    ("topic=t&channel=c&max_attempts=x", 400, "INVALID_MAX_ATTEMPTS"),
    ("topic=t&channel=c&max_attempts=-1", 400, "INVALID_MAX_ATTEMPTS"),
    ("topic=t&channel=c&max_attempts=70000", 400, "INVALID_MAX_ATTEMPTS"),
    ("topic=t&channel=c", 400, "MISSING_ARG_MAX_ATTEMPTS"),
    ("topic=t&channel=c&max_attempts=3&to=bad!", 400, "INVALID_ARG_TO"),
    ("topic=t&max_attempts=3", 400, "MISSING_ARG_CHANNEL"),
    ("channel=c&max_attempts=3", 400, "MISSING_ARG_TOPIC"),
    ("topic=nosuch&channel=c&max_attempts=3", 404, "TOPIC_NOT_FOUND"),
    ("topic=t&channel=nosuch&max_attempts=3", 404, "CHANNEL_NOT_FOUND"),
])
def test_bad_input(broker, query, status, message):
    setup(broker, max_attempts=None)
    assert post(broker, f"/channel/dead-letter?{query}") == (status, {"message": message})


def test_wrong_method(broker):
    status, body, _ = broker.http("GET", "/channel/dead-letter?topic=t&channel=c&max_attempts=1")
    assert (status, orjson.loads(body)) == (405, {"message": "METHOD_NOT_ALLOWED"})


def test_records_round_trip():
    """DEAD_LETTER and DEAD_LETTER_OK: one builder, one parser each."""
    from nsqmp.ipc import records

    rec = records.dead_letter(1 << 50 | 7, b"t.dead", b'{"id": "x"}')
    assert rec[0] == records.DEAD_LETTER
    assert records.parse_dead_letter(rec) == (1 << 50 | 7, b"t.dead", b'{"id": "x"}')
    ok = records.dead_letter_ok([1, 2**64 - 1])
    assert ok[0] == records.DEAD_LETTER_OK
    assert records.parse_dead_letter_ok(ok) == (1, 2**64 - 1)
