"""The timer process: owns every deadline and tells the owning router when one passes."""
from __future__ import annotations

import asyncio
import time

from nsqmp.ipc import records
from nsqmp.roles import Role
from nsqmp.timer.heap import DeadlineHeap


class Timer(Role):
    title = "nsqmp timer"

    def __init__(self, opts, plan, generation: int, doorbells, control_name: str) -> None:
        super().__init__(opts, plan, plan.timer_slot, generation, doorbells, control_name)
        self.heap = DeadlineHeap()
        self._wake: asyncio.TimerHandle | None = None
        self._wake_at: int | None = None

    def started(self) -> None:
        for j in range(self.plan.routers):
            self.endpoint.send(self.plan.router_slot(j), bytes((records.T_HELLO,)))

    def on_record(self, src: int, rec: bytes) -> None:
        kind = rec[0]
        if kind == records.ARM:
            for token, deadline in records.unpack_arm(rec):
                self.heap.arm(src, token, deadline)
        elif kind == records.DISARM:
            for token in records.unpack_tokens(rec):
                self.heap.disarm(src, token)
        else:
            self.log.error("unexpected record kind %d from slot %d", kind, src)
            return
        self._reschedule()

    def _reschedule(self) -> None:
        nxt = self.heap.next_deadline()
        if nxt is None or nxt == self._wake_at:
            return
        if self._wake is not None:
            self._wake.cancel()
        self._wake_at = nxt
        delay = max(0.0, (nxt - time.monotonic_ns()) / 1e9)
        self._wake = self.loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._wake = None
        self._wake_at = None
        due: dict[int, list[int]] = {}
        for owner, token in self.heap.pop_due(time.monotonic_ns()):
            due.setdefault(owner, []).append(token)
        for owner, tokens in due.items():
            for start in range(0, len(tokens), 8192):
                self.endpoint.send(owner, records.tokens(records.FIRE, tokens[start:start + 8192]))
        self._reschedule()
