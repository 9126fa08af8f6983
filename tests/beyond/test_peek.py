"""Peek (issue 23): GET /channel/peek and /topic/peek on a real broker, with real clients.

What a peek shows is compared with what the channel then really delivers (the project's
client and pynsq), and with /stats before and after: a peek changes nothing.
"""
from __future__ import annotations

import asyncio
import base64
import os
import signal
import time
from urllib.parse import urlencode

import orjson
import pytest

from nsqmp.acceptor.http_peek import parse_raw
from nsqmp.client import Connection, wire
from tests.harness import Broker, await_for, wait_for


def peek(b, path: str = "/channel/peek", **params) -> dict:
    """A peek that must answer 200 (JSON)."""
    params.setdefault("topic", "t")
    if path == "/channel/peek":
        params.setdefault("channel", "c")
    status, body, headers = b.http("GET", f"{path}?{urlencode(params)}")
    assert status == 200, (status, body)
    assert headers["Content-Type"].startswith("application/json")
    return orjson.loads(body)


def bodies(reply: dict) -> list[bytes]:
    return [base64.b64decode(m["body"]) for m in reply["messages"]]


def channel_stats(b, topic: str = "t", channel: str = "c") -> dict:
    """The channel's /stats, less what moves by itself (its clients' timestamps)."""
    (t,) = [t for t in b.stats(topic=topic)["topics"] if t["topic_name"] == topic]
    (ch,) = [c for c in t["channels"] if c["channel_name"] == channel]
    ch = dict(ch)
    ch.pop("clients")
    ch.pop("e2e_processing_latency")
    return {"topic_depth": t["depth"], "topic_messages": t["message_count"], **ch}


def consume(b, n: int, topic: str = "t", channel: str = "c") -> list:
    """Receive and FIN n messages one at a time (RDY 1): the channel's delivery order."""
    got = []
    with Connection.connect(b.tcp_address) as c:
        c.identify()
        c.sub(topic, channel, rdy=1)
        for _ in range(n):
            m = c.read_message()
            got.append(m)
            c.fin(m.id)
    return got


def make_channel(b, topic: str = "t", channel: str = "c") -> None:
    """Topic and channel, as nsqd wants them: the topic first."""
    assert b.http("POST", f"/topic/create?topic={topic}")[0] == 200
    assert b.http("POST", f"/channel/create?topic={topic}&channel={channel}")[0] == 200


def publish(b, topic: str, msgs: list[bytes], batch: int = 100) -> None:
    with Connection.connect(b.tcp_address) as c:
        c.identify()
        for i in range(0, len(msgs), batch):
            c.mpub(topic, msgs[i:i + batch])


def test_queued_in_memory_and_on_disk_in_delivery_order(make_broker):
    """mem-queue-size 100 (the router's least in-memory share): most of the 300 wait in
    file ranges; a peek of all of them, in the order the channel then delivers them, and
    /stats unchanged by it."""
    b = make_broker("--mem-queue-size", "100")
    make_channel(b)
    msgs = [b"msg-%03d" % i for i in range(300)]
    # the first 100 fill the in-memory share; the router takes a batch that finds room
    # whole (and joins the publishes that came while it slept), so the rest go after
    publish(b, "t", msgs[:100], batch=10)
    wait_for(lambda: channel_stats(b)["depth"] == 100, what="the in-memory share taken")
    publish(b, "t", msgs[100:], batch=10)
    before = channel_stats(b)
    assert before["backend_depth"] > 0, before  # some are on disk only
    seen = peek(b, n=100)
    assert seen["depth"] == 300 and len(seen["messages"]) == 100
    seen = peek(b, n=1000)
    assert bodies(seen) == msgs
    assert {m["state"] for m in seen["messages"]} == {"queued"}
    assert all(m["attempts"] == 0 and m["body_size"] == 7 and not m["truncated"] for m in seen["messages"])
    assert [len(m["id"]) for m in seen["messages"]] == [16] * 300
    assert peek(b, n=5)["messages"] == seen["messages"][:5]
    assert peek(b, n=1000) == seen  # again: the same answer
    assert channel_stats(b) == before
    got = consume(b, 300)
    assert [m.id.decode() for m in got] == [m["id"] for m in seen["messages"]]
    assert [m.timestamp for m in got] == [m["timestamp"] for m in seen["messages"]]
    assert [m.attempts for m in got] == [1] * 300  # the peek counted no attempt


def test_deferred_and_in_flight(make_broker):
    b = make_broker()
    make_channel(b)
    with Connection.connect(b.tcp_address) as p:
        p.identify()
        for i, delay in enumerate((60_000, 30_000)):
            p.send(wire.dpub("t", delay, b"later-%d" % i))
            p.expect_ok()
        p.mpub("t", [b"now-0", b"now-1", b"now-2"])
    t0 = time.time_ns()
    with Connection.connect(b.tcp_address) as c:
        c.identify(client_id="peeker", msg_timeout=50_000)
        c.sub("t", "c", rdy=1)
        first = c.read_message()
        assert first.body == b"now-0"
        seen = peek(b, n=10)
        states = [(m["state"], base64.b64decode(m["body"])) for m in seen["messages"]]
        # queued first, then deferred by due time, then in flight
        assert states == [("queued", b"now-1"), ("queued", b"now-2"), ("deferred", b"later-1"),
                          ("deferred", b"later-0"), ("in_flight", b"now-0")]
        assert seen["deferred_count"] == 2 and seen["in_flight_count"] == 1
        later1, later0, flying = seen["messages"][2:]
        assert t0 + 29e9 < later1["due_ns"] < t0 + 32e9
        assert t0 + 59e9 < later0["due_ns"] < t0 + 62e9
        assert flying["id"] == first.id.decode() and flying["attempts"] == 1
        assert flying["client"]["client_id"] == "peeker"
        assert t0 + 45e9 < flying["deadline_ns"] < t0 + 52e9
        # one kind at a time
        assert [m["state"] for m in peek(b, state="deferred")["messages"]] == ["deferred"] * 2
        assert [m["id"] for m in peek(b, state="in_flight")["messages"]] == [first.id.decode()]
        assert bodies(peek(b, state="queued", n=1)) == [b"now-1"]
        # the REQ'd one is queued again (RDY 0: it stays there), its attempt kept
        c.send(wire.rdy(0))
        c.send(wire.req(first.id, 0))
        wait_for(lambda: peek(b, state="in_flight")["messages"] == [], what="the REQ")
        after = peek(b)["messages"]
        assert [(m["state"], m["attempts"], base64.b64decode(m["body"])) for m in after[:3]] == [
            ("queued", 0, b"now-1"), ("queued", 0, b"now-2"), ("queued", 1, b"now-0")]


def test_binary_bodies_json_and_raw_and_truncation(make_broker):
    b = make_broker()
    make_channel(b)
    every_byte = bytes(range(256)) * 4
    big = os.urandom(10_000)
    publish(b, "t", [every_byte, big, b"\0"])
    seen = peek(b)
    assert bodies(seen) == [every_byte, big[:4096], b"\0"]
    assert [(m["body_size"], m["truncated"]) for m in seen["messages"]] == [(1024, False), (10_000, True), (1, False)]
    assert bodies(peek(b, max_body=20_000))[1] == big
    assert bodies(peek(b, max_body=0)) == [b"", b"", b""]
    status, raw, headers = b.http("GET", "/channel/peek?topic=t&channel=c&format=raw&max_body=100")
    assert status == 200 and headers["Content-Type"] == "application/octet-stream"
    parsed = parse_raw(raw)
    assert [m["body"] for m in parsed] == [every_byte[:100], big[:100], b"\0"]
    assert [(m["body_size"], m["truncated"], m["state"], m["attempts"]) for m in parsed] == [
        (1024, True, "queued", 0), (10_000, True, "queued", 0), (1, False, "queued", 0)]
    assert [(m["id"], m["timestamp"]) for m in parsed] == [(m["id"], m["timestamp"]) for m in seen["messages"]]


def test_topic_peek(make_broker):
    """A topic without channels shows what it keeps for its first; a paused one its held
    backlog; one whose messages flow to its channels is a 400."""
    b = make_broker("--mem-queue-size", "100")
    msgs = [b"a%d" % i for i in range(250)]
    publish(b, "t", msgs, batch=10)
    seen = peek(b, "/topic/peek", n=1000)
    assert bodies(seen) == msgs and seen["channels"] == [] and seen["depth"] == 250
    make_channel(b)
    status, body, _ = b.http("GET", "/topic/peek?topic=t")
    assert (status, orjson.loads(body)) == (400, {"message": "TOPIC_HAS_CHANNELS"})
    assert bodies(peek(b, n=1000)) == msgs  # the first channel took them
    b.http("POST", "/topic/pause?topic=t")
    publish(b, "t", [b"held-0", b"held-1"])
    held = peek(b, "/topic/peek")
    assert held["paused"] and bodies(held) == [b"held-0", b"held-1"]
    assert peek(b, n=1000)["depth"] == 250  # not the channel's yet


def test_pynsq_reads_what_the_peek_showed(make_broker):
    nsq = pytest.importorskip("nsq")
    b = make_broker("--mem-queue-size", "100")
    make_channel(b)
    msgs = [b"py-%03d" % i for i in range(150)]
    publish(b, "t", msgs, batch=10)
    seen = peek(b, n=150)

    async def read_all() -> list:
        got: list = []

        def handler(message) -> bool:
            got.append((message.id, message.attempts, message.body))
            return True

        reader = nsq.Reader("t", "c", handler, nsqd_tcp_addresses=[b.tcp_address], max_in_flight=1)
        await await_for(lambda: len(got) >= 150, timeout=30, what="pynsq to read 150")
        reader.connect_to_nsqd = lambda *a, **k: None
        reader.close()
        await await_for(lambda: not reader.conns, what="pynsq to close")
        return got

    got = asyncio.run(read_all())
    assert [(i.decode() if isinstance(i, bytes) else i, a, body) for i, a, body in got] == [
        (m["id"], 1, base64.b64decode(m["body"])) for m in seen["messages"]]


def test_router_kill9_then_the_same_answer(make_broker):
    """kill -9 of the router mid-way: after its recovery the peek shows the same messages
    (memory, files, deferred), and consuming them loses none."""
    b = make_broker("--routers", "1", "--mem-queue-size", "100", "--max-bytes-per-file", str(64 * 1024))
    make_channel(b)
    msgs = [b"k-%03d-" % i + b"x" * 200 for i in range(300)]
    publish(b, "t", msgs, batch=20)
    with Connection.connect(b.tcp_address) as p:
        p.identify()
        p.send(wire.dpub("t", 120_000, b"deferred"))
        p.expect_ok()
    before = peek(b, n=1000)
    assert len(before["messages"]) == 301 and before["messages"][-1]["state"] == "deferred"
    (title,) = [t for t in b.children() if "router" in t]
    old = b.children()[title]
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: b.children().get(title) not in (None, old), timeout=15, what="a new router")

    def answered() -> dict | None:
        status, body, _ = b.http("GET", "/channel/peek?topic=t&channel=c&n=1000")
        return orjson.loads(body) if status == 200 else None

    wait_for(lambda: (r := answered()) is not None and len(r["messages"]) == 301, timeout=15,
             what="the recovered router's peek")
    after = answered()
    assert after is not None

    def key(m: dict) -> tuple:
        return m["id"], m["timestamp"], m["state"], m["body"]

    assert [key(m) for m in after["messages"]] == [key(m) for m in before["messages"]]
    assert abs(after["messages"][-1]["due_ns"] - before["messages"][-1]["due_ns"]) < 50e6
    got = consume(b, 300)
    assert sorted(m.body for m in got) == sorted(msgs)
    assert peek(b)["depth"] == 0 and bodies(peek(b)) == [b"deferred"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One broker for the error cases, with topic t and its channel c."""
    b = Broker(tmp_path_factory.mktemp("peek") / "data").start()
    make_channel(b)
    yield b
    assert b.stop() == 0, b.log_text()


@pytest.mark.parametrize("path, status, message", [
    ("/channel/peek?channel=c", 400, "MISSING_ARG_TOPIC"),
    ("/channel/peek?topic=t", 400, "MISSING_ARG_CHANNEL"),
    ("/channel/peek?topic=b%21d&channel=c", 400, "INVALID_TOPIC"),
    ("/channel/peek?topic=t&channel=b%21d", 400, "INVALID_CHANNEL"),
    ("/channel/peek?topic=nope&channel=c", 404, "TOPIC_NOT_FOUND"),
    ("/channel/peek?topic=t&channel=nope", 404, "CHANNEL_NOT_FOUND"),
    ("/channel/peek?topic=t&channel=c&n=0", 400, "INVALID_N"),
    ("/channel/peek?topic=t&channel=c&n=1001", 400, "INVALID_N"),
    ("/channel/peek?topic=t&channel=c&n=ten", 400, "INVALID_N"),
    ("/channel/peek?topic=t&channel=c&max_body=-1", 400, "INVALID_MAX_BODY"),
    ("/channel/peek?topic=t&channel=c&max_body=1048577", 400, "INVALID_MAX_BODY"),
    ("/channel/peek?topic=t&channel=c&state=gone", 400, "INVALID_STATE"),
    ("/channel/peek?topic=t&channel=c&format=xml", 400, "INVALID_FORMAT"),
    ("/channel/peek?topic=t&channel=c;x", 400, "INVALID_REQUEST"),
    ("/topic/peek", 400, "MISSING_ARG_TOPIC"),
    ("/topic/peek?topic=b%21d", 400, "INVALID_TOPIC"),
    ("/topic/peek?topic=nope", 404, "TOPIC_NOT_FOUND"),
    ("/topic/peek?topic=t&n=5000", 400, "INVALID_N"),
    ("/topic/peek?topic=t", 400, "TOPIC_HAS_CHANNELS"),
])
def test_errors(shared, path, status, message):
    broker = shared
    got, body, _ = broker.http("GET", path)
    assert (got, orjson.loads(body)) == (status, {"message": message})
    assert broker.http("GET", "/topic/peek?topic=nope")[0] == 404  # the peek made no topic


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_not_get_is_405(shared, method):
    broker = shared
    for path in ("/channel/peek?topic=t&channel=c", "/topic/peek?topic=t"):
        got, body, _ = broker.http(method, path)
        assert (got, orjson.loads(body)) == (405, {"message": "METHOD_NOT_ALLOWED"})


def test_peek_over_https(make_broker, tmp_path):
    """Where the API is served over HTTPS, so is the peek (the same routes)."""
    import http.client
    import re
    import ssl
    import subprocess

    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(crt), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    b = make_broker("--tls-cert", str(crt), "--tls-key", str(key), "--https-address", "127.0.0.1:0")
    make_channel(b)
    publish(b, "t", [b"secret"])
    port = int(re.search(r"HTTPS: listening on [\d.]+:(\d+)", b.log_text()).group(1))
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", "/channel/peek?topic=t&channel=c")
        resp = conn.getresponse()
        assert resp.status == 200
        assert bodies(orjson.loads(resp.read())) == [b"secret"]
    finally:
        conn.close()
