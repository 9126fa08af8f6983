"""What a channel hands out and holds back: its consumers and its deferred slots.

Plain data; the verbs that change them are the channel's (router/channel.py). A consumer's
flights are ``Flight`` of :mod:`nsqmp.router.inflight` (native/flight.h, a struct the
in-flight map reads directly; or its pure-Python twin).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsqmp.router.channel import Channel

__all__ = ["AHEAD_BYTES", "AHEAD_MIN_RDY", "AHEAD_MIN_TIMEOUT_MS", "DEFER_SLOT_NS", "Consumer", "Deferred"]

# A consumer with RDY at least AHEAD_MIN_RDY and a msg_timeout of at least
# AHEAD_MIN_TIMEOUT_MS is sent up to RDY more frames than its credit (its `reserve`, at
# most AHEAD_BYTES of them), which its acceptor holds and writes one for each FIN or REQ
# the consumer sends (nsqmp.acceptor.ahead): a FIN frees room at once, not after a trip
# through the router. Measured in docs/performance.md ("Frames sent ahead").
AHEAD_MIN_RDY = 100
AHEAD_MIN_TIMEOUT_MS = 1000
AHEAD_BYTES = 2 << 20


@dataclass(eq=False)
class Consumer:
    """A subscribed connection: its credit (RDY) and what it has in flight."""
    conn: int
    channel: "Channel"
    info: dict
    rdy: int = 0
    in_flight: int = 0
    message_count: int = 0
    finish_count: int = 0
    requeue_count: int = 0
    closing: bool = False
    flights: dict = field(default_factory=dict)  # token -> Flight (router/inflight.py): what it has in flight
    reserve: int = 0  # frames it may be sent ahead of its credit (set_rdy)
    ahead: int = 0  # of in_flight, frames sent ahead that its acceptor has not written (nor returned)
    ahead_off: bool = False  # some came back unwritten: none sent ahead until its next FIN or REQ

    @property
    def credit(self) -> int:
        """Messages it may be sent now: within its RDY, and ahead of it (up to `reserve`)
        while what it has is within its RDY."""
        if self.closing:
            return 0
        room = self.rdy - self.in_flight + self.ahead
        if room < 0:
            return 0
        return room if self.ahead_off else room + max(0, self.reserve - self.ahead)

    @property
    def sent(self) -> int:
        """In flight and written to the client (as far as the router knows)."""
        return self.in_flight - self.ahead

    def set_rdy(self, count: int, frame_size: int = 256) -> None:
        """RDY count; how many frames of about frame_size bytes may be sent ahead with it."""
        self.rdy = count
        ahead = count >= AHEAD_MIN_RDY and int(self.info.get("msg_timeout", 60000)) >= AHEAD_MIN_TIMEOUT_MS
        self.reserve = min(count, AHEAD_BYTES // max(frame_size, 1)) if ahead else 0


# Deferred messages of a channel due within the same DEFER_SLOT_NS share one timer entry
DEFER_SLOT_NS = 1_000_000


@dataclass(slots=True, eq=False)
class Deferred:
    """A channel's deferred messages due in one millisecond (DEFER_SLOT_NS): one token and
    one timer entry, which fires at the end of that millisecond, never before a due time.
    A million DPUBs spread over 20 s are 20,000 of these, not a million objects, tokens
    and timer entries."""
    token: int
    channel: "Channel"
    slot: int  # CLOCK_MONOTONIC ns // DEFER_SLOT_NS of every due time in it
    deadline: int  # CLOCK_MONOTONIC ns: the end of that slot
    entries: list = field(default_factory=list)  # (Message, attempts), in arrival order
