"""The mesh endpoint over real shared-memory rings and eventfd doorbells, in one process."""
from __future__ import annotations

import asyncio
import os
import struct

import pytest

from nsqmp.ipc import mesh, pyring, shm
from tests.harness import await_for, endpoint_pair


@pytest.fixture
def pair():
    with endpoint_pair() as ends:
        yield ends


def test_a_drain_inside_a_drain_does_nothing_and_order_is_kept(pair):
    acceptor, router, plan = pair
    for k in range(5):
        acceptor.send(plan.router_slot(0), b"%d" % k)
    acceptor.flush()
    seen, inner = [], []

    def handle(src, rec):
        seen.append(rec)
        if rec == b"1":
            acceptor.send(plan.router_slot(0), b"late")
            acceptor.flush()
            inner.append(router.drain(handle))  # re-entered: must not take "late" early

    assert router.drain(handle) == 5
    assert inner == [0]
    assert seen == [b"0", b"1", b"2", b"3", b"4"]
    assert router.drain(handle) == 1 and seen[-1] == b"late"


def test_the_urgent_source_is_drained_first_and_alone_on_demand(pair):
    """A router makes its timer urgent: FIREs go before what the acceptors sent, and a
    delivery pass can take them alone in its middle."""
    acceptor, router, plan = pair
    doorbells = router._doorbells
    timer = mesh.Endpoint(plan, plan.timer_slot, doorbells)
    try:
        router.make_urgent(plan.timer_slot)
        assert not router.urgent_waiting()
        acceptor.send(plan.router_slot(0), b"a1")
        acceptor.send(plan.router_slot(0), b"a2")
        acceptor.flush()
        timer.send(plan.router_slot(0), b"t1")
        timer.flush()
        seen = []
        assert router.drain(lambda src, rec: seen.append((src, rec))) == 3
        assert seen == [(plan.timer_slot, b"t1"), (plan.acceptor_slot(0), b"a1"), (plan.acceptor_slot(0), b"a2")]

        acceptor.send(plan.router_slot(0), b"a3")
        acceptor.flush()
        assert not router.urgent_waiting()  # the acceptor's record is not urgent
        timer.send(plan.router_slot(0), b"t2")
        timer.flush()
        assert router.urgent_waiting()
        seen.clear()
        inner = []

        def handle(src, rec):
            seen.append(rec)
            inner.append(router.drain_urgent(handle))  # inside a drain: nothing

        assert router.drain_urgent(handle) == 1
        assert seen == [b"t2"] and inner == [0] and not router.urgent_waiting()
        assert router.drain(lambda src, rec: seen.append(rec)) == 1 and seen[-1] == b"a3"
    finally:
        timer.close()


def test_urgent_records_go_between_two_records_of_another_ring(pair):
    """A FIRE arriving while a ring of publishes is handled waits for one record, not all."""
    acceptor, router, plan = pair
    timer = mesh.Endpoint(plan, plan.timer_slot, router._doorbells)
    try:
        router.make_urgent(plan.timer_slot)
        for k in range(4):
            acceptor.send(plan.router_slot(0), b"a%d" % k)
        acceptor.flush()
        seen = []

        def handle(src, rec):
            seen.append(rec)
            if rec == b"a1":  # the timer sends while the acceptor's records are handled
                timer.send(plan.router_slot(0), b"t")
                timer.flush()

        assert router.drain(handle) == 5
        assert seen == [b"a0", b"a1", b"t", b"a2", b"a3"]
    finally:
        timer.close()


@pytest.mark.parametrize("polls", [False, True], ids=["sleeps", "polls"])
def test_a_polling_endpoint_takes_records_without_a_doorbell_while_they_come(pair, polls, monkeypatch):
    """attach_to_loop's poll_while: after a drain that found records the endpoint looks
    again in POLL_INTERVAL instead of announcing sleep, so the producer's next record
    rings no doorbell; a drain that finds nothing announces sleep, and the record after
    that rings again. Without poll_while, every record sent to a sleeping endpoint rings."""
    import uvloop

    # "b" below must come before the poll after "a" looks: with the real millisecond, a
    # loaded machine (a CI run) sometimes took longer than that between two sends, the
    # poll found nothing and announced sleep, and "b" rang
    monkeypatch.setattr(mesh, "POLL_INTERVAL", 0.3)

    acceptor, router, plan = pair
    dst = plan.router_slot(0)
    bell = router.doorbell  # the one the acceptor rings (rings counts its writes)
    loop = uvloop.new_event_loop()
    seen: list[bytes] = []
    waiting: dict[bytes, object] = {}

    def handle(src, rec):
        seen.append(rec)
        fut = waiting.pop(rec, None)
        if fut is not None:
            fut.set_result(None)

    def send_and_wait(rec: bytes) -> None:
        waiting[rec] = loop.create_future()
        loop.call_soon(lambda: (acceptor.send(dst, rec), acceptor.flush()))
        loop.run_until_complete(asyncio.wait_for(waiting[rec], 5))

    # the ring's consumer_sleeping word, read through a mapping of our own: the endpoint
    # sets it when it announces sleep (and then polls no more), the producer clears it
    # when it rings
    ring = shm.attach(plan.shm_name(plan.inbound(dst)[plan.acceptor_slot(0)]))

    def asleep(when: str) -> None:
        loop.run_until_complete(await_for(
            lambda: struct.unpack_from("<I", ring, pyring.OFF_CONSUMER_SLEEPING)[0] == 1,
            timeout=5, interval=0.001, what=f"the endpoint to announce sleep {when}"))

    try:
        mesh.attach_to_loop(loop, router, handle, (lambda: True) if polls else None)
        asleep("after its first look found nothing")
        rings = bell.rings
        send_and_wait(b"a")
        assert bell.rings == rings + 1
        send_and_wait(b"b")  # sent right after "a" was taken
        assert bell.rings == rings + (1 if polls else 2)
        asleep("once quiet (a polling endpoint sleeps too)")
        send_and_wait(b"c")
        assert bell.rings == rings + (2 if polls else 3)
        assert seen == [b"a", b"b", b"c"]
    finally:
        loop.remove_reader(router.doorbell.fd)
        loop.close()
        ring.close()


def _kind(kind: int, body: bytes) -> bytes:
    return bytes((kind,)) + body


def test_a_raising_handler_stops_the_drain_and_names_the_kind_the_source_and_the_loss(pair):
    """No record is skipped silently: the drain stops at the raising record and says what
    it popped and did not handle (those are gone from the ring, hence fail fast)."""
    from nsqmp.ipc import records

    acceptor, router, plan = pair
    sent = [_kind(records.RDY, b"%d" % k) for k in range(3)] + [_kind(records.CONFIG, b"{bad json")]
    sent += [_kind(records.RDY, b"%d" % k) for k in range(3, 5)]
    for rec in sent:
        acceptor.send(plan.router_slot(0), rec)
    acceptor.flush()
    seen = []

    def handle(src, rec):
        if rec[0] == records.CONFIG:
            raise ValueError("a handler's bug")
        seen.append(rec)

    with pytest.raises(mesh.RecordError) as info:
        router.drain(handle)
    err = info.value
    assert (err.src, err.kind, err.unhandled) == (plan.acceptor_slot(0), records.CONFIG, 2)
    assert isinstance(err.__cause__, ValueError)
    assert "kind 13 (CONFIG) from slot 0 raised; 2 popped records after it were not handled" in str(err)
    assert seen == sent[:3]  # nothing after the raising record was handled
    assert router.drain(handle) == 0  # the endpoint is usable (not left "draining")...
    assert seen == sent[:3]  # ...and the two were popped: only a restart recovers them


def test_a_raising_urgent_handler_counts_the_other_rings_records_too(pair):
    acceptor, router, plan = pair
    timer = mesh.Endpoint(plan, plan.timer_slot, router._doorbells)
    try:
        router.make_urgent(plan.timer_slot)
        for k in range(4):
            acceptor.send(plan.router_slot(0), b"a%d" % k)
        acceptor.flush()

        def handle(src, rec):
            if rec == b"a1":  # a FIRE arrives in the middle of the acceptor's records
                timer.send(plan.router_slot(0), b"\x28bad")
                timer.send(plan.router_slot(0), b"\x28next")
                timer.flush()
            if rec == b"\x28bad":
                raise KeyError(rec)

        with pytest.raises(mesh.RecordError) as info:
            router.drain(handle)
        # the timer's next record and the acceptor's a2, a3 were popped and not handled
        assert (info.value.src, info.value.kind, info.value.unhandled) == (plan.timer_slot, 40, 3)
        assert "kind 40 (FIRE)" in str(info.value)
    finally:
        timer.close()


def test_an_endpoint_attached_to_a_loop_ends_its_process_when_a_handler_raises(pair, tmp_path):
    """A process (forked here) whose handler raises logs the kind and the source slot at
    error level and exits with HANDLER_FAILED_EXIT, without handling the next record."""
    import logging

    import uvloop

    from nsqmp.ipc import records

    acceptor, router, plan = pair
    log_path = tmp_path / "child.log"
    pid = os.fork()
    if pid == 0:  # the child: a router's loop whose handler has a bug
        try:
            handler = logging.FileHandler(log_path)
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            logging.getLogger().addHandler(handler)
            loop = uvloop.new_event_loop()

            def handle(src, rec):
                if rec[0] == records.FIRE:
                    raise ValueError("a handler's bug")
                (tmp_path / "handled").write_bytes(rec)  # never: the FIRE comes first

            mesh.attach_to_loop(loop, router, handle)
            loop.run_forever()
        finally:
            os._exit(0)  # only if the loop ended on its own: the test sees 0 and fails
    acceptor.send(plan.router_slot(0), _kind(records.FIRE, b"\x01\x02\x03"))
    acceptor.send(plan.router_slot(0), _kind(records.RDY, b"after"))
    acceptor.flush()
    router._doorbells[plan.router_slot(0)].ring()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == mesh.HANDLER_FAILED_EXIT
    text = log_path.read_text()
    assert ("ERROR nsqmp.ipc: the handler of a record of kind 40 (FIRE) from slot 0 raised; 1 popped records "
            "after it were not handled: ending the process (exit 70) so the supervisor restarts it") in text
    assert "ValueError: a handler's bug" in text  # the handler's traceback
    assert not (tmp_path / "handled").exists()


def test_a_dropped_oversized_record_does_not_leave_its_ring_blocked(pair, caplog):
    """A record larger than the ring allows is dropped with an error; when it was the only
    one waiting, the destination is not left blocked (else on_unblocked never fires and the
    publishers held behind it stay held)."""
    acceptor, router, plan = pair
    ring = acceptor.out[plan.router_slot(0)]
    unblocked = []
    acceptor.on_unblocked = lambda: unblocked.append(True)
    filler = b"x" * (ring.max_record - 64)
    sent = 0
    while True:  # fill the ring until a record waits
        acceptor.send(plan.router_slot(0), filler)
        acceptor.flush()
        sent += 1
        if acceptor._blocked:
            break
        assert sent < 64
    acceptor.send(plan.router_slot(0), b"y" * (ring.max_record + 1))
    assert router.drain(lambda src, rec: None) >= 1  # room again: the filler goes, the giant is dropped
    acceptor.flush()
    assert not acceptor._blocked
    assert unblocked == [True]
    assert "larger than the ring allows" in caplog.text


def test_send_now_pushes_at_once_unless_records_wait_and_keeps_the_order(pair):
    """A record sent now is on the ring before any flush when nothing waits for its slot;
    behind queued records it waits its turn; a full ring queues it like send()."""
    acceptor, router, plan = pair
    slot = plan.router_slot(0)
    seen: list[bytes] = []
    acceptor.send_now(slot, b"now")
    assert router.drain(lambda src, rec: seen.append(rec)) == 1 and seen == [b"now"]
    assert acceptor.out_peak[slot] > 0
    acceptor.send(slot, b"queued")
    acceptor.send_now(slot, b"behind")  # not before "queued"
    assert router.drain(lambda src, rec: seen.append(rec)) == 0
    acceptor.flush()
    assert router.drain(lambda src, rec: seen.append(rec)) == 2 and seen[1:] == [b"queued", b"behind"]
    ring = acceptor.out[slot]
    late = b"after the full ring".ljust(64, b".")
    sent = 0
    while ring.push(late[:63]):  # fill the ring until a record one byte shorter no longer fits
        sent += 1
    acceptor.send_now(slot, late)
    assert acceptor._pending[slot] == [late]
    assert router.drain(lambda src, rec: None, max_records=10_000) == sent
    acceptor.flush()
    assert router.drain(lambda src, rec: seen.append(rec)) == 1 and seen[-1] == late
