"""A topic's files: its segment files and their references, its high-water marks, its
acknowledgement log and its metadata. The Topic (router/topic.py) is this plus its
channels and the verbs on messages.

Segment accounting: each message counts once per channel that still has to finish it (or
once while it waits in the topic for a first channel). A segment file whose count is zero
and that its acceptor has rolled past (a later segment of the same acceptor was seen) is
deleted: every channel is done with it.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nsqmp.diskqueue import meta as metafile
from nsqmp.diskqueue.acklog import ENTRY as ACK
from nsqmp.diskqueue.acklog import AckLog
from nsqmp.diskqueue.layout import topic_dir
from nsqmp.diskqueue.segment import in_background, remove_file, segment_path
from nsqmp.protocol.names import is_ephemeral

if TYPE_CHECKING:
    from nsqmp.router.channel import Channel

_COMPACT_MIN = 100_000  # dead entries before the ack log is worth a rewrite
log = logging.getLogger("nsqmp.router")


class Segment:
    """One segment file of one acceptor: its references and byte counts. A FIN's
    InFlightMap.finish (native/finrun.c) reads and writes refs, acked, acceptor and seq
    by name: keep them plain int attributes."""

    __slots__ = ("acceptor", "seq", "refs", "path", "bytes", "dropped", "acked")

    def __init__(self, acceptor: int, seq: int, path: str) -> None:
        self.acceptor = acceptor
        self.seq = seq
        self.refs = 0
        self.path = path
        self.bytes = 0  # record bytes adopted from this file
        self.dropped = False  # its queued copies were dropped (drop-oldest): bytes no longer counted
        self.acked = 0  # entries of the topic's ack log that name this file


class TopicFiles:
    """The files of one topic and what the router knows about them."""

    def __init__(self, name: bytes, data_path: str, acks_due: set | None = None) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.dir = topic_dir(data_path, name.decode())
        self.meta = metafile.TopicMeta()
        # last record adopted per acceptor stream: (seq, offset); a PUBLISH at or below it
        # was already recovered from the files
        self.hwm: dict[int, tuple[int, int]] = {}
        self.acklog: AckLog | None = None
        self.acks = bytearray()  # FINs not yet appended to the log (packed acklog entries)
        self.dead_acks = 0  # entries of the ack log naming deleted files (Segment.acked of each)
        # topics with acks to append at the end of the tick (Router.end_tick): shared
        self.acks_due: set = acks_due if acks_due is not None else set()
        self.segments: dict[tuple[int, int], Segment] = {}
        self.latest_seq: dict[int, int] = {}  # acceptor -> highest segment seq seen
        self.disk_bytes = 0  # record bytes in segment files not yet deleted or dropped

    @property
    def durable(self) -> bool:
        return not self.ephemeral

    def segment(self, acceptor: int, seq: int) -> Segment:
        """The Segment of the acceptor's file seq, known from now on."""
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
        """n more record bytes of seg are the topic's (max-topic-bytes counts them)."""
        seg.bytes += n
        if not seg.dropped:
            self.disk_bytes += n

    def release(self, seg: Segment, count: int = 1) -> None:
        """count references to seg are gone; the file goes with the last (once rolled past)."""
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

    def save_meta(self) -> None:
        """meta.json now (channels, pauses, start points)."""
        if self.durable:
            try:
                metafile.write(self.dir, self.meta)
            except OSError as exc:
                log.error("cannot write the metadata of %s: %s", self.name.decode(), exc)

    def ack(self, ch: Channel, seg: Segment, offset: int) -> None:
        """One message of seg finished on ch, for the ack log."""
        if ch.id:
            self.acks += ACK.pack(ch.id, seg.acceptor, seg.seq, offset)
            seg.acked += 1

    def flush_acks(self) -> None:
        """Append the acks gathered since the last flush to the ack log."""
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
        """Acks appended and synced; the ack log rewritten when mostly dead."""
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
