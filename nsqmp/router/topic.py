"""A topic: its channels, the messages waiting for a first channel, and the verbs on
them (nsqd's topic.go): publish and adopt, fan-out, holding and releasing, the channels,
and max-topic-bytes. Its files, acks and high-water marks are router/topicfiles.py.

A topic reaches beyond itself only through its TopicLinks: the timer link and the
delivery pass's `mark` (for its channels), the acceptors (TOPIC_FULL), and the options.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from itertools import chain
from typing import Callable

from nsqmp.diskqueue import meta as metafile
from nsqmp.diskqueue.segment import drain_background
from nsqmp.ipc import records
from nsqmp.layouts import DUE, MESSAGE_FRAME_HEAD, MESSAGE_HEAD, RECORD_HEAD, blob_deferred
from nsqmp.protocol.names import is_ephemeral
from nsqmp.router import cap
from nsqmp.router.channel import Channel, unmarked
from nsqmp.router.deadlines import Deadlines
from nsqmp.router.deadletter import default_target
from nsqmp.router.filequeue import FileQueue, read_span
from nsqmp.router.latency import E2eLatency, aggregate
from nsqmp.router.readback import read_messages
from nsqmp.router.retention import Retention
from nsqmp.router.topicfiles import Segment, TopicFiles

__all__ = ["Segment", "Topic", "TopicLinks"]

_RECORD_OVERHEAD = RECORD_HEAD.size + MESSAGE_HEAD.size  # a record's bytes besides its body and due time
log = logging.getLogger("nsqmp.router")


def _nowhere(rec: bytes) -> None:
    pass


@dataclass(eq=False)
class TopicLinks:
    """What a topic's verbs reach beyond the topic; one for all of a router's topics."""
    deadlines: Deadlines = field(default_factory=lambda: Deadlines(0, 0, 1 << 16))
    mark: Callable[[Channel], None] = unmarked  # Delivery.mark
    to_acceptors: Callable[[bytes], None] = _nowhere  # a record for every acceptor (TOPIC_FULL)
    acks_due: set = field(default_factory=set)  # topics with acks for the end of the tick
    max_topic_bytes: int = 0  # the options (Router.apply_config keeps them current)
    topic_full_policy: str = "drop-oldest"
    msg_ttl_ns: int = 0  # --msg-ttl, --max-attempts: the defaults of new topics and channels
    max_attempts: int = 0
    dead_letters: object = None  # the router's DeadLetters (router/deadletter.py)
    retention_time: float = 0.0  # seconds; with retention_bytes: finished files kept for replay
    retention_bytes: int = 0


class Topic(TopicFiles):
    """A topic: its files (TopicFiles), its channels and what it holds for them."""

    def __init__(self, name: bytes, data_path: str, mem_queue_size: int,
                 links: TopicLinks | None = None) -> None:
        self.links = links if links is not None else TopicLinks()
        super().__init__(name, data_path, self.links.acks_due)
        if self.durable and (self.links.retention_time or self.links.retention_bytes):
            self.retention = Retention(self.links.retention_time, self.links.retention_bytes)
        self.mem_queue_size = mem_queue_size  # #ephemeral: what it holds at most (more are dropped)
        self.in_memory = mem_queue_size  # durable: queued as objects per channel before ranges
        self.channels: dict[bytes, Channel] = {}
        self.backlog: deque = deque()  # (Message, due_ns) held: no channel yet, or the topic is paused
        self.backlog_pending = FileQueue()  # more of them, behind the backlog, still in the files
        self.message_count = 0
        self.message_bytes = 0
        self.dropped = 0
        self.paused = False
        self.full = False  # refusing publishes (max-topic-bytes, policy refuse)
        self.e2e: tuple[float, tuple[float, ...]] | None = None  # (window s, percentiles)
        self.ttl_ns = self.links.msg_ttl_ns  # message TTL in force (0: none); router/expiry.py
        self.expired_count = 0  # expired while held at the topic (paused, or no channel yet)
        # a new topic while lookupds are configured: its messages wait here, unassigned,
        # until the lookupds said which channels the topic has elsewhere (nsqd's GetTopic)
        self.held: list[tuple[list, int]] | None = None  # (batch of (Message, due_ns), bytes)
        self.hold_start: dict = {}  # hwm when holding began: where those channels start

    @property
    def held_count(self) -> int:
        return sum(len(msgs) for msgs, _ in self.held) if self.held else 0

    # -- channels ----------------------------------------------------------------------------
    def get_channel(self, name: bytes, start: dict | None = None) -> Channel:
        """The channel, created if missing. The first one takes every message published
        before any channel existed (the backlog); a later one starts after the records
        adopted so far, or after `start` when given (where holding began, while held)."""
        ch = self.channels.get(name)
        if ch is not None:
            return ch
        if start is None and self.held is not None:
            start = self.hold_start  # the held messages are this channel's too
        first = not self.channels
        ch = self.add_channel(name, start=None if first else dict(start) if start is not None
                              else self.held_from())
        adopted: list = []
        if first and self.backlog and not self.paused:  # a paused topic keeps holding
            adopted = list(self.backlog)
            self.backlog.clear()
        if first and self.backlog_pending and not self.paused:
            ch.message_count += len(self.backlog_pending)
            ch.pending.extend(self.backlog_pending)  # their refs become the channel's
        self.save_meta()
        if adopted:
            for m, _ in adopted:  # the backlog's refs become the channel's
                if m.segment is not None:
                    m.segment.refs -= 1
            ch.enqueue(adopted)
        return ch

    def held_from(self) -> dict[int, tuple[int, int]]:
        """Per acceptor stream, the last record before what the topic holds (its backlog):
        the records after it are what a channel created now gets once they flow."""
        start = dict(self.hwm)
        seen: set[int] = set()
        for m, _ in self.backlog:
            seg = m.segment
            if seg is not None and seg.acceptor not in seen:
                seen.add(seg.acceptor)
                start[seg.acceptor] = (seg.seq, m.offset - 1)
        return start

    def add_channel(self, name: bytes, start: dict | None, cid: int = 0, paused: bool = False) -> Channel:
        """A new channel with these saved fields (recovery), or a new id in the meta."""
        ephemeral = is_ephemeral(name)
        links = self.links
        ch = self.channels[name] = Channel(name, self, ephemeral=ephemeral, paused=paused,
                                           deadlines=links.deadlines, mark=links.mark)
        if self.e2e is not None:
            ch.e2e = E2eLatency(*self.e2e)
        ch.max_attempts = links.max_attempts  # --max-attempts (a channel's own: router/deadletter.py)
        ch.dead_letter_to = default_target(self.name)
        if not ephemeral and self.durable:
            if not cid:
                cid = self.meta.next_channel_id
                self.meta.next_channel_id += 1
                self.meta.channels.append(metafile.ChannelMeta(name.decode(), cid, paused, start))
            ch.id = cid
            ch.start = start
        return ch

    def delete_channel(self, ch: Channel) -> bool:
        """Forget the channel and everything it holds; False if it was gone already."""
        if self.channels.pop(ch.name, None) is None:
            return False
        ch.clear()
        return True

    # -- publish -----------------------------------------------------------------------------
    def publish(self, acceptor: int, seq: int, offset: int, count: int, size: int,
                blob: memoryview | None) -> None:
        """Take a batch of `count` records, [offset, offset + size) of the acceptor's file
        seq: as a file range where it can, else as queue entries from blob, the records'
        copy, or (None) read from the file."""
        durable = seq != records.MEMORY_ONLY
        # records at or below the stream's high-water mark were already taken from the files
        # (a recovery or rescan may have seen part of this very batch): skip them one by one
        last = self.hwm.get(acceptor, (-1, -1)) if durable else (-1, -1)
        span_end = offset + size  # the batch's records are [offset, span_end) of seg
        if durable and (seq, span_end - 1) <= last:
            return
        seg = self.segment(acceptor, seq) if durable else None
        lazy: list[Channel | None] = []  # channels that take this batch as a file range
        deferred_batch = blob is not None and blob_deferred(blob)  # its first record's DEFER bit
        if (durable and self.held is None and not self.paused and size > 0 and (seq, offset) > last
                and not deferred_batch):  # the whole batch is new, not deferred, not held
            lazy = self.lazy()
            if len(lazy) == max(1, len(self.channels)):
                self.adopt_range(seg, offset, span_end, count)
                if self.links.max_topic_bytes:
                    self.check_cap()
                return
        if blob is None:
            assert seg is not None  # PUBLISH_AT: always durable
            try:
                blob = memoryview(read_span(seg.path, offset, size))
            except OSError as exc:
                # the records stay in the file (no refs taken, hwm not moved): a restart recovers them
                log.error("cannot read published records of %s: %s", seg.path, exc)
                return
        # every record of the batch as a (Message, due_ns) entry, in one call
        msgs, consumed, deferred = read_messages(blob, offset, size, seg)
        if durable and msgs and (seq, msgs[-1][0].offset) > last:
            self.hwm[acceptor] = (seq, msgs[-1][0].offset)
        if msgs and (seq, offset) <= last:  # part of the batch was taken from the files already
            msgs = [e for e in msgs if (seq, e[0].offset) > last]
            if msgs:
                consumed = offset + consumed - msgs[0][0].offset  # the new records are the batch's tail
                deferred = sum(1 for _, due in msgs if due)
        # bodies are what the records hold past each one's head, message header and (DEFER
        # records, those with a due time) due time
        nbytes = consumed - _RECORD_OVERHEAD * len(msgs) - DUE.size * deferred
        if not msgs:
            return
        if seg is not None:
            self.count_bytes(seg, consumed, len(msgs), span_end)
        self.adopt(msgs, nbytes, lazy, (seg, offset, span_end, count))
        if seg is not None and self.links.max_topic_bytes:
            self.check_cap()

    def lazy(self) -> list[Channel | None]:
        """Where a new batch goes as a file range rather than as objects: the durable
        channels that already hold their in-memory share (mem-queue-size messages) or have
        ranges queued; [None] for the topic's own backlog when it has no channel and is in
        the same state."""
        bound = self.in_memory
        if not self.channels:
            return [None] if self.backlog_pending or len(self.backlog) >= bound else []
        return [ch for ch in self.channels.values()
                if not ch.ephemeral and (ch.pending or len(ch.ready) >= bound)]

    def frame_size(self) -> int:
        """The mean size of the message frames of this topic so far (256 before any)."""
        if not self.message_count:
            return 256
        return self.message_bytes // self.message_count + MESSAGE_FRAME_HEAD.size

    def adopt_range(self, seg: Segment, start: int, end: int, count: int) -> None:
        """A batch of `count` records [start, end) of seg, left in the file for now."""
        size = end - start
        self.hwm[seg.acceptor] = (seg.seq, end - 1)  # past every record of the batch
        self.count_bytes(seg, size, count, end)
        self.message_count += count
        self.message_bytes += size - count * _RECORD_OVERHEAD
        self.queue_range((seg, start, end, count), list(self.channels.values()))

    def queue_range(self, span: tuple, channels: list[Channel]) -> None:
        """The records of span (segment, start, end, count) wait in the file: in each of
        these channels' file queues, or in the topic's own when there is no channel."""
        seg, start, end, count = span
        if not channels:
            self.backlog_pending.add(seg, start, end, count)
            seg.refs += count
            return
        for ch in channels:
            ch.pending.add(seg, start, end, count)
            seg.refs += count
            ch.message_count += count
            ch.mark(ch)

    def adopt(self, msgs: list, nbytes: int, lazy: list | None = None, span: tuple | None = None) -> None:
        """Take new (Message, due_ns) entries: fan out to every channel, or keep for the first.

        The channels in `lazy` take the whole batch as the file range `span` (segment,
        start, end, count) instead, and a lazy topic backlog ([None]) likewise.
        """
        if self.held is not None:  # a new topic waiting for the lookupds' channels
            self.hold(msgs, nbytes)
            return
        self.message_count += len(msgs)
        self.message_bytes += nbytes
        channels = list(self.channels.values())
        if lazy and span is not None and not self.paused:
            self.queue_range(span, [ch for ch in lazy if ch is not None])
            if not channels:
                return
            channels = [ch for ch in channels if ch not in lazy]
        if not channels or self.paused:  # held at the topic, as nsqd's topic messagePump
            if self.ephemeral:
                room = max(0, self.mem_queue_size - len(self.backlog))
                self.dropped += max(0, len(msgs) - room)
                msgs = msgs[:room]
            self.backlog.extend(msgs)
            for m, _ in msgs:
                if m.segment is not None:
                    m.segment.refs += 1
            return
        self.fan_out(msgs, channels)

    def fan_out(self, msgs: list, channels: list[Channel]) -> None:
        """A copy of every (Message, due_ns) for each channel."""
        for ch in channels:
            if ch.ephemeral or self.ephemeral:
                room = max(0, self.mem_queue_size - len(ch.ready))
                take = msgs[:room]
                self.dropped += len(msgs) - len(take)
            else:
                take = msgs
            ch.enqueue(take)

    def hold(self, msgs: list, nbytes: int) -> None:
        """A new topic waiting for the lookupds (router/lookup.py) keeps a batch for
        later; its messages keep their segment files alive meanwhile."""
        assert self.held is not None
        if self.ephemeral:
            room = max(0, self.mem_queue_size - self.held_count)
            self.dropped += max(0, len(msgs) - room)
            msgs = msgs[:room]
        for m, _ in msgs:
            if m.segment is not None:
                m.segment.refs += 1
        self.held.append((msgs, nbytes))

    def release_held(self) -> None:
        """Unpaused: hand what the topic held to its channels (without any it keeps them)."""
        if not self.channels:
            return
        if self.backlog_pending:  # held since before the topic had channels, still in the files
            pending = self.backlog_pending
            count = len(pending)
            channels = list(self.channels.values())
            for ch in channels[1:]:  # a copy of each range for every other channel
                for seg, start, end, n in pending.ranges:
                    ch.pending.add(seg, start, end, n)
                    seg.refs += n
            for ch in channels:
                ch.message_count += count
                ch.mark(ch)
            channels[0].pending.extend(pending)  # the topic's refs become the first channel's
        if not self.backlog:
            return
        held = list(self.backlog)
        self.backlog.clear()
        for m, _ in held:  # the topic's file references become the channels'
            if m.segment is not None:
                m.segment.refs -= 1
        self.fan_out(held, list(self.channels.values()))

    # -- max-topic-bytes (router/cap.py) -------------------------------------------------------
    def check_cap(self) -> None:
        """Apply topic-full-policy when the topic's files pass max-topic-bytes."""
        cap.check(self)

    # -- persistence and stats -----------------------------------------------------------------
    TOPIC_COUNTS = ("message_count", "message_bytes", "dropped")
    CHANNEL_COUNTS = ("message_count", "requeue_count", "timeout_count")
    MORE_COUNTS = ("expired_count", "dead_letter_count")  # written only when not 0

    def save_counts(self) -> None:
        """Record the /stats counters in the metadata (graceful stop)."""
        self.meta.counts = {k: getattr(self, k) for k in self.TOPIC_COUNTS}
        if self.expired_count:  # nsqmp's counters: in the file only once they count something
            self.meta.counts["expired_count"] = self.expired_count
        by_id = {c.id: c for c in self.channels.values() if c.id}
        to_wall = time.time_ns() - time.monotonic_ns()
        for cm in self.meta.channels:
            ch = by_id.get(cm.id)
            if ch is not None:
                cm.counts = {k: getattr(ch, k) for k in self.CHANNEL_COUNTS}
                cm.counts.update({k: getattr(ch, k) for k in self.MORE_COUNTS if getattr(ch, k)})
                cm.deferred = [
                    (m.segment.acceptor, m.segment.seq, m.offset, d.deadline + to_wall, tries)
                    for d in ch.deferred.values() for m, tries in d.entries if m.segment is not None
                ]
                dead = self.links.dead_letters  # dead letters not yet answered are queued after a restart
                held = dead.held(ch) if dead is not None and ch.max_attempts else []
                cm.attempts = [(m.segment.acceptor, m.segment.seq, m.offset, tries)
                               for m, tries in chain(ch.ready, held) if tries and m.segment is not None]
        self.save_meta()

    def restore_counts(self) -> None:
        """The /stats counters a graceful stop recorded (recovery)."""
        for k in (*self.TOPIC_COUNTS, "expired_count"):
            setattr(self, k, self.meta.counts.get(k, getattr(self, k)))
        by_id = {c.id: c for c in self.channels.values() if c.id}
        for cm in self.meta.channels:
            ch = by_id.get(cm.id)
            if ch is not None:
                for k in (*self.CHANNEL_COUNTS, *self.MORE_COUNTS):
                    setattr(ch, k, cm.counts.get(k, getattr(ch, k)))

    def close(self) -> None:
        """Counts, acks and the ack log to disk (graceful stop or delete)."""
        if self.durable:
            self.save_counts()
        self.flush_acks()
        if self.acklog is not None:
            self.acklog.close()
            self.acklog = None
        # the deletions of its finished files are queued on the syncing thread: done before
        # the directory goes (a topic made again must not lose a new file of the same name)
        drain_background()

    def stats(self, channel: str | None, include_clients: bool) -> dict:
        """The topic's part of nsqd's /stats."""
        chans = [c for name, c in sorted(self.channels.items()) if channel is None or name.decode() == channel]
        depth = len(self.backlog) + self.held_count + len(self.backlog_pending)
        return {
            "topic_name": self.name.decode(),
            "channels": [c.stats(include_clients) for c in chans],
            "depth": depth,
            "backend_depth": len(self.backlog_pending),
            "message_count": self.message_count,
            "message_bytes": self.message_bytes,
            "paused": self.paused,
            "nsqmp_dropped_count": self.dropped,
            "expired_count": self.expired_count,
            "ttl_ms": self.ttl_ns // 1_000_000,
            "e2e_processing_latency": aggregate(
                self.e2e[1], [c.e2e for c in self.channels.values() if c.e2e is not None]
            ) if self.e2e is not None else {"count": 0, "percentiles": None},
            **(self.retention.stats() if self.retention is not None else {}),
        }
