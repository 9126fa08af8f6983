"""A record handler that raises ends its process and the supervisor restarts it (fail
fast): a malformed CONFIG record (not JSON) is written on the broker's own timer-to-router
ring while the timer is stopped (so the ring keeps a single producer); the router's handler
raises on it, and the router must not run on."""
from __future__ import annotations

import os
import signal

from nsqmp.client import Connection
from nsqmp.ipc import mesh, records, shm
from nsqmp.ipc.ring import Ring
from tests.harness import wait_for


def _push(run_pid: int, ring_name: str, record: bytes) -> None:
    buf = shm.attach(mesh.Plan(run_pid, 1, 1, 0).shm_name(ring_name))
    ring = Ring(buf)
    try:
        assert ring.push_many([record])[0] == 1
    finally:
        del ring
        buf.close()


def test_a_router_whose_handler_raises_exits_and_is_restarted_and_nothing_is_lost(make_broker):
    broker = make_broker("--acceptors", "1", "--routers", "1")
    timer, router = broker.children()["nsqmp timer"], broker.children()["nsqmp router 0"]
    os.kill(timer, signal.SIGSTOP)
    try:
        _push(broker.proc.pid, "tr0", bytes((records.CONFIG,)) + b"{not json")
        # the router sleeps until a doorbell: a publish rings it, and it drains the timer's
        # ring (urgent) first
        assert broker.http("POST", "/pub?topic=handler_failure", b"kept")[:2] == (200, b"OK")
        slot = mesh.Plan(broker.proc.pid, 1, 1, 0).timer_slot
        wait_for(lambda: f"router 0 (pid {router}) died: exit code {mesh.HANDLER_FAILED_EXIT}; starting a "
                         "replacement" in broker.log_text(), what="the router's death in the supervisor's log")
    finally:
        os.kill(timer, signal.SIGCONT)
    log = broker.log_text()
    assert (f"the handler of a record of kind {records.CONFIG} (CONFIG) from slot {slot} raised; 0 popped "
            f"records after it were not handled: ending the process (exit {mesh.HANDLER_FAILED_EXIT})") in log
    assert "JSONDecodeError" in log  # the handler's traceback
    new = wait_for(lambda: (p if (p := broker.children().get("nsqmp router 0")) not in (None, router) else None),
                   what="a new router")
    assert broker.children()["nsqmp timer"] == timer  # only the failed process was restarted
    with Connection.connect(broker.tcp_address) as c:  # what was acknowledged is delivered
        c.identify()
        c.sub("handler_failure", "ch", rdy=1)
        m = c.read_message()
        assert m.body == b"kept"
        c.fin(m.id)
    assert broker.children()["nsqmp router 0"] == new
