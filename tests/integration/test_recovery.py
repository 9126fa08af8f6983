"""Restart brings back what was acknowledged: topics, channels, undelivered, in-flight, deferred."""
from __future__ import annotations

import os
import signal
import time

from nsqmp.client import Connection
from nsqmp.client import wire
from nsqmp.diskqueue import acklog
from nsqmp.diskqueue.layout import topic_dir
from tests.harness import Broker, wait_for


def drain(addr: str, topic: str, channel: str, expect: int, timeout: float = 20.0, fin: bool = True) -> list:
    """Read until `expect` messages arrived (FIN'ing them) and nothing more comes for 0.5 s."""
    got = []
    with Connection.connect(addr, timeout=timeout) as c:
        c.identify()
        c.sub(topic, channel, rdy=2500)
        c.sock.settimeout(0.5 if expect == 0 else timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                m = c.read_message()
            except (TimeoutError, OSError):
                break
            got.append(m)
            if fin:
                c.fin(m.id)
            if len(got) >= expect:
                c.sock.settimeout(0.5)
        c.send(wire.NOP)
    return got


def publish(addr: str, topic: str, bodies: list[bytes], batch: int = 100) -> None:
    with Connection.connect(addr) as p:
        for i in range(0, len(bodies), batch):
            p.mpub(topic, bodies[i:i + batch])


def restart(b: Broker, how: str) -> Broker:
    if how == "kill":
        b.kill()
    else:
        assert b.stop() == 0
    return Broker(b.data_path, "--tcp-address", b.tcp_address, "--http-address", b.http_address).start()


def scenario(tmp_path, how: str) -> None:
    b = Broker(tmp_path / "data").start()
    try:
        # two channels; "a" finishes 300 of 1000 before the restart, "b" none
        for ch in ("a", "b"):
            with Connection.connect(b.tcp_address) as c:
                c.identify()
                c.sub("keep", ch)
        bodies = [b"m%04d" % i for i in range(1000)]
        publish(b.tcp_address, "keep", bodies)
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("keep", "a", rdy=300)
            done = []
            while len(done) < 300:
                m = c.read_message()
                c.fin(m.id)
                done.append(m.body)
            # 5 more in flight, never finished: must come back
            c.send(wire.rdy(305))
            inflight = [c.read_message().body for _ in range(5)]
            c.send(wire.NOP)
            # the FINs reach the router and its ack log
            keep = topic_dir(str(b.data_path), "keep")
            wait_for(lambda: len(list(acklog.read(keep))) >= 300, what="300 FINs in the ack log")
            with Connection.connect(b.tcp_address) as p:
                p.send(wire.dpub("keep", 4000, b"deferred"))
                p.expect_ok()
            b = restart(b, how)
        a_after = drain(b.tcp_address, "keep", "a", 700)
        a_bodies = [m.body for m in a_after]
        missing = set(bodies) - set(done) - set(a_bodies)
        assert not missing, f"lost {len(missing)} messages of channel a"
        assert set(inflight) <= set(a_bodies)
        dup = len(a_bodies) - len(set(a_bodies))
        assert dup == 0
        redelivered = set(done) & set(a_bodies)
        print(f"{how}: channel a got {len(a_bodies)} after restart, {len(redelivered)} duplicates of finished")
        b_after = drain(b.tcp_address, "keep", "b", 1001)
        b_bodies = {m.body for m in b_after}
        assert set(bodies) <= b_bodies, (len(b_after), len(set(bodies) - b_bodies), b.log_text()[-3000:])
        # the deferred message keeps its due time: not yet delivered, then delivered
        t_due = time.monotonic()
        late = drain(b.tcp_address, "keep", "a", 1, timeout=8.0)
        assert [m.body for m in late] == [b"deferred"]
        assert time.monotonic() - t_due < 8.0
        stats = b.stats(topic="keep")["topics"][0]
        names = sorted(c["channel_name"] for c in stats["channels"])
        assert names == ["a", "b"]
    finally:
        if b.proc.poll() is None:
            assert b.stop() == 0


def test_restart_after_sigterm_keeps_everything(tmp_path):
    scenario(tmp_path, "term")


def test_restart_after_kill_9_of_everything_loses_nothing(tmp_path):
    scenario(tmp_path, "kill")


def test_router_crash_recovers_its_topics(tmp_path):
    b = Broker(tmp_path / "data", "--routers", "1").start()
    try:
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("solo", "ch")
        bodies = [b"r%03d" % i for i in range(200)]
        publish(b.tcp_address, "solo", bodies)
        wait_for(lambda: b.stats(topic="solo")["topics"][0]["channels"][0]["depth"] == 200, what="queued")
        old = b.children()["nsqmp router 0"]
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: b.children().get("nsqmp router 0") not in (None, old), what="new router")
        got = drain(b.tcp_address, "solo", "ch", 200)
        assert {m.body for m in got} == set(bodies)
    finally:
        assert b.stop() == 0


def test_finished_segments_are_deleted(tmp_path):
    b = Broker(tmp_path / "data", "--max-bytes-per-file", "8192").start()
    try:
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("roll", "ch")
        publish(b.tcp_address, "roll", [b"x" * 200] * 300, batch=10)  # ~70 KiB in ~9 files
        topic_dir = tmp_path / "data" / "topics" / "roll"
        segs = [f for f in os.listdir(topic_dir) if f.endswith(".seg")]
        assert len(segs) > 3
        drain(b.tcp_address, "roll", "ch", 300)
        # every file but each acceptor's newest is gone once everything is finished
        wait_for(lambda: len([f for f in os.listdir(topic_dir) if f.endswith(".seg")]) <= 2,
                 what="finished segments deleted")
    finally:
        assert b.stop() == 0


def _counts(b: Broker) -> dict:
    out = {}
    for t in b.stats()["topics"]:
        out[t["topic_name"]] = {k: t[k] for k in ("depth", "message_count", "message_bytes", "paused")}
        for c in t["channels"]:
            out[(t["topic_name"], c["channel_name"])] = {
                k: c[k] for k in ("depth", "in_flight_count", "deferred_count", "message_count",
                                  "requeue_count", "timeout_count", "paused")}
    return out


def test_graceful_restart_keeps_every_count_identical(tmp_path):
    b = Broker(tmp_path / "data").start()
    try:
        for t, ch in (("g1", "x"), ("g1", "y"), ("g2", "z")):
            with Connection.connect(b.tcp_address) as c:
                c.identify()
                c.sub(t, ch)
        publish(b.tcp_address, "g1", [b"a%03d" % i for i in range(120)], batch=30)
        publish(b.tcp_address, "g2", [b"b%03d" % i for i in range(50)], batch=50)
        publish(b.tcp_address, "notopicchannel", [b"c%03d" % i for i in range(7)], batch=7)
        with Connection.connect(b.tcp_address) as p:
            p.send(wire.dpub("g1", 600_000, b"dpub-later"))
            p.expect_ok()
        with Connection.connect(b.tcp_address) as c:
            c.identify(msg_timeout=1000)
            c.sub("g1", "x", rdy=20)
            msgs = [c.read_message() for _ in range(20)]
            c.send(wire.rdy(0))  # no credit: requeued messages stay queued
            for m in msgs[:10]:
                c.fin(m.id)
            for m in msgs[10:14]:
                c.send(wire.req(m.id, 0))
            for m in msgs[14:17]:
                c.send(wire.req(m.id, 600_000))  # deferred for 10 minutes
            # msgs[17:20] time out (msg_timeout 1 s), while their consumer is still there
            wait_for(lambda: _counts(b)[("g1", "x")]["timeout_count"] == 3, what="3 timeouts")
            c.send(wire.NOP)
        wait_for(lambda: _counts(b)[("g1", "x")]["in_flight_count"] == 0, what="nothing in flight")
        before = _counts(b)
        assert before[("g1", "x")]["deferred_count"] == 4  # 3 REQ'd + the DPUB
        assert before[("g1", "x")]["timeout_count"] == 3
        b = restart(b, "term")
        after = _counts(b)
        assert after == before
    finally:
        if b.proc.poll() is None:
            assert b.stop() == 0


def test_attempts_survive_a_graceful_restart(tmp_path):
    b = Broker(tmp_path / "data").start()
    try:
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("att", "ch", rdy=1)
            with Connection.connect(b.tcp_address) as p:
                p.pub("att", b"once")
            first = c.read_message()
            assert first.attempts == 1
        b = restart(b, "term")  # in flight at the stop: requeued, its attempt remembered
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("att", "ch", rdy=1)
            again = c.read_message()
        assert (again.id, again.body, again.attempts) == (first.id, b"once", 2)
    finally:
        if b.proc.poll() is None:
            assert b.stop() == 0
