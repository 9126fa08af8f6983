"""A channel: its queue, its consumers and the delivery state of every message it holds.

One stored copy per message (a Message shared by every channel of the topic); what is
per channel is the queue entry (message, attempts) and the in-flight entry (message,
attempts, flight) in the channel's InFlightMap.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nsqmp.router.filequeue import FileQueue
from nsqmp.router.inflight import InFlightMap  # native/inflight.c, or its twin router/pyinflight.py
from nsqmp.router.readback import Message  # native/readback.c, or its twin router/pyreadback.py

if TYPE_CHECKING:
    from nsqmp.router.latency import E2eLatency
    from nsqmp.router.topic import Topic

__all__ = ["DEFER_SLOT_NS", "Channel", "Consumer", "Deferred", "Flight", "Message"]


@dataclass(eq=False)
class Consumer:
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


@dataclass(slots=True, eq=False)
class Flight:
    """The messages one delivery pass handed to one consumer: one deadline, one timer entry.

    A message leaves its flight when it is finished, requeued or touched (a TOUCH gives it
    a flight of its own); the timer entry is disarmed when the last one has left, and the
    flight's messages still in it time out together when it fires. Which members are
    still in it is the channel's InFlightMap's to say (each entry names its flight).
    """
    token: int
    consumer: Consumer
    deadline: int  # CLOCK_MONOTONIC ns
    delivered: int  # CLOCK_MONOTONIC ns; TOUCH never moves a deadline past delivered + max-msg-timeout
    live: int = 0  # members still in this flight
    # what it went out with, flat: Message, attempts, Message, attempts, ... (the map's
    # land/expire put them back in the queue from this; see native/inflight.c)
    members: list = field(default_factory=list)


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


@dataclass(eq=False)
class Channel:
    name: bytes
    topic: Topic
    ephemeral: bool = False
    paused: bool = False
    id: int = 0  # stable id in the topic's meta and ack log (0: ephemeral, never persisted)
    start: dict | None = None  # per acceptor stream: last record published before we existed
    ready: deque = field(default_factory=deque)  # (Message, attempts delivered so far)
    pending: FileQueue = field(default_factory=FileQueue)  # queued behind ready, still in the files
    in_flight: InFlightMap = field(default_factory=InFlightMap)  # message id -> (Message, attempts, Flight)
    deferred: dict = field(default_factory=dict)  # slot -> Deferred (its messages due then)
    deferred_count: int = 0  # messages in them
    consumers: dict = field(default_factory=dict)  # conn -> Consumer
    message_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0
    e2e: E2eLatency | None = None  # with --e2e-processing-latency-percentile
    _rr: int = 0

    def with_credit(self) -> list[Consumer]:
        """Consumers that may take a message now, rotated so each gets its turn first."""
        ready = [c for c in self.consumers.values() if c.credit > 0]
        if len(ready) > 1:
            self._rr = (self._rr + 1) % len(ready)
            ready = ready[self._rr:] + ready[:self._rr]
        return ready

    def stats(self, include_clients: bool) -> dict:
        clients = []
        if include_clients:
            for c in self.consumers.values():
                info = c.info
                clients.append({
                    "client_id": info.get("client_id", ""),
                    "hostname": info.get("hostname", ""),
                    "version": "V2",
                    "remote_address": info.get("remote_address", ""),
                    "state": 4 if c.closing else 3,
                    "ready_count": c.rdy,
                    "in_flight_count": c.in_flight,
                    "message_count": c.message_count,
                    "finish_count": c.finish_count,
                    "requeue_count": c.requeue_count,
                    "connect_ts": info.get("connect_ts", 0),
                    "sample_rate": info.get("sample_rate", 0),
                    "deflate": info.get("deflate", False),
                    "snappy": info.get("snappy", False),
                    "user_agent": info.get("user_agent", ""),
                    # omitempty in nsqd: present only for authorized connections
                    **{k: info[k] for k in ("authed", "auth_identity", "auth_identity_url") if info.get(k)},
                    "tls": info.get("tls", False),
                    "tls_cipher_suite": info.get("tls_cipher_suite", ""),
                    "tls_version": info.get("tls_version", ""),
                    "tls_negotiated_protocol": info.get("tls_negotiated_protocol", ""),
                    "tls_negotiated_protocol_is_mutual": info.get("tls_negotiated_protocol_is_mutual", False),
                    "topology_zone": "",
                    "topology_region": "",
                    "nsqmp_acceptor": info.get("acceptor", -1),
                })
        return {
            "channel_name": self.name.decode(),
            "depth": len(self.ready) + len(self.pending),
            "backend_depth": len(self.pending),
            "in_flight_count": len(self.in_flight),
            "deferred_count": self.deferred_count,
            "message_count": self.message_count,
            "requeue_count": self.requeue_count,
            "timeout_count": self.timeout_count,
            "client_count": len(self.consumers),
            "clients": clients,
            "paused": self.paused,
            "e2e_processing_latency": self.e2e.result() if self.e2e is not None
            else {"count": 0, "percentiles": None},
        }
