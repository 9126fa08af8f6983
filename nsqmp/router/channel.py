"""A channel: its queue, its consumers and the delivery state of every message it holds,
and the verbs on them (nsqd's channel.go): enqueue and defer, refill from the files,
FIN, REQ, TOUCH, time-outs, sample_rate, dropping a consumer, emptying.

One stored copy per message (a Message shared by every channel of the topic); what is
per channel is the queue entry (message, attempts) and the in-flight entry (message,
attempts, flight) in the channel's InFlightMap.

A channel reaches beyond itself only through what it is given: its topic (file
references, acks, the cap), the timer link (router/deadlines.py) and `mark`, which asks
the delivery pass (router/delivery.py) to serve it.
"""
from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from nsqmp.layouts import FRAME_SIZE, MESSAGE_FRAME_HEAD
from nsqmp.router.deadlines import Deadlines
from nsqmp.router.deadletter import divert
from nsqmp.router.filequeue import FileQueue
from nsqmp.router.flight import DEFER_SLOT_NS, Consumer, Deferred
from nsqmp.router.inflight import Flight, InFlightMap  # native/inflight.c, or its twin router/pyinflight.py
from nsqmp.router.readback import Message  # native/readback.c, or its twin router/pyreadback.py
from nsqmp.router.rewind import old_acks

if TYPE_CHECKING:
    from nsqmp.router.latency import E2eLatency
    from nsqmp.router.topic import Topic

__all__ = ["DEFER_SLOT_NS", "Channel", "Consumer", "Deferred", "Flight", "Message"]


def unmarked(ch: Channel) -> None:
    """The `mark` of a channel no delivery pass serves (a channel made alone, in tests)."""
    pass


def mono(wall_ns: int) -> int:
    """A wall-clock due time (stored with the message) on the monotonic clock."""
    return wall_ns - time.time_ns() + time.monotonic_ns()


@dataclass(eq=False)
class Channel:
    """One channel of a topic: its queues, its consumers, its in-flight map and its verbs."""

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
    # nsqmp's, for /metrics: handed to consumers, and FINished, since this router started
    # (not in meta.json's counts: its format stays as it is)
    delivery_count: int = 0
    finish_count: int = 0
    e2e: E2eLatency | None = None  # with --e2e-processing-latency-percentile
    # message TTL and dead letters (router/expiry.py, router/deadletter.py): dropped past
    # the topic's TTL, and sent to the dead-letter topic; max_attempts 0 = no dead letters
    expired_count: int = 0
    dead_letter_count: int = 0
    max_attempts: int = 0
    dead_letter_to: bytes = b""
    # in flight at a rewind: id(Message) -> (Message, the channel id then); their FINs are
    # acknowledged under that id, not the replay's (router/rewind.py)
    rewound: dict = field(default_factory=dict, repr=False)
    # the timer link, and the delivery pass's scheduling of this channel (Delivery.mark)
    deadlines: Deadlines = field(default_factory=lambda: Deadlines(0, 0, 1 << 16), repr=False)
    mark: Callable[[Channel], None] = field(default=unmarked, repr=False)
    _rr: int = 0

    # -- queueing ----------------------------------------------------------------------------
    def enqueue(self, entries: list, attempts: dict | None = None) -> None:
        """New (Message, due_ns) entries: ready now, or deferred until due.

        attempts (recovery only) maps a message to the attempts it had already made.
        Per message this is the router's busiest Python (a million DPUBs come through
        here): the clock offset is taken once per batch, a ready entry with no attempts
        is the (message, 0) tuple itself, and the segment references are added per run
        of messages of one file.
        """
        ready = self.ready
        slot_of = self.slot_of
        offset = time.monotonic_ns() - time.time_ns()  # a wall-clock due time -> monotonic
        n_deferred = 0
        seg_run, run = None, 0
        for entry in entries:
            m, due = entry
            tries = attempts.get(m, 0) if attempts else 0
            if due:
                slot_of(due + offset).entries.append((m, tries))
                n_deferred += 1
            elif tries:
                ready.append((m, tries))
            else:
                ready.append(entry)  # (m, 0): the ready entry (message, attempts) as it is
            seg = m.segment
            if seg is not seg_run:
                if seg_run is not None:
                    seg_run.refs += run
                seg_run, run = seg, 0
            run += 1
        if seg_run is not None:
            seg_run.refs += run
        self.deferred_count += n_deferred
        self.message_count += len(entries)
        self.mark(self)

    def defer(self, m: Message, attempts: int, deadline: int) -> None:
        """Hold m until deadline (monotonic ns), with the others due in that millisecond
        (Deferred): a new timer entry only for the first of them."""
        self.slot_of(deadline).entries.append((m, attempts))
        self.deferred_count += 1

    def slot_of(self, deadline: int) -> Deferred:
        """The Deferred for the millisecond of deadline (monotonic ns), made with its timer
        entry if it is the first due then."""
        slot = max(deadline, 0) // DEFER_SLOT_NS  # long past (a recovered message): due at once
        batch = self.deferred.get(slot)
        if batch is not None:
            return batch
        deadlines = self.deadlines
        batch = self.deferred[slot] = Deferred(deadlines.next_token(), self, slot, (slot + 1) * DEFER_SLOT_NS)
        deadlines.arm(batch)
        return batch

    def release_deferred(self, d: Deferred) -> int:
        """Slot d is due (FIRE): its messages are ready, in arrival order; how many."""
        del self.deferred[d.slot]
        self.ready.extend(d.entries)
        n = len(d.entries)
        self.deferred_count -= n
        return n

    def refill(self, want: int = 0) -> None:
        """Read the next records back from the files into the in-memory queue: `want` of
        them, or as many as the topic's in-memory share has room for."""
        want = want or self.topic.in_memory - len(self.ready)
        entries, deferred = self.pending.take(want)
        ready = self.ready
        if not deferred:  # (m, 0): the ready entry (message, attempts) as it is
            ready.extend(entries)
            return
        now = time.time_ns()
        for m, due in entries:
            if due > now:
                self.defer(m, 0, mono(due))
            else:
                ready.append((m, 0))

    # -- in flight (FIN, REQ, TOUCH, time-outs) ----------------------------------------------
    def finish(self, c: Consumer, rec: bytes, pos: int, bad: list[bytes]) -> int:
        """FIN of the 16-byte IDs in rec from pos on, by consumer c: how many were finished.
        IDs c does not have in flight go to `bad`, in order."""
        emptied: list[Flight] = []
        topic = self.topic
        # one C call (inflight.c + finrun.c): each owned ID leaves the map and its flight,
        # its ack log entry goes to topic.acks, its segment's refs drop; the segments
        # whose last reference went come back (the file may go)
        if not self.rewound:
            msgs, drained = self.in_flight.finish(rec, pos, c, bad, emptied, self.id, topic.acks)
        else:  # one test per FIN record; the per-message work only after a rewind
            acks = bytearray()
            msgs, drained = self.in_flight.finish(rec, pos, c, bad, emptied, self.id, acks)
            topic.acks += old_acks(self, msgs, acks)
        for f in emptied:  # a flight's timer entry goes with its last message
            self.retire(f)
        done = len(msgs)
        if not done:
            return 0
        if self.e2e is not None:
            now = time.time_ns()
            for m in msgs:
                self.e2e.insert(now - m.ts)
        c.in_flight -= done
        c.finish_count += done
        self.finish_count += done
        self.mark(self)
        for seg in drained:
            topic.release(seg, 0)
        if topic.full:
            topic.check_cap()
        topic.acks_due.add(topic)
        return done

    def requeue(self, msg_id: bytes, entry: tuple, delay_ms: int) -> None:
        """REQ of an in-flight entry (Message, attempts, Flight): back in the queue now
        (delay 0) or deferred; the delay is already clamped."""
        m, attempts, f = entry
        c = f.consumer
        self.in_flight.remove(msg_id)
        self.leave(f)
        c.in_flight -= 1
        self.mark(self)
        c.requeue_count += 1
        self.requeue_count += 1
        if self.max_attempts and attempts >= self.max_attempts:  # no more deliveries: a dead letter
            divert(self, [(m, attempts)])
        elif delay_ms:
            self.defer(m, attempts, time.monotonic_ns() + delay_ms * 1_000_000)
        else:
            self.ready.append((m, attempts))

    def ahead_count(self) -> int:
        """Messages in flight that were sent ahead and not written to their consumer: as
        nsqd counts, still in the queue (depth), not in flight."""
        return sum(c.ahead for c in self.consumers.values())

    def take_back(self, c: Consumer, frames) -> int:
        """Frames sent ahead to c, returned unwritten (UNSENT): each still in flight to c
        with the same attempt goes back to the head of the queue with that attempt not
        counted; how many did. The others were timed out or requeued meanwhile."""
        back = []
        in_flight = self.in_flight
        pos, end, seen = 0, len(frames), 0
        while pos + MESSAGE_FRAME_HEAD.size <= end:
            size, _, _, attempts, msg_id = MESSAGE_FRAME_HEAD.unpack_from(frames, pos)
            pos += FRAME_SIZE.size + size
            seen += 1
            entry = in_flight.get(msg_id)
            if entry is None or entry[2].consumer is not c or entry[1] != attempts:
                continue
            in_flight.remove(msg_id)
            self.leave(entry[2])
            back.append((entry[0], attempts - 1))
        c.ahead = max(0, c.ahead - seen)
        c.ahead_off = True  # stalled, closing or with a lower RDY: again once it FINs or REQs
        n = len(back)
        if n:
            c.in_flight -= n
            c.message_count -= n
            self.delivery_count -= n
            self.ready.extendleft(reversed(back))
            self.mark(self)
        return n

    def touch(self, msg_id: bytes, entry: tuple, max_msg_timeout_ns: int) -> None:
        """TOUCH of an in-flight entry: its deadline moves to now + the consumer's
        msg_timeout, never past delivered + max-msg-timeout."""
        m, attempts, f = entry
        c = f.consumer
        timeout = int(c.info.get("msg_timeout", 60000)) * 1_000_000
        deadline = min(time.monotonic_ns() + timeout, f.delivered + max_msg_timeout_ns)
        deadlines = self.deadlines
        if f.live > 1:  # it leaves its delivery pass's flight for one of its own
            self.leave(f)
            f = Flight(deadlines.next_token(), c, deadline, f.delivered, 1, [m, attempts])
            c.flights[f.token] = deadlines.tokens[f.token] = f
            self.in_flight.move(msg_id, f)
        f.deadline = deadline
        arms = deadlines.arms  # a new entry, or the same one moved (Deadlines.arm, inline: one TOUCH, one call)
        arms.append(f.token)
        arms.append(deadline)
        deadlines.wake()

    def leave(self, f: Flight) -> None:
        """A message has left flight f; the flight's timer entry goes with its last member."""
        f.live -= 1
        if not f.live:
            self.retire(f)

    def retire(self, f: Flight) -> None:
        """Flight f has no message left in it: forget it, and disarm its timer entry."""
        self.deadlines.forget(f.token)
        f.consumer.flights.pop(f.token, None)

    def time_out(self, f: Flight) -> int:
        """Flight f's deadline passed (FIRE): its messages still in it go back to the
        queue together; how many. (ground's two calls inline: one call per flight.)"""
        c = f.consumer
        del c.flights[f.token]
        if f.live * 2 == len(f.members):
            n = self.in_flight.expire(f.members, f, self.ready)
        else:
            n = self.in_flight.land(f.members, f, self.ready)
        f.live = 0
        c.in_flight -= n
        if c.ahead > c.in_flight:  # held ahead past a deadline (an acceptor stalled for seconds)
            c.ahead = c.in_flight
        self.timeout_count += n
        return n

    def ground(self, f: Flight, ready) -> int:
        """Flight f's messages still in it go back to `ready` (its consumer is gone); how
        many. A flight no member has left is one call that looks at none of them
        (InFlightMap.expire)."""
        if f.live * 2 == len(f.members):
            n = self.in_flight.expire(f.members, f, ready)
        else:
            n = self.in_flight.land(f.members, f, ready)
        f.live = 0
        return n

    def trim_flights(self, c: Consumer) -> None:
        """A flight keeps its members until the last leaves: drop those gone from big ones."""
        for f in c.flights.values():
            if len(f.members) > 128 and f.live * 8 < len(f.members):
                f.members = self.in_flight.alive(f.members, f)

    # -- consumers ---------------------------------------------------------------------------
    def with_credit(self) -> list[Consumer]:
        """Consumers that may take a message now, rotated so each gets its turn first."""
        ready = [c for c in self.consumers.values() if c.credit > 0]
        if len(ready) > 1:
            self._rr = (self._rr + 1) % len(ready)
            ready = ready[self._rr:] + ready[:self._rr]
        return ready

    def sample(self, c: Consumer) -> None:
        """IDENTIFY sample_rate: as nsqd's messagePump, each message this consumer would take
        is skipped unless a draw in 0..99 is at most the rate; a skipped message is gone
        for the channel (finished without being sent), so it is acknowledged here.
        Leaves at the head of the queue up to the consumer's credit of messages it keeps."""
        rate = int(c.info["sample_rate"])
        ready = self.ready
        keep: list = []
        skipped: list = []
        while ready and len(keep) < c.credit:
            entry = ready.popleft()
            if random.randrange(100) <= rate:
                keep.append(entry)
                continue
            m = entry[0]
            skipped.append(m)
            if m.segment is not None:
                topic = self.topic
                topic.ack(self, m.segment, m.offset)
                topic.release(m.segment)
                topic.acks_due.add(topic)
        ready.extendleft(reversed(keep))
        self.in_flight.forget(skipped)  # a timed-out one's slot, kept for its next flight

    def drop_consumer(self, c: Consumer) -> bool:
        """Forget a consumer and requeue what it had in flight at once, at the head of the
        queue; True when the channel is #ephemeral and has no consumer left (it goes)."""
        self.consumers.pop(c.conn, None)
        deadlines = self.deadlines
        # its own flights, not a walk of the channel's whole in-flight set
        back: deque = deque()
        for token, f in c.flights.items():
            self.ground(f, back)
            deadlines.forget(token)
        c.flights.clear()
        self.ready.extendleft(reversed(back))  # at the head, in the order they went out
        self.requeue_count += len(back)
        if back:
            self.mark(self)
            deadlines.wake()
        return self.ephemeral and not self.consumers

    def clear(self) -> None:
        """Drop every message the channel holds (queued, in flight, deferred): their file
        references go, and the timer forgets their deadlines."""
        topic = self.topic
        deadlines = self.deadlines
        for m, _ in self.ready:
            if m.segment is not None:
                topic.release(m.segment)
        for batch in self.deferred.values():
            deadlines.forget(batch.token)
            for m, _ in batch.entries:
                if m.segment is not None:
                    topic.release(m.segment)
        for m, _, _ in self.in_flight.entries():
            if m.segment is not None:
                topic.release(m.segment)
        for seg, count in self.pending.clear():
            topic.release(seg, count)
        self.ready.clear()
        self.in_flight.clear()
        self.rewound.clear()
        self.deferred.clear()
        self.deferred_count = 0
        for c in self.consumers.values():
            for token in c.flights:
                deadlines.forget(token)
            c.in_flight = c.ahead = 0  # (what its acceptor held ahead was recalled first)
            c.flights.clear()
        deadlines.wake()

    def stats(self, include_clients: bool) -> dict:
        """The channel's part of nsqd's /stats (with its clients when asked)."""
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
                    "in_flight_count": c.sent,
                    "message_count": c.message_count - c.ahead,
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
                    "nsqmp_ahead_count": c.ahead,  # sent ahead, held by its acceptor (acceptor/ahead.py)
                })
        ahead = self.ahead_count()
        return {
            "channel_name": self.name.decode(),
            "depth": len(self.ready) + len(self.pending) + ahead,
            "backend_depth": len(self.pending),
            "in_flight_count": len(self.in_flight) - ahead,
            "deferred_count": self.deferred_count,
            "message_count": self.message_count,
            "requeue_count": self.requeue_count,
            "timeout_count": self.timeout_count,
            "nsqmp_delivery_count": self.delivery_count,
            "nsqmp_finish_count": self.finish_count,
            "expired_count": self.expired_count,
            "dead_letter_count": self.dead_letter_count,
            "max_attempts": self.max_attempts,
            "dead_letter_topic": self.dead_letter_to.decode() if self.max_attempts else "",
            "client_count": len(self.consumers),
            "clients": clients,
            "paused": self.paused,
            "e2e_processing_latency": self.e2e.result() if self.e2e is not None
            else {"count": 0, "percentiles": None},
        }
