"""Back-pressure, all of it: why reading from a client is paused, and the publishers held
for a full ring (in the way of uvicorn's flow_control.py).

A connection stops being read for either of two reasons, each a bit of FlowControl.reasons;
it is read again once none is left:

- RING: the ring to a router is full (more than `RingHold.limit` records wait): the
  publisher that added to it is held until the endpoint says the rings drained;
- WAIT: a command waits for an answer from elsewhere (an auth server, a TLS handshake) and
  nothing after it may be read meanwhile, so responses stay in order.

A client that does not read what it is sent (the transport's pause_writing) is still read:
nsqd's IOLoop goes on reading commands that need no response (FIN, RDY, REQ, TOUCH), and a
consumer blocked sending its FINs while its deliveries back up would otherwise never
drain. What it is sent is bounded by its RDY, not by pausing its reads.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nsqmp.acceptor.tcp import V2Connection

RING, WAIT = 1, 2
# a publisher stops being read while more than this many records wait for a full ring
RING_BACKLOG_LIMIT = 256


class FlowControl:
    """One connection's reasons to be paused, and the transport they pause."""
    __slots__ = ("transport", "reasons")

    def __init__(self, transport: Any = None) -> None:
        self.transport = transport
        self.reasons = 0

    def pause_reading(self, reason: int) -> None:
        """Stop reading for `reason` (the transport is paused once, for the first reason)."""
        if not self.reasons and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self.reasons |= reason

    def resume_reading(self, reason: int) -> None:
        """`reason` is gone: read again if it was the last."""
        if not self.reasons & reason:
            return
        self.reasons &= ~reason
        if not self.reasons and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def switch(self, transport: Any) -> None:
        """The stream now runs over `transport` (start_tls), which reads until paused: WAIT
        is over, and any other reason pauses it again."""
        self.transport = transport
        self.reasons &= ~WAIT
        if self.reasons and not transport.is_closing():
            transport.pause_reading()

    @property
    def reading(self) -> bool:
        """No reason to pause is left."""
        return not self.reasons


class RingHold:
    """The acceptor's publishers held because a ring to a router filled up."""

    def __init__(self, limit: int = RING_BACKLOG_LIMIT) -> None:
        self.limit = limit  # records waiting for room past which a publisher is held
        self.held: set[V2Connection] = set()

    def hold(self, conn: V2Connection) -> None:
        """Stop reading from conn until the rings drain (the caller saw backlog > limit)."""
        if conn not in self.held:
            conn.flow.pause_reading(RING)
            self.held.add(conn)

    def release(self) -> None:
        """The rings have room again (Endpoint.on_unblocked): read the held publishers."""
        for conn in self.held:
            if not conn.closed:
                conn.flow.resume_reading(RING)
        self.held.clear()
