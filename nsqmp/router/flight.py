"""What a channel hands out and holds back: its consumers, their flights, its deferred slots.

Plain data; the verbs that change them are the channel's (router/channel.py). Flight is
the one router/inflight.py picks to go with the channel's InFlightMap: the native one
(native/flight.h, whose struct native/inflight.c reads; the native map refuses any other
flight) or, with NSQMP_PURE_PYTHON=1, its twin in router/pyinflight.py. Both take
Flight(token, consumer, deadline, delivered, live=0, members=None).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nsqmp.router.inflight import Flight  # the native map reads its struct

if TYPE_CHECKING:
    from nsqmp.router.channel import Channel

__all__ = ["DEFER_SLOT_NS", "Consumer", "Deferred", "Flight"]


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
    flights: dict = field(default_factory=dict)  # token -> Flight: what it has in flight

    @property
    def credit(self) -> int:
        return 0 if self.closing else self.rdy - self.in_flight


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
