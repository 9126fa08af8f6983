"""Control requests (stats, create, delete, empty, pause, ...) answered in causal order.

A client that was answered OK for a publish and then creates a channel expects the new
channel not to get that message; one that then reads /stats expects to see it counted.
The publish reached the router through the ring of the acceptor that took it, but the
request may come through another acceptor's ring, and overtake it: the router drains
its rings in turn, and an acceptor hands its records to the ring at the end of its tick.

So a router answers requests behind a barrier. For the requests waiting, it sends every
acceptor a BARRIER; an acceptor answers BARRIER_OK through the same ring as its
publishes, behind every record it queued before. When the last BARRIER_OK arrives, every
publish a client saw answered before sending its request has been handled, and the
requests are answered in the order they came. Requests arriving meanwhile wait for the
next barrier, so a busy router runs one barrier for many requests. With one acceptor
there is nothing to overtake, and no barrier.

A SUB that creates its channel waits for a barrier the same way (Subscriptions.on_sub), so
the new channel does not get a deferred message answered on the other acceptor first.

An acceptor that restarts never answers the barrier its old incarnation was sent (its
records are rescanned from its files at the hello); one that does not answer within
BARRIER_TIMEOUT is not waited for longer.
"""
from __future__ import annotations

import logging
from functools import partial
from typing import Callable

from nsqmp.ipc import records

log = logging.getLogger("nsqmp.router")

BARRIER_TIMEOUT = 2.0  # s: well above a loaded acceptor's tick, below a client's 5 s


class OrderedControls:
    def __init__(self, router, handle: Callable[[int, bytes], None]) -> None:
        self.router = router
        self.handle = handle
        self.waiting: list[Callable[[], None]] = []  # what to do once the barrier is passed
        self._covered = 0  # how many of `waiting` the barrier under way answers
        # ids carry the router's incarnation: a BARRIER_OK left in a ring by an acceptor
        # answering our previous incarnation never matches ours
        self._barrier = (router.generation & 0xFFFFFF) << 32
        self._owed: set[int] = set()  # acceptor slots whose BARRIER_OK is still to come
        self._timer = None

    def add(self, src: int, rec: bytes) -> None:
        """A CONTROL record from the acceptor at slot src: answered behind a barrier."""
        self.after_barrier(partial(self.handle, src, rec))

    def after_barrier(self, then: Callable[[], None]) -> None:
        if self.router.plan.acceptors == 1:
            # one acceptor: its ring alone carries everything, already in order
            _run(then)
            return
        self.waiting.append(then)
        if not self._covered:
            self._start()

    def _start(self) -> None:
        plan = self.router.plan
        self._barrier += 1
        self._covered = len(self.waiting)
        self._owed = {plan.acceptor_slot(i) for i in range(plan.acceptors)}
        rec = records.barrier(self._barrier)
        for slot in self._owed:
            self.router.endpoint.send(slot, rec)
        self._timer = self.router.loop.call_later(BARRIER_TIMEOUT, self._expired, self._barrier)

    def on_ok(self, src: int, rec: bytes) -> None:
        barrier = records.parse_barrier_ok(rec)
        if barrier == self._barrier:
            self._answered(src)

    def forget(self, src: int) -> None:
        """The acceptor at slot src restarted: the barrier it was sent died with it."""
        self._answered(src)

    def _answered(self, src: int) -> None:
        if self._covered and src in self._owed:
            self._owed.discard(src)
            if not self._owed:
                self._finish()

    def _expired(self, barrier: int) -> None:
        if barrier == self._barrier and self._covered:
            log.warning("acceptor slots %s did not answer a barrier within %.0fs: answering "
                        "%d requests without them", sorted(self._owed), BARRIER_TIMEOUT, self._covered)
            self._owed.clear()
            self._finish()

    def _finish(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch = self.waiting[:self._covered]
        del self.waiting[:self._covered]
        self._covered = 0
        for then in batch:
            _run(then)
        if self.waiting and not self._covered:  # (one of them may have started it already)
            self._start()


def _run(then: Callable[[], None]) -> None:
    try:
        then()
    except Exception:  # a bug in one request must not leave the others unanswered
        log.exception("a request behind a barrier failed: %r", then)
