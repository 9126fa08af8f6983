"""Requests and SUBs see every publish answered before them (nsqmp.router.controls).

A publish answered OK on one acceptor and a request that reaches the router through the
other acceptor's ring: the router takes its rings in turn, so without a barrier the request
could be handled first. The routers are stopped (SIGSTOP) while both wait in the rings, so
the order they are found in on SIGCONT is the one a slow router would see.
"""
from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from nsqmp.client import Connection, wire
from nsqmp.ipc import records, shm
from nsqmp.ipc.control import ControlBlock
from nsqmp.launcher import Broker
from tests.harness import queued_kinds, wait_for
from tests.integration.test_timer_client import channel_stats

PRODUCERS = 8  # DPUBs on connections the kernel spreads over both acceptors
LATE = 8  # channel creations, spread the same way


@contextmanager
def routers_stopped(broker):
    routers = [pid for title, pid in broker.children().items() if title.startswith("nsqmp router")]
    assert routers
    for pid in routers:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in routers:
            os.kill(pid, signal.SIGCONT)


def in_rings(broker, kind: int, count: int, what: str) -> None:
    """Wait (the routers stopped) until `count` records of `kind` wait in the rings."""
    wait_for(lambda: queued_kinds(broker).count(kind) >= count, what=f"{what} in the rings")


def beat_of(broker, slot: int) -> int:
    """CLOCK_MONOTONIC ns of a child's last heartbeat, read from the control block."""
    block = ControlBlock.attach(shm.segment_name(broker.proc.pid, "control"))
    try:
        return block.read(slot)[3]
    finally:
        block.close()


def answered_dpubs(broker, topic: str) -> None:
    """PRODUCERS DPUBs on as many connections, each answered OK by its acceptor alone
    (the routers are stopped), due in a minute."""
    for i in range(PRODUCERS):
        with Connection.connect(broker.tcp_address) as conn:
            conn.send(wire.dpub(topic, 60_000, b"held-%d" % i))
            conn.expect_ok()


def check_only_early_got_them(broker, topic: str) -> None:
    early = channel_stats(broker, topic, "early")
    assert (early["deferred_count"], early["message_count"]) == (PRODUCERS, PRODUCERS), early
    for i in range(LATE):
        late = channel_stats(broker, topic, f"late{i}")
        assert (late["deferred_count"], late["depth"], late["message_count"]) == (0, 0, 0), late


@pytest.fixture(params=["2 acceptors", "1 acceptor"])
def any_broker(request, tmp_path):
    """The default broker (an acceptor per core: 2 here), and one acceptor, where the
    router skips the barrier: its one ring already carries everything in order."""
    # two acceptors with the kernel's hash, so the producers' requests come through both
    # (the default steering packs them on one)
    args = ("--acceptors", "2", "--acceptor-steering", "spread") if request.param == "2 acceptors" else ("--acceptors", "1")
    b = Broker(tmp_path / "one", *args).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log_text()


def test_channel_created_after_an_answered_dpub_does_not_get_it(any_broker):
    broker = any_broker
    assert broker.http("POST", "/topic/create?topic=t_order")[0] == 200
    assert broker.http("POST", "/channel/create?topic=t_order&channel=early")[0] == 200
    with ThreadPoolExecutor(LATE) as pool:
        with routers_stopped(broker):
            answered_dpubs(broker, "t_order")
            created = [pool.submit(broker.http, "POST", f"/channel/create?topic=t_order&channel=late{i}")
                       for i in range(LATE)]
            in_rings(broker, records.CONTROL, LATE, "the requests")  # behind or ahead of the DPUBs
        assert [f.result(timeout=20)[0] for f in created] == [200] * LATE
    check_only_early_got_them(broker, "t_order")


def test_channel_made_by_sub_after_an_answered_dpub_does_not_get_it(any_broker):
    broker = any_broker
    assert broker.http("POST", "/topic/create?topic=t_subord")[0] == 200
    assert broker.http("POST", "/channel/create?topic=t_subord&channel=early")[0] == 200
    consumers = [Connection.connect(broker.tcp_address) for _ in range(LATE)]
    for c in consumers:
        c.identify()
    with ThreadPoolExecutor(LATE) as pool:
        with routers_stopped(broker):
            answered_dpubs(broker, "t_subord")
            subs = [pool.submit(c.sub, "t_subord", f"late{i}") for i, c in enumerate(consumers)]
            in_rings(broker, records.SUB, LATE, "the SUBs")
        for f in subs:
            f.result(timeout=20)  # OK
    check_only_early_got_them(broker, "t_subord")
    for i in range(LATE):
        assert channel_stats(broker, "t_subord", f"late{i}")["client_count"] == 1
    for c in consumers:
        c.close()


def test_a_sub_whose_connection_closes_while_it_waits(broker):
    """The SUB's channel is made (nsqd's SUB makes it before anything else), without the
    consumer; an #ephemeral one is not, as nsqd deletes it with its last consumer."""
    assert broker.http("POST", "/topic/create?topic=t_subgone")[0] == 200
    with routers_stopped(broker):
        for channel in ("kept", "eph#ephemeral"):
            with Connection.connect(broker.tcp_address) as c:
                c.identify()
                c.send(wire.sub("t_subgone", channel))
        in_rings(broker, records.SUB, 2, "the SUBs")
        in_rings(broker, records.GONE, 2, "the GONEs")
    kept = channel_stats(broker, "t_subgone", "kept")
    assert (kept["client_count"], kept["clients"]) == (0, []), kept
    assert channel_stats(broker, "t_subgone", "eph#ephemeral", missing_ok=True) == {}
    # the channel works: a new consumer gets what is published to it
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub("t_subgone", "kept", rdy=1)
        assert broker.http("POST", "/pub?topic=t_subgone", b"after")[0] == 200
        assert c.read_message().body == b"after"


def test_a_stopped_acceptor_delays_requests_by_the_barrier_timeout_only(broker):
    """An acceptor that does not answer the barrier (stopped here; a dead one is forgotten
    at its successor's hello) holds requests for BARRIER_TIMEOUT, not for ever. The
    supervisor is stopped too, or it would kill the silent acceptor after its heartbeat
    timeout."""
    from nsqmp.router.controls import BARRIER_TIMEOUT

    assert broker.http("POST", "/topic/create?topic=t_stuck")[0] == 200
    (stopped,) = [pid for title, pid in broker.children().items() if title == "nsqmp acceptor 1"]
    os.kill(broker.proc.pid, signal.SIGSTOP)
    os.kill(stopped, signal.SIGSTOP)
    try:
        # the kernel may hand a connection to the stopped acceptor: it is never answered
        for _ in range(20):
            started = time.monotonic()
            try:
                status, _, _ = broker.http("POST", "/channel/create?topic=t_stuck&channel=c",
                                           timeout=BARRIER_TIMEOUT + 1.5)
            except TimeoutError:
                continue
            took = time.monotonic() - started
            break
        else:
            raise AssertionError("no request reached the running acceptor in 20 tries")
    finally:
        resumed = time.monotonic_ns()
        os.kill(stopped, signal.SIGCONT)
        # a fresh heartbeat before the supervisor looks again
        wait_for(lambda: beat_of(broker, 1) > resumed, what="acceptor 1's heartbeat")
        os.kill(broker.proc.pid, signal.SIGCONT)
    assert status == 200
    assert BARRIER_TIMEOUT - 0.1 <= took < BARRIER_TIMEOUT + 1.5
    assert "did not answer a barrier" in broker.log_text()
    assert channel_stats(broker, "t_stuck", "c")["depth"] == 0


def test_a_sub_waiting_when_its_acceptor_dies_makes_no_consumer(broker):
    """kill -9 of the acceptors while a SUB waits in the ring: the restarted acceptor's
    hello tells the router that connection is gone."""
    assert broker.http("POST", "/topic/create?topic=t_suborphan")[0] == 200
    acceptors = {title: pid for title, pid in broker.children().items() if title.startswith("nsqmp acceptor")}
    with routers_stopped(broker):
        c = Connection.connect(broker.tcp_address)
        c.identify()
        c.send(wire.sub("t_suborphan", "orphan"))
        in_rings(broker, records.SUB, 1, "the SUB")
        for pid in acceptors.values():
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: all(broker.children().get(t, pid) != pid for t, pid in acceptors.items()),
                 timeout=15, what="the acceptors' replacements")
        routers = sum(title.startswith("nsqmp router") for title in broker.children())
        in_rings(broker, records.A_HELLO, len(acceptors) * routers, "their hellos")
    c.close()
    wait_for(lambda: channel_stats(broker, "t_suborphan", "orphan", missing_ok=True), timeout=10,
             what="the SUB's channel")
    orphan = channel_stats(broker, "t_suborphan", "orphan")
    assert (orphan["client_count"], orphan["clients"]) == (0, []), orphan
