"""OrderedControls (nsqmp.router.controls): the barrier's bookkeeping, on a real event loop.

The end-to-end behaviour (real broker, stopped processes) is in
tests/integration/test_request_order.py; here each branch is driven by hand: the router
is a plain object with the attributes the class uses, its endpoint a list of what was
sent.
"""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from nsqmp.ipc import records
from nsqmp.router import controls
from nsqmp.router.controls import OrderedControls
from tests.harness import await_for

ACCEPTORS = [0, 1]  # acceptor slots: plan.acceptor_slot(i) == i below


class Sent(list):
    def send(self, dst: int, rec: bytes) -> None:
        self.append((dst, bytes(rec)))


@pytest.fixture
def setup():
    loop = asyncio.new_event_loop()
    sent = Sent()
    plan = SimpleNamespace(acceptors=len(ACCEPTORS), acceptor_slot=lambda i: ACCEPTORS[i])
    router = SimpleNamespace(plan=plan, endpoint=sent, loop=loop, generation=3)
    answered: list[bytes] = []
    oc = OrderedControls(router, lambda src, rec: answered.append(rec))
    yield oc, sent, answered, loop
    loop.close()


def barriers(sent: Sent) -> list[tuple[int, int]]:
    """(slot, barrier id) of every BARRIER sent, and forget them."""
    out = [(dst, records.parse_barrier(rec)) for dst, rec in sent if rec[0] == records.BARRIER]
    sent.clear()
    return out


def ok(barrier: int) -> bytes:
    return records.barrier_ok(barrier)


def test_answered_once_every_acceptor_answered_in_order_and_later_ones_share_the_next(setup):
    oc, sent, answered, _ = setup
    oc.add(0, b"r1")
    first = barriers(sent)
    assert sorted(slot for slot, _ in first) == ACCEPTORS
    (bid,) = {b for _, b in first}
    assert bid >> 32 == 3  # the router's incarnation
    oc.add(1, b"r2")
    oc.add(0, b"r3")
    assert barriers(sent) == []  # one barrier at a time
    oc.on_ok(0, ok(bid))
    assert answered == []
    oc.on_ok(1, ok(bid - 1))  # a stale answer (an earlier barrier) counts for nothing
    assert answered == []
    oc.on_ok(1, ok(bid))
    assert answered == [b"r1"]
    second = barriers(sent)  # r2 and r3 arrived during the first: the next one covers both
    assert {b for _, b in second} == {bid + 1}
    oc.on_ok(1, ok(bid + 1))
    oc.on_ok(0, ok(bid + 1))
    assert answered == [b"r1", b"r2", b"r3"]
    assert barriers(sent) == []


def test_a_restarted_acceptor_is_forgotten(setup):
    oc, sent, answered, _ = setup
    oc.add(0, b"r1")
    (bid,) = {b for _, b in barriers(sent)}
    oc.on_ok(0, ok(bid))
    oc.forget(1)
    assert answered == [b"r1"]
    oc.forget(1)  # nothing under way: nothing happens
    oc.on_ok(1, ok(bid))  # the new incarnation answering the old barrier
    assert answered == [b"r1"]


def test_a_silent_acceptor_is_waited_for_the_timeout_only(setup, monkeypatch, caplog):
    oc, sent, answered, loop = setup
    monkeypatch.setattr(controls, "BARRIER_TIMEOUT", 0.05)
    oc.add(0, b"r1")
    (bid,) = {b for _, b in barriers(sent)}
    oc.on_ok(0, ok(bid))
    # answered once the timeout (50 ms) fires: within 0.2 s of the loop's time, as the
    # barrier's timer runs before a later check on the same loop however loaded it is
    loop.run_until_complete(await_for(lambda: answered, timeout=0.2, interval=0.005,
                                      what="r1 answered without the silent acceptor"))
    assert answered == [b"r1"]
    assert "did not answer a barrier" in caplog.text
    oc.on_ok(1, ok(bid))  # late: already answered
    assert answered == [b"r1"]


def test_a_failing_request_does_not_leave_the_others_unanswered(setup, caplog):
    oc, sent, answered, _ = setup

    def handle(src: int, rec: bytes) -> None:
        if rec == b"bad":
            raise RuntimeError("a bug")
        answered.append(rec)

    oc.handle = handle
    oc.add(0, b"r1")
    (bid,) = {b for _, b in barriers(sent)}
    oc.add(0, b"bad")
    oc.add(0, b"r2")
    for slot in ACCEPTORS:
        oc.on_ok(slot, ok(bid))
    (bid2,) = {b for _, b in barriers(sent)}
    for slot in ACCEPTORS:
        oc.on_ok(slot, ok(bid2))
    assert answered == [b"r1", b"r2"]
    assert "a request behind a barrier failed" in caplog.text


def test_one_acceptor_needs_no_barrier(setup):
    oc, sent, answered, _ = setup
    oc.router.plan.acceptors = 1
    oc.add(0, b"r1")
    oc.add(0, b"r2")
    assert answered == [b"r1", b"r2"]
    assert sent == []


def test_a_request_queued_while_a_batch_is_answered_gets_one_barrier(setup):
    oc, sent, answered, _ = setup
    oc.after_barrier(lambda: oc.after_barrier(lambda: answered.append(b"nested")))
    oc.add(0, b"r1")  # during the first barrier: the second covers it
    (bid,) = {b for _, b in barriers(sent)}
    for slot in ACCEPTORS:
        oc.on_ok(slot, ok(bid))
    assert answered == []
    second = barriers(sent)
    assert sorted(slot for slot, _ in second) == ACCEPTORS  # one barrier, not two
    (bid2,) = {b for _, b in second}
    for slot in ACCEPTORS:
        oc.on_ok(slot, ok(bid2))
    assert answered == [b"r1", b"nested"]
