"""HTTP requests see every publish answered before them (nsqmp.router.controls).

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

from nsqmp.client import Connection, wire
from nsqmp.roles import BEAT_INTERVAL
from tests.integration.test_timer_client import channel_stats

PRODUCERS = 8  # DPUBs on connections the kernel spreads over both acceptors
LATE = 8  # channel creations, spread the same way


def test_channel_created_after_an_answered_dpub_does_not_get_it(broker):
    assert broker.http("POST", "/topic/create?topic=t_order")[0] == 200
    assert broker.http("POST", "/channel/create?topic=t_order&channel=early")[0] == 200
    routers = [pid for title, pid in broker.children().items() if title.startswith("nsqmp router")]
    assert routers
    producers = [Connection.connect(broker.tcp_address) for _ in range(PRODUCERS)]
    pool = ThreadPoolExecutor(LATE)
    for pid in routers:
        os.kill(pid, signal.SIGSTOP)
    try:
        for i, conn in enumerate(producers):
            conn.send(wire.dpub("t_order", 60_000, b"held-%d" % i))
            conn.expect_ok()  # answered by the acceptor alone: the routers are stopped
        created = [pool.submit(broker.http, "POST", f"/channel/create?topic=t_order&channel=late{i}")
                   for i in range(LATE)]
        time.sleep(0.5)  # the requests reach the rings, behind or ahead of the DPUBs
    finally:
        for pid in routers:
            os.kill(pid, signal.SIGCONT)
    assert [f.result(timeout=20)[0] for f in created] == [200] * LATE
    pool.shutdown()
    for conn in producers:
        conn.close()
    early = channel_stats(broker, "t_order", "early")
    assert (early["deferred_count"], early["message_count"]) == (PRODUCERS, PRODUCERS), early
    for i in range(LATE):
        late = channel_stats(broker, "t_order", f"late{i}")
        assert (late["deferred_count"], late["depth"], late["message_count"]) == (0, 0, 0), late


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
        os.kill(stopped, signal.SIGCONT)
        time.sleep(2 * BEAT_INTERVAL)  # a fresh heartbeat before the supervisor looks again
        os.kill(broker.proc.pid, signal.SIGCONT)
    assert status == 200
    assert BARRIER_TIMEOUT - 0.1 <= took < BARRIER_TIMEOUT + 1.5
    assert "did not answer a barrier" in broker.log_text()
    assert channel_stats(broker, "t_stuck", "c")["depth"] == 0
