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

from nsqmp.diskqueue.segment import DEFER, RECORD_HEAD

if TYPE_CHECKING:
    from nsqmp.router.topic import Segment

log = logging.getLogger("nsqmp.router")

_LENGTH = 0x7FFFFFFF
_CHUNK = 1 << 20  # bytes read from a file at a time


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

    def take(self, want: int) -> list[tuple[Segment, int, bytes, int]]:
        """Read up to `want` records from the front: (segment, offset, encoding, due_ns)."""
        out: list[tuple[Segment, int, bytes, int]] = []
        while self.ranges and len(out) < want:
            r = self.ranges[0]
            seg = r[0]
            try:
                recs, r[1] = read_range(seg.path, r[1], r[2], want - len(out))
            except OSError as exc:
                # the records stay in the file (its refs are kept): a restart recovers them
                log.error("cannot read queued records of %s: %s", seg.path, exc)
                recs, r[1] = [], r[2]
            out.extend([(seg, off, enc, due) for off, enc, due in recs])
            r[3] -= len(recs)
            self.count -= len(recs)
            if r[1] >= r[2] or r[3] <= 0:
                self.count -= r[3]  # 0 unless the range could not be read to its end
                self.ranges.popleft()
        return out

    def remove_segment(self, seg: Segment) -> list[int]:
        """Forget every range of seg; the record offsets it held (to acknowledge them)."""
        offsets: list[int] = []
        keep: deque[list] = deque()
        for r in self.ranges:
            if r[0] is seg:
                try:
                    offsets.extend(off for off, _, _ in read_range(seg.path, r[1], r[2], r[3])[0])
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


def read_range(path: str, start: int, end: int, want: int) -> tuple[list[tuple[int, bytes, int]], int]:
    """Up to `want` whole records of [start, end) of a segment file, and where the next starts.

    Each record is (offset, encoding, due_ns or 0). The records were written and
    checksummed by an acceptor and announced by its PUBLISH: they are trusted, as
    iter_blob trusts a PUBLISH's copy of them.
    """
    unpack = RECORD_HEAD.unpack_from
    out: list[tuple[int, bytes, int]] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        while start < end and len(out) < want:
            data = os.pread(fd, min(end - start, _CHUNK), start)
            pos, n = 0, len(data)
            while pos + 8 <= n and len(out) < want:
                word, _ = unpack(data, pos)
                length = word & _LENGTH
                if length == 0:
                    raise OSError(f"no record at offset {start + pos}")
                stop = pos + 8 + length
                if stop > n:
                    if pos:
                        break
                    data = os.pread(fd, 8 + length, start)  # one record larger than a chunk
                    n = len(data)
                    if n < stop:
                        raise OSError(f"record at offset {start} cut short")
                    continue
                if word & DEFER:
                    out.append((start + pos, data[pos + 16:stop],
                                int.from_bytes(data[pos + 8:pos + 16], "little", signed=True)))
                else:
                    out.append((start + pos, data[pos + 8:stop], 0))
                pos = stop
            if pos == 0:
                raise OSError(f"no whole record at offset {start}")
            start += pos
    finally:
        os.close(fd)
    return out, start
