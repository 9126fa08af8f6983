"""The delivery pass: hand ready messages to consumers with credit, many frames per ring
record, and the scheduling of the router's tick around it.

A channel with something to deliver is marked (`mark`: a dict used as an ordered set, so
one a pass could not finish goes to the back). One loop callback, `tick`, runs the pass
over the marked channels and then the end of the tick (Router.end_tick: the ARMs and
DISARMs to the timer, the acks to the files), so the records of one tick reach the
timer in one go. `wake` asks for a tick with nothing to deliver (a lone ARM or DISARM).
"""
from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Callable

from nsqmp.ipc import records
from nsqmp.router.deadlines import Deadlines
from nsqmp.router.expiry import screen
from nsqmp.router.inflight import Flight  # native/flight.h, or its twin router/pyinflight.py
from nsqmp.router.readback import pack_members

if TYPE_CHECKING:
    from nsqmp.router.channel import Channel
    from nsqmp.router.flight import Consumer

# Messages one delivery pass hands out at most; more wait for the next pass, so that the
# FIREs, FINs and publishes on the rings are taken in between (a pass of a million
# messages would hold the loop, and every deadline, for about half a second)
PASS_MAX = 16_384
# Messages put in flight between two looks at the timer's ring during a pass (about 0.5 ms
# at a million in flight): a FIRE waits for no more than that, not for a consumer's RDY
FLY_STEP = 512
# Messages sent between two pushes of the pending frames to the acceptors' rings during a
# pass: the acceptors write the first consumers' frames to their sockets while the router
# still puts the later ones in flight, instead of waiting for the whole pass
SEND_STEP = 2048
# Messages a channel hands out before the pass turns to the next channel with consumers
# waiting (the channel goes to the back of the pass): a channel with a few messages just
# due does not wait behind one handing out thousands of timed-out ones
VISIT_MAX = 2048


def _nothing() -> None:
    pass


def _no_urgent() -> bool:
    return False


def _dropped(dst: int, rec: bytes) -> None:
    pass


class Delivery:
    """The marked channels, the pass that serves them, and the tick that runs it.

    schedule(callback) runs a callback soon on the loop; end_tick flushes what the tick
    queued; sends go to `send(dst, record)` (the endpoint once attached, or any sink)."""

    def __init__(self, deadlines: Deadlines, schedule: Callable[[Callable[[], None]], object],
                 end_tick: Callable[[], None], acceptor_slot: Callable[[int], int], max_chunk: int,
                 send: Callable[[int, bytes], None] = _dropped) -> None:
        self.deadlines = deadlines
        self.schedule = schedule
        self.end_tick = end_tick
        self.acceptor_slot = acceptor_slot
        self.max_chunk = max_chunk
        self.dirty: dict[Channel, None] = {}  # channels with something to deliver, in order
        self.scheduled = False
        self.refills: set[Channel] = set()  # channels to top up from the files (refill_soon)
        self.unpushed = 0  # messages sent since the last push to the rings
        # the rings (attach): sends, pushes, and the timer's FIREs taken during a pass
        self.send = send
        self.push: Callable[[], None] = _nothing
        self.urgent_waiting: Callable[[], bool] = _no_urgent
        self.drain_urgent: Callable[[], None] = _nothing

    def attach(self, endpoint, on_record: Callable[[int, bytes], None]) -> None:
        """Send through the router's endpoint; a FIRE waiting during a pass goes to on_record."""
        self.send = endpoint.send
        self.push = endpoint.flush
        self.urgent_waiting = endpoint.urgent_waiting
        self.drain_urgent = partial(endpoint.drain_urgent, on_record)

    # -- scheduling ----------------------------------------------------------------------------
    def mark(self, ch: Channel) -> None:
        """The channel has something to deliver (or consumers with new credit)."""
        self.dirty[ch] = None
        if not self.scheduled:
            self.scheduled = True
            self.schedule(self.tick)

    def wake(self) -> None:
        """A tick soon, even with nothing to deliver: for its end (ARMs, DISARMs, acks)."""
        if not self.scheduled:
            self.scheduled = True
            self.schedule(self.tick)

    def forget(self, ch: Channel) -> None:
        """The channel is gone: nothing to deliver from it."""
        self.dirty.pop(ch, None)

    def tick(self) -> None:
        """The delivery pass, then the end of the tick, then the top-ups it asked for."""
        self.scheduled = False
        top_up = self.run_pass() if self.dirty else []
        self.end_tick()
        for ch in top_up:  # after the sends above scheduled their flush
            self.refill_soon(ch)

    # -- the pass ------------------------------------------------------------------------------
    def run_pass(self) -> list[Channel]:
        """Serve the marked channels in turn, up to PASS_MAX messages; the channels whose
        in-memory queue is to be topped up from the files after it."""
        now = time.monotonic_ns()
        top_up: list[Channel] = []
        budget = PASS_MAX
        dirty = self.dirty
        self.unpushed = 0
        while dirty and budget > 0:
            ch = next(iter(dirty))
            del dirty[ch]
            if ch.paused:  # a paused topic's channels still deliver what they hold
                continue
            ready = ch.ready
            if ch.pending:
                if not ready:  # read now what the consumers can take now; the rest after this pass
                    credit = sum(c.credit for c in ch.consumers.values())
                    ch.refill(min(max(256, credit), ch.topic.in_memory, budget))
                top_up.append(ch)
            if ready and (ch.max_attempts or ch.topic.ttl_ns):  # TTL, dead letters: a test per channel when unset
                screen(ch, min(budget, sum(c.credit for c in ch.consumers.values())))
            if not ready:
                continue
            budget = self.serve(ch, budget, now)
            if budget <= 0:  # this channel may have more for its consumers: at the back
                dirty[ch] = None
        if dirty:  # the pass's budget ran out: the rest after what waits on the rings
            self.wake()
        return top_up

    def serve(self, ch: Channel, budget: int, now: int) -> int:
        """Hand ch's ready messages to its consumers with credit: one Flight (deadline,
        timer entry) and one run of DELIVER records per consumer; the budget left."""
        # kept here, across channel, flight and timer link, for speed: per message only the
        # native InFlightMap.fly and pack_frames run, and Python works per consumer
        ready = ch.ready
        in_flight = ch.in_flight
        deadlines = self.deadlines
        tokens = deadlines.tokens
        arm = deadlines.arms.append
        next_token = deadlines.next_token
        urgent_waiting = self.urgent_waiting
        visit = 0
        for c in ch.with_credit():
            if c.info.get("sample_rate"):
                ch.sample(c)
            n = min(c.credit, len(ready), budget)
            if n <= 0:
                break
            budget -= n
            # those within its RDY now, the rest ahead of it (Consumer.reserve)
            now_n = min(n, c.rdy - c.sent)
            c.ahead += n - now_n
            # one flight (deadline, timer entry) for everything this pass hands c
            deadline = now + int(c.info.get("msg_timeout", 60000)) * 1_000_000
            flight = Flight(next_token(), c, deadline, now, n)
            tokens[flight.token] = c.flights[flight.token] = flight
            arm(flight.token)
            arm(deadline)
            for start in range(0, n, FLY_STEP):
                in_flight.fly(ready, min(FLY_STEP, n - start), flight, flight.members, None)
                if urgent_waiting():  # a FIRE came meanwhile: its messages go back now
                    self.drain_urgent()
            c.in_flight += n
            c.message_count += n
            ch.delivery_count += n  # per consumer, as the two above: no work per message
            # out now: a connection has one SUB, so no other channel's frames would join these.
            # The frames are read from the flight's members (no pair per message): nothing
            # leaves a flight that is not due for minutes before the pass ends
            self.send_frames(c, flight.members, now_n)
            self.unpushed += n
            if self.unpushed >= SEND_STEP:
                self.unpushed = 0
                self.push()
            if urgent_waiting():
                self.drain_urgent()
            if not ready:
                break
            visit += n
            if visit >= VISIT_MAX and self.dirty:  # the other channels' turn
                self.dirty[ch] = None
                break
        return budget

    def send_frames(self, c: Consumer, members: list, now_n: int) -> None:
        """DELIVER records carrying the message frames of a flight's flat members (message,
        attempts, ...): up to max_chunk bytes of frames each (pack_members builds one
        record per call); the members from now_n on go as DELIVER_AHEAD."""
        conn = c.conn
        dst = self.acceptor_slot(records.conn_acceptor(conn))
        n = len(members) // 2
        send = self.send
        i = 0
        if now_n:
            head = records.deliver_head(conn)
            now = members if now_n == n else members[:2 * now_n]
            while i < now_n:
                data, i = pack_members(head, now, i, self.max_chunk)
                send(dst, data)
        if i < n:
            head = records.deliver_ahead_head(conn, c.rdy)
            while i < n:
                data, i = pack_members(head, members, i, self.max_chunk)
                send(dst, data)

    # -- topping up from the files ---------------------------------------------------------------
    def refill_soon(self, ch: Channel) -> None:
        """Top the channel's in-memory queue up from the files once it is half empty: in a
        callback of its own, after this pass's deliveries have gone out."""
        if len(ch.ready) >= ch.topic.in_memory // 2 or ch in self.refills:
            return
        if not self.refills:
            self.schedule(self.refill_all)
        self.refills.add(ch)

    def refill_all(self) -> None:
        """The top-ups refill_soon asked for, of the channels that still exist."""
        refills, self.refills = self.refills, set()
        for ch in refills:
            if ch.pending and ch.topic.channels.get(ch.name) is ch:
                ch.refill()
                if any(c.credit > 0 for c in ch.consumers.values()):
                    self.mark(ch)

