"""A topic: its channels, the messages waiting for a first channel, and its segment files.

Segment accounting: each message counts once per channel that still has to finish it (or
once while it waits in the topic for a first channel). A segment file whose count is zero
and that its acceptor has rolled past (a later segment of the same acceptor was seen) is
deleted: every channel is done with it.
"""
from __future__ import annotations

import logging
import time
from collections import deque

from nsqmp.diskqueue import meta as metafile
from nsqmp.diskqueue.acklog import ENTRY as ACK
from nsqmp.diskqueue.acklog import AckLog, pack_file
from nsqmp.diskqueue.layout import topic_dir
from nsqmp.diskqueue.segment import drain_background, in_background, remove_file, segment_path
from nsqmp.protocol.names import is_ephemeral
from nsqmp.router.latency import E2eLatency, aggregate
from nsqmp.router.channel import Channel
from nsqmp.router.filequeue import FileQueue

_COMPACT_MIN = 100_000  # dead entries before the ack log is worth a rewrite
log = logging.getLogger("nsqmp.router")


class Segment:
    __slots__ = ("acceptor", "seq", "refs", "path", "bytes", "dropped", "acked")

    def __init__(self, acceptor: int, seq: int, path: str) -> None:
        self.acceptor = acceptor
        self.seq = seq
        self.refs = 0
        self.path = path
        self.bytes = 0  # record bytes adopted from this file
        self.dropped = False  # its queued copies were dropped (drop-oldest): bytes no longer counted
        self.acked = 0  # entries of the topic's ack log that name this file


class Topic:
    def __init__(self, name: bytes, data_path: str, mem_queue_size: int) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.dir = topic_dir(data_path, name.decode())
        self.mem_queue_size = mem_queue_size  # #ephemeral: what it holds at most (more are dropped)
        self.in_memory = mem_queue_size  # durable: queued as objects per channel before ranges (Router)
        self.meta = metafile.TopicMeta()
        # last record adopted per acceptor stream: (seq, offset); a PUBLISH at or below it
        # was already recovered from the files
        self.hwm: dict[int, tuple[int, int]] = {}
        self.acklog: AckLog | None = None
        self.acks = bytearray()  # FINs not yet appended to the log (packed acklog entries)
        self.dead_acks = 0  # entries of the ack log naming deleted files (Segment.acked of each)
        self.channels: dict[bytes, Channel] = {}
        self.backlog: deque = deque()  # (Message, due_ns) held: no channel yet, or the topic is paused
        self.backlog_pending = FileQueue()  # more of them, behind the backlog, still in the files
        self.segments: dict[tuple[int, int], Segment] = {}
        self.latest_seq: dict[int, int] = {}  # acceptor -> highest segment seq seen
        self.message_count = 0
        self.message_bytes = 0
        self.dropped = 0
        self.paused = False
        self.disk_bytes = 0  # record bytes in segment files not yet deleted or dropped
        self.full = False  # refusing publishes (max-topic-bytes, policy refuse)
        self.e2e: tuple[float, tuple[float, ...]] | None = None  # (window s, percentiles)
        # a new topic while lookupds are configured: its messages wait here, unassigned,
        # until the lookupds said which channels the topic has elsewhere (nsqd's GetTopic)
        self.held: list[tuple[list, int]] | None = None  # (batch of (Message, due_ns), bytes)
        self.hold_start: dict = {}  # hwm when holding began: where those channels start

    @property
    def held_count(self) -> int:
        return sum(len(msgs) for msgs, _ in self.held) if self.held else 0

    def segment(self, acceptor: int, seq: int) -> Segment:
        key = (acceptor, seq)
        seg = self.segments.get(key)
        if seg is None:
            seg = self.segments[key] = Segment(acceptor, seq, segment_path(self.dir, acceptor, seq))
            if seq > self.latest_seq.get(acceptor, -1):
                self.latest_seq[acceptor] = seq
                # the acceptor rolled: older finished segments can go now
                for old in [s for s in self.segments.values() if s.acceptor == acceptor and s.seq < seq]:
                    self.release(old, 0)
        return seg

    def count_bytes(self, seg: Segment, n: int) -> None:
        seg.bytes += n
        if not seg.dropped:
            self.disk_bytes += n

    def release(self, seg: Segment, count: int = 1) -> None:
        seg.refs -= count
        if seg.refs <= 0 and seg.seq < self.latest_seq.get(seg.acceptor, -1):
            del self.segments[(seg.acceptor, seg.seq)]
            self.dead_acks += seg.acked
            if not seg.dropped:
                self.disk_bytes -= seg.bytes
            # off the loop: freeing a 100 MB file's pages took up to 95 ms. The syncing
            # thread runs its jobs in order, so a later rewrite of the ack log that drops
            # this file's entries never overtakes the deletion.
            in_background(remove_file, seg.path)

    @property
    def durable(self) -> bool:
        return not self.ephemeral

    def get_channel(self, name: bytes, start: dict | None = None) -> tuple[Channel, list]:
        """The channel, created if missing, and the backlog it adopts (the first channel
        takes every message published before any channel existed). A later channel starts
        after the records adopted so far, or after `start` when given."""
        ch = self.channels.get(name)
        adopted: list = []
        if ch is None:
            first = not self.channels
            ch = self.add_channel(name, start=None if first else dict(start) if start is not None
                                  else self.held_from())
            if first and self.backlog and not self.paused:  # a paused topic keeps holding
                adopted = list(self.backlog)
                self.backlog.clear()
            if first and self.backlog_pending and not self.paused:
                ch.message_count += len(self.backlog_pending)
                ch.pending.extend(self.backlog_pending)  # their refs become the channel's
            self.save_meta()
        return ch, adopted

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
        ephemeral = is_ephemeral(name)
        ch = self.channels[name] = Channel(name, self, ephemeral=ephemeral, paused=paused)
        if self.e2e is not None:
            ch.e2e = E2eLatency(*self.e2e)
        if not ephemeral and self.durable:
            if not cid:
                cid = self.meta.next_channel_id
                self.meta.next_channel_id += 1
                self.meta.channels.append(metafile.ChannelMeta(name.decode(), cid, paused, start))
            ch.id = cid
            ch.start = start
        return ch

    def save_meta(self) -> None:
        if self.durable:
            try:
                metafile.write(self.dir, self.meta)
            except OSError as exc:
                log.error("cannot write the metadata of %s: %s", self.name.decode(), exc)

    def ack(self, ch: Channel, seg: Segment, offset: int) -> None:
        if ch.id:
            self.acks += ACK.pack(ch.id, seg.acceptor, seg.seq, offset)
            seg.acked += 1

    def finish(self, ch: Channel, seg: Segment, offsets: list[int]) -> None:
        """Messages of seg at these offsets are finished on ch: acknowledged (a durable
        channel's ack log gets their entries) and their file references released."""
        if ch.id:
            self.acks += pack_file(ch.id, seg.acceptor, seg.seq, offsets)
            seg.acked += len(offsets)
        self.release(seg, len(offsets))

    def flush_acks(self) -> None:
        if not self.acks:
            return
        try:
            if self.acklog is None:
                self.acklog = AckLog(self.dir)
            self.acklog.append(self.acks)
            self.acklog.finish_compaction()  # a rewrite under way moves on as soon as it can
        except OSError as exc:
            # kept for the next try: until then a restart would deliver these again
            log.error("cannot append %d acknowledgements of %s: %s", len(self.acks) // ACK.size,
                      self.name.decode(), exc)
            return
        self.acks = bytearray()

    def sync(self) -> None:
        self.flush_acks()
        if self.acklog is not None:
            self.acklog.finish_compaction()  # one that ran since the last sync
            self.acklog.sync()
            # entries of deleted segments are dead weight: rewrite once they are most of the
            # log (each rewrite then removes at least half of what it reads: O(1) per FIN)
            if not self.acklog.compacting and self.dead_acks > max(_COMPACT_MIN, self.acklog.entries // 2):
                live = {(s.acceptor, s.seq) for s in self.segments.values()}
                self.acklog.compact_soon(live)
                self.dead_acks = 0

    TOPIC_COUNTS = ("message_count", "message_bytes", "dropped")
    CHANNEL_COUNTS = ("message_count", "requeue_count", "timeout_count")

    def save_counts(self) -> None:
        """Record the /stats counters in the metadata (graceful stop)."""
        self.meta.counts = {k: getattr(self, k) for k in self.TOPIC_COUNTS}
        by_id = {c.id: c for c in self.channels.values() if c.id}
        to_wall = time.time_ns() - time.monotonic_ns()
        for cm in self.meta.channels:
            ch = by_id.get(cm.id)
            if ch is not None:
                cm.counts = {k: getattr(ch, k) for k in self.CHANNEL_COUNTS}
                cm.deferred = [
                    (m.segment.acceptor, m.segment.seq, m.offset, d.deadline + to_wall, tries)
                    for d in ch.deferred.values() for m, tries in d.entries if m.segment is not None
                ]
                cm.attempts = [(m.segment.acceptor, m.segment.seq, m.offset, tries)
                               for m, tries in ch.ready if tries and m.segment is not None]
        self.save_meta()

    def restore_counts(self) -> None:
        for k in self.TOPIC_COUNTS:
            setattr(self, k, self.meta.counts.get(k, getattr(self, k)))
        by_id = {c.id: c for c in self.channels.values() if c.id}
        for cm in self.meta.channels:
            ch = by_id.get(cm.id)
            if ch is not None:
                for k in self.CHANNEL_COUNTS:
                    setattr(ch, k, cm.counts.get(k, getattr(ch, k)))

    def close(self) -> None:
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
            "e2e_processing_latency": aggregate(
                self.e2e[1], [c.e2e for c in self.channels.values() if c.e2e is not None]
            ) if self.e2e is not None else {"count": 0, "percentiles": None},
        }
