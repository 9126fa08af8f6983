"""The timer process's wake-up at its earliest deadline: one planned at a time.

``TimerfdWake`` (the default) arms a CLOCK_MONOTONIC timerfd at the deadline's
nanosecond (native/timerfd.c) and the loop watches the fd: the wake-up comes within the
kernel's timer slack. ``LoopWake`` uses the loop's own timer, which counts whole
milliseconds from a clock read once per iteration: 0-1 ms after the deadline (it is
used when ``NSQMP_PURE_PYTHON=1`` is set or the extension is missing). Both call back
at or after the deadline, never before it by the monotonic clock.
"""
from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable

_native: Any
try:
    from nsqmp import _native
except ImportError:  # extension not built
    _native = None


class LoopWake:
    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self.loop = loop
        self.callback = callback
        self._handle: asyncio.Handle | None = None
        self._deadline = 0

    def at(self, deadline_ns: int) -> None:
        """Call back at deadline_ns (time.monotonic_ns), instead of any earlier plan."""
        if self._handle is not None:
            self._handle.cancel()
        self._deadline = deadline_ns
        # whole milliseconds, rounded up; the loop counts them from its clock as read at
        # the start of its iteration, so the timer may still run early: _run plans again
        delay_ms = -(-(deadline_ns - time.monotonic_ns()) // 1_000_000)
        self._handle = self.loop.call_later(max(0, delay_ms) / 1000, self._run)

    def _run(self) -> None:
        self._handle = None
        if time.monotonic_ns() < self._deadline:
            self.at(self._deadline)
            return
        self.callback()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class TimerfdWake:
    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self.loop = loop
        self.callback = callback
        self.fd: int = _native.timerfd_open()
        self._open = True
        loop.add_reader(self.fd, self._ready)

    def at(self, deadline_ns: int) -> None:
        """Call back at deadline_ns (time.monotonic_ns), instead of any earlier plan."""
        _native.timerfd_arm(self.fd, max(1, deadline_ns))  # 0 would disarm

    def _ready(self) -> None:
        if _native.timerfd_clear(self.fd):
            self.callback()

    def close(self) -> None:
        if self._open:
            self._open = False
            self.loop.remove_reader(self.fd)
            os.close(self.fd)


Wake: Any
if (_native is not None and hasattr(_native, "timerfd_open")
        and os.environ.get("NSQMP_PURE_PYTHON", "") != "1"):
    Wake = TimerfdWake
else:
    Wake = LoopWake
