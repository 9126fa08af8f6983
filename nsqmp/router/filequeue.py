"""Messages a channel holds that the router has not read yet: ranges of its segment files.

A channel (or a topic waiting for its first channel) keeps at most about mem-queue-size
messages as objects in memory. Past that, a PUBLISH costs the router one range entry,
not one object per message: the records are already in the acceptor's segment file (the
acceptor answered `OK` after appending them), so the router notes (segment, start, end,
count) and reads the records back from the file when the channel's consumers have
drained its in-memory queue. Contiguous batches of one file share one range.

Each message of a range counts once on its segment's reference count, exactly as a
queued Message does, so the file stays until every channel is done with it. A range
only ever holds records nobody has received yet (attempts 0, not deferred).
"""
from __future__ import annotations

import logging
import os
from collections import deque
from typing import TYPE_CHECKING

from nsqmp.layouts import LENGTH_MASK, RECORD_HEAD
from nsqmp.router.readback import Message, read_messages

if TYPE_CHECKING:
    from nsqmp.router.topic import Segment

log = logging.getLogger("nsqmp.router")

_CHUNK = 1 << 20  # bytes read from a file at a time
_BUFFER = memoryview(bytearray(_CHUNK))  # read_messages copies what it keeps out of it
# pread, not a mapping of the file (issue 24, measured): reading 448,000 records of a
# 100 MB segment in takes of 5,000 cost 97-143 ns of CPU per message through this buffer
# and 102-149 through a 1 MiB read-only mapping per window (MAP_POPULATE: no better),
# the same within noise: the copy of ~230 bytes is a tenth of it; making the Message and
# its entry is the rest, and a mapping does not remove that. A mapping would add a
# munmap per window (a TLB shootdown once the syncing thread has run on the other core)
# and a SIGBUS, which kills the router, for a file cut short while mapped; a short pread
# is an OSError that take() logs.


class FileQueue:
    """FIFO of [segment, start, end, count] ranges of records still to be read."""

    __slots__ = ("ranges", "count")

    def __init__(self) -> None:
        self.ranges: deque[list] = deque()
        self.count = 0

    def __bool__(self) -> bool:
        return self.count > 0

    def __len__(self) -> int:
        return self.count

    def add(self, seg: Segment, start: int, end: int, count: int) -> None:
        """Queue the records [start, end) of seg (count of them); the caller counts the refs."""
        if self.ranges:
            last = self.ranges[-1]
            if last[0] is seg and last[2] == start:
                last[2] = end
                last[3] += count
                self.count += count
                return
        self.ranges.append([seg, start, end, count])
        self.count += count

    def extend(self, other: FileQueue) -> None:
        """Move every range of other behind ours (other is left empty)."""
        while other.ranges:
            seg, start, end, count = other.ranges.popleft()
            self.add(seg, start, end, count)
        other.count = 0

    def take(self, want: int) -> tuple[list[tuple[Message, int]], int]:
        """Read up to `want` records from the front: ((Message, due_ns or 0) entries, how
        many of them have a due time)."""
        out: list[tuple[Message, int]] = []
        deferred = 0
        while self.ranges and len(out) < want:
            r = self.ranges[0]
            seg = r[0]
            try:
                got, r[1], d = read_range(seg, r[1], r[2], want - len(out))
            except OSError as exc:
                # the records stay in the file (its refs are kept): a restart recovers them
                log.error("cannot read queued records of %s: %s", seg.path, exc)
                got, r[1], d = [], r[2], 0
            if out:
                out.extend(got)
            else:
                out = got
            deferred += d
            r[3] -= len(got)
            self.count -= len(got)
            if r[1] >= r[2] or r[3] <= 0:
                self.count -= r[3]  # 0 unless the range could not be read to its end
                self.ranges.popleft()
        return out, deferred

    def remove_segment(self, seg: Segment) -> list[int]:
        """Forget every range of seg; the record offsets it held (to acknowledge them)."""
        offsets: list[int] = []
        keep: deque[list] = deque()
        for r in self.ranges:
            if r[0] is seg:
                try:
                    offsets.extend([m.offset for m, _ in read_range(seg, r[1], r[2], r[3])[0]])
                except OSError as exc:
                    log.error("cannot read queued records of %s: %s", seg.path, exc)
                self.count -= r[3]
            else:
                keep.append(r)
        self.ranges = keep
        return offsets

    def clear(self) -> list[tuple[Segment, int]]:
        """Forget every range; (segment, count) of each, so the caller releases the refs."""
        gone = [(r[0], r[3]) for r in self.ranges]
        self.ranges.clear()
        self.count = 0
        return gone


def read_span(path: str, start: int, size: int) -> bytes:
    """The bytes [start, start + size) of a segment file; OSError if they are not all there."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, size, start)
    finally:
        os.close(fd)
    if len(data) < size:
        raise OSError(f"{path}: {size} bytes at offset {start} cut short")
    return data


def read_range(seg: Segment, start: int, end: int, want: int) -> tuple[list[tuple[Message, int]], int, int]:
    """Up to `want` whole records of [start, end) of a segment's file: ((Message, due_ns
    or 0) entries, where the next record starts, how many entries have a due time).

    The records were written and checksummed by an acceptor and announced by its
    PUBLISH: they are trusted, as a PUBLISH's copy of them is (read_messages does not
    verify CRCs). Damage that shows (a zero length word, a record cut short) is an OSError.
    """
    out: list[tuple[Message, int]] = []
    deferred = 0
    fd = os.open(seg.path, os.O_RDONLY)
    try:
        while start < end and len(out) < want:
            # into one reused buffer: a fresh megabyte per read cost the router a page
            # fault per 4 KiB (perf: 4 % of its time during the mixed workload)
            data = _BUFFER[:os.preadv(fd, [_BUFFER[:min(end - start, _CHUNK)]], start)]
            try:
                got, pos, d = read_messages(data, start, want - len(out), seg)
                if pos == 0 and len(data) >= RECORD_HEAD.size:  # one record larger than a chunk
                    size = RECORD_HEAD.size + (RECORD_HEAD.unpack_from(data)[0] & LENGTH_MASK)
                    data = os.pread(fd, size, start)
                    if len(data) < size:
                        raise OSError(f"record at offset {start} cut short")
                    got, pos, d = read_messages(data, start, 1, seg)
            except ValueError as exc:  # a length word of 0, a record too short
                raise OSError(str(exc)) from None
            if pos == 0:
                raise OSError(f"no whole record at offset {start}")
            if out:
                out.extend(got)
            else:
                out = got
            deferred += d
            start += pos
    finally:
        os.close(fd)
    return out, start, deferred
