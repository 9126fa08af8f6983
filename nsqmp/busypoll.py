"""Busy polling: after work, an event loop keeps looking for more for a short while
before it sleeps.

On this machine kind (a 2-core VM) a process woken from sleep costs about 20 us before
it runs: a round trip between a client and a sleeping server pays that on every
request. A uvloop server that answers and goes to sleep does 16k round trips a second
over loopback; the same server polling for 50 us after each answer does 45k. While
polling, the loop has a callback ready, so it looks at its sockets and fds without
blocking (epoll with a zero timeout) and runs whatever arrived at once.

The window adapts, as Linux's halt-polling does for a virtual CPU. When the loop slept
and the next activity came within ``max_ns`` of the last one, a longer window would
have caught it: the window doubles (from ``_START_NS``, up to ``max_ns``). When it came
later, the poll before it was wasted: the window halves, and below ``_START_NS`` it is
0. A loop whose work comes further apart than ``max_ns`` soon stops polling, so it
costs nothing; one answering a steady conversation polls, and spends at most
``max_ns`` of CPU per quiet spell for it.

Polling pays only with a CPU to spare, so two rules keep it off a full machine:

- no window starts while the kernel's CPU pressure (PSI "some", read every 10 ms) is
  above 40 %: some task waited for a CPU two fifths of the time;
- a poller descheduled in the middle of its window (its next tick comes late) while the
  pressure is high (or unknown: no PSI) stops at once and starts no window for 1 ms.

Without them, PUB over 4 connections lost a fifth of its rate to acceptors polling while
the clients waited for a CPU, and delivery while publishing lost some too. A descheduling
at low pressure is no reason to stop: a one-connection publisher's client, woken by our
OK, lands on the poller's CPU now and then; a poller that then sleeps leaves both on that
CPU, taking turns, for good (PUB on 1 connection with the acceptor's spin below: 26-28k in
four runs of six when every descheduling stopped the poll, 38-41k in all when only those
at high pressure did; PUB on 4 connections the same either way).

A tick that polls on may look closer (``spin``, nsqmp.acceptor.hotspin): for up to
``_SPIN_NS`` of the window it spins in C on the socket where work comes next.
"""
from __future__ import annotations

import os
import time
from typing import Callable

_START_NS = 10_000
# A tick this long after the previous one, with no work between them, means the loop did
# not run meanwhile: another process had the CPU. Polling then takes the CPU from whoever
# needs it (a publisher, a router, a client on the same machine): the loop stops polling
# and starts none for _HOLD_OFF_NS.
_PREEMPTED_NS = 50_000
# A tick's spin (BusyPoll.spin) looks for work for at most this long: under _PREEMPTED_NS,
# and long enough for a client's round trip (5 us and 20 us gave the same PUB rate on one
# connection, 50 us less)
_SPIN_NS = 20_000
_HOLD_OFF_NS = 1_000_000
# The kernel's CPU pressure (PSI "some": the share of time in which some task waited for a
# CPU), read at most this often; the kernel aggregates it every 2 ms or so
_PRESSURE_EVERY_NS = 10_000_000
# No window starts while the pressure over the last reading's interval is above this.
# Polling lowers the pressure it is judged by: on a VM a task woken on an idle vCPU waits
# for it to come out of halt, and PSI counts that wait. Measured on this machine kind
# (2026-11-28, fresh brokers, 6 s runs, nsq's bench_writer; not polling / polling):
# PUB on 1 connection 28-32 % / 17-18 %; MPUB on 4 connections 27-36 % / 31-33 %; PUB on
# 4 connections 54-55 % / 56-57 %; 4 MPUB writers with 2 readers 86-88 % / 87 %. Earlier
# machines of the kind gave PUB on 1 connection 5-11 %, PUB on 4 connections 42-54 %.
# At 20 % a one-connection publisher's own round trips kept its acceptor from polling
# (18k PUB/s against 28k polling); 40 % lets the conversations poll and keeps the
# crowded rows (many publishers, publishers with readers) off it.
_PRESSURE_MAX = 0.4


class CpuPressure:
    """Whether tasks on this machine have lately waited for a CPU (/proc/pressure/cpu).
    Without the file (a kernel without PSI), never."""

    __slots__ = ("_fd", "_at", "_total_us", "high")

    def __init__(self, path: str = "/proc/pressure/cpu") -> None:
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = -1
        self._at = 0
        self._total_us = 0
        self.high = False

    def check(self, now: int) -> bool:
        """True if the pressure over the interval before the latest reading was high."""
        if self._fd < 0 or now - self._at < _PRESSURE_EVERY_NS:
            return self.high
        try:
            text = os.pread(self._fd, 256, 0)
            start = text.index(b"total=") + 6
            total = int(text[start:text.index(b"\n", start)])
        except (OSError, ValueError):
            self.close()
            return False
        if self._at:
            self.high = (total - self._total_us) * 1000 > _PRESSURE_MAX * (now - self._at)
        self._at, self._total_us = now, total
        return self.high

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self.high = False


class BusyPoll:
    __slots__ = ("_call_soon", "_clock", "max_ns", "window_ns", "_idle_since", "_busy",
                 "_scheduled", "_last_tick", "_hold_until", "pressure", "polls", "holds", "spin")

    def __init__(self, call_soon: Callable[[Callable[[], None]], object], max_ns: int,
                 clock: Callable[[], int] = time.monotonic_ns,
                 pressure: CpuPressure | None = None) -> None:
        self._call_soon = call_soon
        self._clock = clock
        self.max_ns = max(0, max_ns)
        self.window_ns = 0
        self._idle_since = 0  # when the loop last finished its work
        self._busy = False  # work came since the last tick
        self._scheduled = False  # a tick is queued: the loop is working or polling
        self._last_tick = 0
        self._hold_until = 0  # no polling before this time (the CPU was wanted)
        self.pressure = pressure
        self.polls = 0  # windows started
        self.holds = 0  # polls given up because the CPU was wanted
        # called on every tick that polls on with the window's time left, at most
        # _SPIN_NS: a closer look, for up to that long, at where work comes next
        # (nsqmp.acceptor.hotspin)
        self.spin: Callable[[int], None] | None = None

    def touch(self) -> None:
        """Work came (call it from the callback doing it)."""
        if not self.max_ns:
            return
        self._busy = True
        if self._scheduled:  # polling, or a tick already follows this work
            return
        # the loop slept before this work: would a longer window have caught it?
        now = self._clock()
        if now < self._hold_until or (self.pressure is not None and self.pressure.check(now)):
            # no window may start: no tick either (it would only note the end of this
            # work, a Python call and a loop callback per turn of a busy loop: 0.45 us,
            # about 4 % of a one-message PUB's acceptor CPU on 4 connections)
            self.window_ns = 0
            self._idle_since = now
            return
        if now - self._idle_since <= self.max_ns:
            self.window_ns = min(self.max_ns, max(2 * self.window_ns, _START_NS))
        elif self.window_ns:
            self.window_ns = 0 if self.window_ns < 2 * _START_NS else self.window_ns // 2
        if self.window_ns:
            self.polls += 1
        self._scheduled = True
        self._last_tick = now
        self._call_soon(self._tick)

    def _tick(self) -> None:
        """Runs after the callbacks of the loop's iteration: poll on, or let it sleep."""
        now = self._clock()
        if self._busy:
            self._busy = False
            self._idle_since = now
        elif now - self._last_tick > _PREEMPTED_NS and (self.pressure is None
                                                       or self.pressure.check(now)):
            self.window_ns = 0
            self._hold_until = now + _HOLD_OFF_NS
            self.holds += 1
        self._last_tick = now
        if now - self._idle_since < self.window_ns:
            if self.spin is not None:
                # the next tick is late by no more than the spin's time, unless the poller
                # was descheduled meanwhile (or the spin found work: then it is busy)
                spin_ns = min(_SPIN_NS, self.window_ns - (now - self._idle_since))
                self.spin(spin_ns)
                self._last_tick = now + spin_ns
            self._call_soon(self._tick)
        else:
            self._scheduled = False
