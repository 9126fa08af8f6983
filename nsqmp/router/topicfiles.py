"""A topic's files: its segment files and their references, its high-water marks, its
acknowledgement log and its metadata. The Topic (router/topic.py) is this plus its
channels and the verbs on messages.

Segment accounting: each message counts once per channel that still has to finish it (or
once while it waits in the topic for a first channel). A segment file whose count is zero
and that its acceptor has rolled past (a later segment of the same acceptor was seen) is
deleted: every channel is done with it, unless the topic keeps finished files for replay
(router/retention.py: then `sweep` deletes it once older or over the topic's budget).
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from nsqmp.diskqueue import meta as metafile
from nsqmp.diskqueue.acklog import ENTRY as ACK
from nsqmp.diskqueue.acklog import AckLog
from nsqmp.diskqueue.layout import topic_dir
from nsqmp.diskqueue.segment import in_background, remove_file, segment_path
from nsqmp.protocol.names import is_ephemeral
from nsqmp.router.retention import Retention

if TYPE_CHECKING:
    from nsqmp.router.channel import Channel

MARK_EVERY = 4096  # records between two of a segment's marks
_COMPACT_MIN = 100_000  # dead entries before the ack log is worth a rewrite
log = logging.getLogger("nsqmp.router")


class Segment:
    """One segment file of one acceptor: its references and byte counts. A FIN's
    InFlightMap.finish (native/finrun.c) reads and writes refs, acked, acceptor and seq
    by name: keep them plain int attributes."""

    __slots__ = ("acceptor", "seq", "refs", "path", "bytes", "dropped", "acked", "records", "end", "marks")

    def __init__(self, acceptor: int, seq: int, path: str) -> None:
        self.acceptor = acceptor
        self.seq = seq
        self.refs = 0
        self.path = path
        self.bytes = 0  # record bytes adopted from this file
        # bytes no longer counted in disk_bytes: its queued copies were dropped
        # (drop-oldest), or it is finished and kept for replay (retention)
        self.dropped = False
        self.acked = 0  # entries of the topic's ack log that name this file
        # records adopted from this file, and where the last of them ends: a rewind hands
        # a channel the file as one range (router/rewind.py) without reading it
        self.records = 0
        self.end = 0
        # (offset, records before it) about every MARK_EVERY records: where a rewind to a
        # time or an id starts walking the file (router/rewind.py find_in)
        self.marks: list[tuple[int, int]] = []


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
        self.retention: Retention | None = None  # finished files kept for replay (Topic sets it)

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

    def count_bytes(self, seg: Segment, n: int, records: int, end: int) -> None:
        """n more record bytes of seg, `records` records ending at `end`, are the topic's
        (max-topic-bytes counts them)."""
        seg.bytes += n
        seg.records += records
        if end > seg.end:
            seg.end = end
            if seg.records - (seg.marks[-1][1] if seg.marks else 0) >= MARK_EVERY:
                seg.marks.append((end, seg.records))
        if not seg.dropped:
            self.disk_bytes += n

    def release(self, seg: Segment, count: int = 1) -> None:
        """count references to seg are gone; the file goes with the last (once rolled past)."""
        seg.refs -= count
        if seg.refs <= 0 and seg.seq < self.latest_seq.get(seg.acceptor, -1):
            if self.retention is not None and not self.ephemeral:
                if self.retention.keep(seg, self.meta.next_channel_id) and not seg.dropped:
                    seg.dropped = True  # kept for replay: no longer the cap's
                    self.disk_bytes -= seg.bytes
                return
            self.delete(seg)

    def delete(self, seg: Segment) -> None:
        """The file of a finished segment goes (on the syncing thread)."""
        del self.segments[(seg.acceptor, seg.seq)]
        self.dead_acks += seg.acked
        if not seg.dropped:
            self.disk_bytes -= seg.bytes
        # off the loop: freeing a 100 MB file's pages took up to 95 ms. The syncing
        # thread runs its jobs in order, so a later rewrite of the ack log that drops
        # this file's entries never overtakes the deletion.
        in_background(remove_file, seg.path)

    def sweep(self, now_ns: int) -> int:
        """Delete the kept files retention no longer wants (router/retention.py); how many."""
        if self.retention is None:
            return 0
        gone = self.retention.due(now_ns)
        for seg in gone:
            self.retention.forget(seg)
            self.delete(seg)
        return len(gone)

    def save_meta(self) -> None:
        """meta.json now (channels, pauses, start points)."""
        if self.durable:
            if self.retention is not None:
                self.meta.kept, dead = self.retention.written()
                self.dead_acks += dead  # nobody needs them once the file is written down
            else:
                self.meta.kept = []
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
        if self.retention is not None:
            self.sweep(time.time_ns())
            if self.retention.dirty:
                self.save_meta()  # the kept files written down: recovery need not read them
        if self.acklog is not None:
            self.acklog.finish_compaction()  # one that ran since the last sync
            self.acklog.sync()
            # entries of deleted segments are dead weight: rewrite once they are most of the
            # log (each rewrite then removes at least half of what it reads: O(1) per FIN)
            if not self.acklog.compacting and self.dead_acks > max(_COMPACT_MIN, self.acklog.entries // 2):
                live = {(s.acceptor, s.seq) for s in self.segments.values()}
                if self.retention is not None:
                    live -= self.retention.unneeded()
                self.acklog.compact_soon(live)
                self.dead_acks = 0
