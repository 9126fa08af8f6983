"""The router's link to the timer: every deadline the timer holds for this router.

Each in-flight Flight and each Deferred slot has one token and one timer entry. ARMs
(token, deadline) and DISARMs (token) are queued here during a tick and sent to the
timer's ring at its end (Router.end_tick -> Deadlines.flush), many per record. A FIRE
names tokens whose deadline passed; `fire` hands each entry back to its channel.
"""
from __future__ import annotations

import itertools
import time
from array import array
from typing import TYPE_CHECKING, Callable, Iterable

from nsqmp.ipc import records
from nsqmp.lateness import FireLateness
from nsqmp.router.flight import DEFER_SLOT_NS, Deferred
from nsqmp.router.inflight import Flight

if TYPE_CHECKING:
    from nsqmp.router.channel import Channel


def _nothing() -> None:
    pass


class Deadlines:
    """Tokens and their entries, and the ARMs and DISARMs not yet sent to the timer."""

    def __init__(self, generation: int, timer_slot: int, max_chunk: int) -> None:
        self.tokens: dict[int, Flight | Deferred] = {}  # every deadline the timer holds for us
        # tokens carry the incarnation so a timer entry of a dead router never matches ours
        self.next_token = itertools.count((generation & 0xFFFFFF) << 40 | 1).__next__
        self.arms = array("Q")  # token, deadline, token, deadline... for the next ARM
        self.disarms: list[int] = []
        self.timer_slot = timer_slot
        self.max_chunk = max_chunk
        # asks for the end of the tick that sends what is queued (Delivery.wake)
        self.wake: Callable[[], None] = _nothing
        # how late FIREs are taken, per kind (nsqmp/lateness.py; /stats?include_timer=true)
        self.fire_lateness = {"timeouts": FireLateness(), "deferred": FireLateness()}

    def arm(self, entry: Flight | Deferred) -> None:
        """Register entry under its token and (re)arm its timer entry at entry.deadline."""
        self.tokens[entry.token] = entry
        self.arms.append(entry.token)
        self.arms.append(entry.deadline)
        self.wake()

    def forget(self, token: int) -> None:
        """The entry of token is gone: the timer's entry goes at the end of the tick."""
        self.tokens.pop(token, None)
        self.disarms.append(token)

    def rearm_all(self) -> None:
        """A new timer knows nothing: give it every deadline again (T_HELLO)."""
        arms = self.arms
        for entry in self.tokens.values():
            arms.append(entry.token)
            arms.append(entry.deadline)
        self.wake()

    def fire(self, tokens: Iterable[int]) -> set[Channel]:
        """Deadlines passed (FIRE): deferred slots and timed-out flights go back to their
        channels' queues; the channels touched, for one delivery pass to hand them out.
        One channel call per token (a flight or a slot), none per message."""
        pop = self.tokens.pop
        clock = time.monotonic_ns
        late_timeouts, late_deferred = self.fire_lateness["timeouts"], self.fire_lateness["deferred"]
        touched: set[Channel] = set()
        last = None
        for token in tokens:
            entry = pop(token, None)
            if entry is None:
                continue
            if isinstance(entry, Deferred):
                ch = entry.channel
                n = ch.release_deferred(entry)
                # counted from the slot's start: at most 1 ms more than from each due time
                late_deferred.add(clock() - entry.deadline + DEFER_SLOT_NS, n)
            else:  # a flight: its members still in it time out together
                ch = entry.consumer.channel
                n = ch.time_out(entry)
                if n:
                    late_timeouts.add(clock() - entry.deadline, n)
            if ch is not last:
                touched.add(ch)
                last = ch
        return touched

    def flush(self, send: Callable[[int, bytes], None]) -> None:
        """Send the queued ARMs and DISARMs to the timer, in records of max_chunk bytes."""
        timer = self.timer_slot
        if self.arms:
            arms, self.arms = self.arms, array("Q")
            step = 2 * max(1, self.max_chunk // records.TOKEN_DEADLINE.size)  # values: two per entry
            for start in range(0, len(arms), step):
                send(timer, records.arm_flat(arms[start:start + step]))
        step = max(1, self.max_chunk // records.TOKEN.size)
        while self.disarms:
            disarms, self.disarms = self.disarms[:step], self.disarms[step:]
            send(timer, records.disarm(disarms))
