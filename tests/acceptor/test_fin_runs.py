"""When the acceptor leaves a scanned batch for Parser.fins(): only for a FIN run that
pays for the commands it scans again (nsqmp.acceptor.tcp.fin_run_worth_a_break), and a
consumer answering TOUCH, FIN, TOUCH, FIN, ... gets every answer taken, in order."""
from __future__ import annotations

import pytest

from nsqmp.acceptor.tcp import _FIN_RUN_BREAK, fin_run_worth_a_break
from nsqmp.client import Connection, wire
from nsqmp.protocol import pyparser
from tests.harness import native_module, wait_for
from tests.integration.test_timer_client import channel_stats

IDS = [b"%016x" % k for k in range(2000)]


@pytest.fixture(params=["native", "python"])
def scan(request):
    cls = native_module("Parser").Parser if request.param == "native" else pyparser.PyParser
    return cls(1 << 20, 1 << 20).scan


def test_alternating_touch_and_fin_never_leaves_the_batch(scan):
    buf = b"".join(wire.touch(i) + wire.fin(i) for i in IDS[:300])
    commands = scan(buf, 0)[0]
    assert len(commands) == 600
    fins = [k for k, c in enumerate(commands) if c[0][0] == b"FIN"]
    # each FIN is a run of one, followed by a TOUCH: taken in the batch
    assert all(fin_run_worth_a_break(commands, k) == k + 1 for k in fins[:-1])
    assert fin_run_worth_a_break(commands, fins[-1]) == 0  # the last ends the batch


def test_a_long_run_or_one_ending_the_batch_goes_to_fins(scan):
    head = wire.NOP
    long_run = b"".join(wire.fin(i) for i in IDS[:_FIN_RUN_BREAK])
    commands = scan(head + long_run + wire.NOP, 0)[0]
    assert fin_run_worth_a_break(commands, 1) == 0  # _FIN_RUN_BREAK FINs: worth it
    short = b"".join(wire.fin(i) for i in IDS[:_FIN_RUN_BREAK - 1])
    commands = scan(head + short + wire.NOP, 0)[0]
    assert fin_run_worth_a_break(commands, 1) == _FIN_RUN_BREAK  # the NOP after them
    commands = scan(head + short, 0)[0]
    assert fin_run_worth_a_break(commands, 1) == 0  # to the end of the batch


def test_a_consumer_answering_touch_then_fin_in_one_write(broker):
    """2,000 deliveries answered TOUCH + FIN in pipelined writes: every one finished, no
    error, and the TOUCHes reached the router (each gave its message a flight of its own)."""
    c = Connection.connect(broker.tcp_address)
    c.identify(msg_timeout=60000)
    c.sub("touchfin", "ch", rdy=0)
    with Connection.connect(broker.tcp_address) as p:
        for start in range(0, 2000, 200):
            p.mpub("touchfin", [b"m%d" % k for k in range(start, start + 200)])
    wait_for(lambda: channel_stats(broker, "touchfin", "ch")["depth"] == 2000, what="2000 queued")
    c.send(wire.rdy(2000))
    got = [c.read_message() for _ in range(2000)]
    assert len({m.id for m in got}) == 2000
    c.send(b"".join(wire.touch(m.id) + wire.fin(m.id) for m in got) + wire.NOP)
    stats = wait_for(lambda: (s := channel_stats(broker, "touchfin", "ch"))["in_flight_count"] == 0 and s,
                     what="all finished")
    assert (stats["depth"], stats["timeout_count"], stats["requeue_count"]) == (0, 0, 0), stats
    assert stats["clients"][0]["finish_count"] == 2000
    c.send(wire.fin(got[0].id))  # the connection is still fine: a FIN of a finished one fails
    assert c.read_frame().data == b"E_FIN_FAILED FIN %s failed ID not in flight" % got[0].id
    c.close()
