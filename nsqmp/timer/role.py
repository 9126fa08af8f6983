"""The timer process: owns every deadline and tells the owning router when one passes.

ARM and DISARM payloads go to the heap as they are (``arm_many`` / ``disarm_many``: no
Python object per entry). One wake-up (timer/wake.py: a timerfd, to the nanosecond) is
planned for the earliest deadline; it is moved only when a deadline earlier than the
planned wake-up arrives. When the earliest deadline moves later (DISARM, re-arm) the
planned wake-up stays: it finds nothing due and plans the next one, which costs less
than re-planning per record.
A wake-up pops what is due (at most ``FIRE_BATCH`` entries, the rest on the next loop
iteration) and sends each owner its tokens in FIRE records no larger than the ring allows.
"""

from __future__ import annotations

import time

from nsqmp import sched
from nsqmp.ipc import records
from nsqmp.roles import Role
from nsqmp.timer.heap import DeadlineHeap
from nsqmp.timer.wake import Wake

FIRE_BATCH = 65536  # entries popped per wake-up before the loop gets a turn
# A wake-up is planned at the end of the quantum its deadline falls in, never before the
# deadline: at most this late, and at most one wake-up per quantum however many distinct
# deadlines it holds (one per deadline cost 6x the CPU of the loop's millisecond timers)
WAKE_QUANTUM_NS = 250_000


def fire_chunk_bytes(ring_capacity: int) -> int:
    """Token bytes per FIRE record: the record (kind byte included) stays below max_record - 64."""
    return max(8, (ring_capacity // 4 - 64 - 1) // 8 * 8)


class Timer(Role):
    title = "nsqmp timer"
    # it sleeps until a deadline and works for a few microseconds: the shortest slice
    # lets its wake-ups preempt a busy router or acceptor instead of queueing behind them
    slice_ns = sched.MIN_SLICE_NS

    def __init__(
        self, opts, plan, generation: int, doorbells, control_name: str
    ) -> None:
        super().__init__(
            opts, plan, plan.timer_slot, generation, doorbells, control_name
        )
        self.heap = DeadlineHeap()
        self._wake: Wake | None = None  # made on first use, on self.loop
        self._wake_at: int | None = None
        self._chunk = fire_chunk_bytes(plan.ring_capacity)

    def started(self) -> None:
        for j in range(self.plan.routers):
            self.endpoint.send(self.plan.router_slot(j), records.t_hello())

    def on_record(self, src: int, rec: bytes) -> None:
        kind = rec[0]
        try:
            if kind == records.ARM:
                self.heap.arm_many(src, records.arm_entries(rec))
            elif kind == records.DISARM:
                self.heap.disarm_many(src, records.disarm_entries(rec))
            else:
                self.log.error("unexpected record kind %d from slot %d", kind, src)
                return
        except ValueError as exc:  # a truncated record: nothing of it was applied
            self.log.error("malformed record kind %d from slot %d: %s", kind, src, exc)
            return
        self._reschedule()

    def _reschedule(self) -> None:
        nxt = self.heap.next_deadline()
        if nxt is None or (self._wake_at is not None and self._wake_at <= nxt):
            return  # nothing to wait for, or the planned wake-up comes first
        if self._wake is None:
            self._wake = Wake(self.loop, self._fire)
        self._wake_at = nxt
        # at the end of its WAKE_QUANTUM_NS: deadlines that close together share a wake-up
        self._wake.at(-(-nxt // WAKE_QUANTUM_NS) * WAKE_QUANTUM_NS)

    def _fire(self) -> None:
        self._wake_at = None
        now = time.monotonic_ns()
        due = self.heap.pop_due(now, FIRE_BATCH)
        chunk = self._chunk
        popped = 0
        for owner, tokens in due:
            popped += len(tokens)
            if len(tokens) <= chunk:
                self.endpoint.send(owner, records.fire_packed(tokens))
                continue
            view = memoryview(tokens)
            for start in range(0, len(tokens), chunk):
                self.endpoint.send(owner, records.fire_packed(view[start : start + chunk]))
        if popped == FIRE_BATCH * 8:
            # more may be due: carry on once the loop has drained the rings
            self._wake_at = now  # so nothing plans a wake-up meanwhile
            self.loop.call_soon(self._fire)
        else:
            self._reschedule()

    def close_wake(self) -> None:
        """Release the wake-up's timerfd (a timer made in a test; a role's dies with it)."""
        if self._wake is not None:
            self._wake.close()
            self._wake = None
