"""The acknowledgement log of a topic: one entry per FIN, appended by the topic's router.

Entry (16 bytes, little-endian; drawn in native/layouts.h, declared for Python in
nsqmp.layouts as ACK_ENTRY): channel id u16 | acceptor u16 | seq u32 | offset u64. An
all-zero entry (channel id 0 never exists) marks the end of what was written.

A message is finished for a channel when its position (acceptor, seq, offset) has an entry
for that channel's id. The log only needs entries for segments that still exist:
compact_soon() rewrites it without the rest on the syncing thread (temporary file,
fsync), and finish_compaction() renames that over the log once the entries appended
meanwhile are added to it. Entries written through the mapping survive a crash of the
process; sync() (an fdatasync on the syncing thread, which on Linux also writes back the
pages dirtied through the mapping) makes them survive a power loss.
"""
from __future__ import annotations

import logging
import mmap
import os
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any

from nsqmp.diskqueue.segment import in_background, sync_file
from nsqmp.layouts import ACK_ENTRY

log = logging.getLogger("nsqmp.diskqueue")

FILE = "acks.log"
ENTRY = ACK_ENTRY
_SEGMENT = struct.Struct("<2xHI8x")  # (acceptor, seq) of an ACK_ENTRY: at ACK_ACCEPTOR_AT, ACK_SEQ_AT
_GROW = 1 << 20


def py_keep_entries(data: bytes, live: bytes) -> bytes:
    """The entries of data whose (acceptor, seq) key (acceptor << 32 | seq) is in live, a
    sorted native-order u64 array (pure-Python twin of native/acklog.c)."""
    keys = set(array("Q", live))
    usable = len(data) - len(data) % ENTRY.size
    size = ENTRY.size
    return b"".join([data[k * size:(k + 1) * size]
                     for k, (a, q) in enumerate(_SEGMENT.iter_unpack(memoryview(data)[:usable]))
                     if a << 32 | q in keys])


keep_entries: Any = py_keep_entries
if os.environ.get("NSQMP_PURE_PYTHON", "") != "1":
    try:
        from nsqmp._native import keep_entries
    except ImportError:  # extension not built
        pass


def pack(entries: Iterable[tuple[int, int, int, int]]) -> bytes:
    """Entries as append() takes them."""
    return b"".join([ENTRY.pack(*e) for e in entries])


def pack_file(channel: int, acceptor: int, seq: int, offsets: list[int]) -> bytes:
    """The entries of one channel's FINs of records of one file, as append() takes them."""
    if sys.byteorder != "little":
        return b"".join([ENTRY.pack(channel, acceptor, seq, o) for o in offsets])
    # little-endian u64 words: (channel | acceptor << 16 | seq << 32), offset, ...
    words = array("Q", [channel | acceptor << 16 | seq << 32]) * (2 * len(offsets))
    words[1::2] = array("Q", offsets)
    return words.tobytes()


def _written(data: bytes | mmap.mmap) -> int:
    """Entries before the first all-zero one. What was written is a prefix of the file
    (channel id 0 never exists, and the rest of the file is zeros): a binary search."""
    lo, hi = 0, len(data) // ENTRY.size
    while lo < hi:
        mid = (lo + hi) // 2
        if data[mid * ENTRY.size:mid * ENTRY.size + 2] == b"\0\0":
            hi = mid
        else:
            lo = mid + 1
    return lo


def read(topic_dir: str) -> Iterator[tuple[int, int, int, int]]:
    """(channel id, acceptor, seq, offset) of every entry."""
    try:
        with open(os.path.join(topic_dir, FILE), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return
    usable = len(data) - len(data) % ENTRY.size
    for entry in ENTRY.iter_unpack(memoryview(data)[:usable]):
        if entry[0] == 0:
            return
        yield entry


def _rewrite(path: str, end: int, keys: bytes) -> None:
    """The syncing thread's part of a compaction: path.tmp gets the entries of path's
    first `end` bytes whose file is in keys, fsynced."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.pread(fd, end, 0)  # the router's appends through its mapping included
    finally:
        os.close(fd)
    kept = keep_entries(data, keys)  # the native filter lets go of the GIL
    with open(path + ".tmp", "wb") as f:
        f.write(kept)
        f.flush()
        os.fsync(f.fileno())


def _catch_up(path: str, start: int, end: int) -> None:
    """The syncing thread's second part of a compaction: path's bytes [start, end),
    appended during the first, added to path.tmp, fsynced."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.pread(fd, end - start, start)
    finally:
        os.close(fd)
    with open(path + ".tmp", "ab") as f:
        f.write(data)
        f.flush()
        os.fdatasync(f.fileno())


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class AckLog:
    def __init__(self, topic_dir: str) -> None:
        self.path = os.path.join(topic_dir, FILE)
        os.makedirs(topic_dir, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        size = os.fstat(self._fd).st_size
        self._size = max(size, _GROW)
        if size < self._size:
            os.posix_fallocate(self._fd, size, self._size - size)
        self._map = mmap.mmap(self._fd, self._size)
        self.pos = _written(self._map) * ENTRY.size
        self._dirty = False
        self._released = 0  # bytes at the start of the mapping taken out of our page tables
        self._syncing: Future | None = None  # the background fdatasync under way
        self._compacting: tuple[Future, int, int] | None = None  # a rewrite's job, step, offset

    @property
    def entries(self) -> int:
        return self.pos // ENTRY.size

    def append(self, data: bytes | bytearray) -> None:
        """Packed entries (ENTRY each; see pack())."""
        end = self.pos + len(data)
        if end > self._size:
            new = max(self._size * 2, end + _GROW)
            os.posix_fallocate(self._fd, self._size, new - self._size)  # ENOSPC: nothing written
            self._map.resize(new)
            self._size = new
        self._map[self.pos:end] = data
        self.pos = end
        self._dirty = True

    def sync(self) -> None:
        """Make what was appended durable without waiting: an fdatasync on the background
        thread (on Linux it also writes back the pages dirtied through the mapping)."""
        if self._dirty and (self._syncing is None or self._syncing.done()):
            self._dirty = False
            # whole pages behind the append position are never written again: out of our
            # page tables, so the log costs the router's memory (PSS) nothing once written
            # (the page cache keeps them; the kernel moves a dirty page's state to the page
            # on the way out, so the sync below still writes it back)
            done = self.pos & ~(mmap.PAGESIZE - 1)
            if done > self._released:
                self._map.madvise(mmap.MADV_DONTNEED, self._released, done - self._released)
                self._released = done
            self._syncing = in_background(sync_file, self._fd, self.path)

    def _settle(self) -> None:
        """Wait for the background sync, if any (before the descriptor is closed)."""
        if self._syncing is not None:
            self._syncing.result()
            self._syncing = None

    def compact(self, live: Iterable[tuple[int, int]]) -> int:
        """Rewrite the log with only the entries of segments in live ((acceptor, seq)
        pairs) and wait for it; returns how many entries the log has then."""
        self.compact_soon(live)
        while self._compacting is not None:
            self._compacting[0].exception()  # wait for its job
            self.finish_compaction()
        return self.entries

    @property
    def compacting(self) -> bool:
        return self._compacting is not None

    def compact_soon(self, live: Iterable[tuple[int, int]]) -> None:
        """Start rewriting the log without the entries of segments not in live. The
        syncing thread does the work (done at once on the loop, a rewrite of a million
        entries held the router for 100-250 ms), in two jobs while appends go on:

        1. read what is written so far from the file, filter it, write and fsync
           the temporary file;
        2. (started by finish_compaction()) add what was appended during 1, fsync.

        finish_compaction() then adds the few entries appended during 2 and renames the
        temporary file over the log. Renaming over a file makes the kernel write out the
        new one first: whatever is not yet synced then is written while the loop waits,
        so that part is kept small."""
        if self._compacting is not None:
            return
        keys = array("Q", sorted(a << 32 | q for a, q in live)).tobytes()
        self._compacting = (in_background(_rewrite, self.path, self.pos, keys), 1, self.pos)

    def finish_compaction(self) -> bool:
        """Move a rewrite on if its job is done (cheap otherwise: call it often). True
        once it replaced the log (or failed and was dropped)."""
        if self._compacting is None:
            return False
        job, step, start = self._compacting
        if not job.done():
            return False
        tmp = self.path + ".tmp"
        try:
            job.result()
            if step == 1:
                self._compacting = (in_background(_catch_up, self.path, start, self.pos), 2, self.pos)
                return False
            tail = self._map[start:self.pos]
            if tail:
                with open(tmp, "ab") as f:
                    f.write(tail)
        except OSError as exc:  # the log stays as it is; the next sync tries again
            log.error("cannot rewrite %s: %s", self.path, exc)
            self._compacting = None
            _remove(tmp)
            return True
        self._compacting = None
        # the old log goes without an msync (the rewrite holds its entries); its descriptor
        # is closed on the syncing thread, after any sync of it queued there
        self._map.close()
        in_background(os.close, self._fd)
        os.rename(tmp, self.path)
        self.__init__(os.path.dirname(self.path))  # type: ignore[misc]
        self._dirty = bool(tail)
        return True

    def close(self) -> None:
        if self._compacting is not None:  # stopping: the rewrite is dropped
            self._compacting[0].exception()
            self._compacting = None
            _remove(self.path + ".tmp")
        if self._map is not None:
            self._settle()
            if self._dirty:
                self._map.flush()
                self._dirty = False
            self._map.close()
            os.close(self._fd)
            self._map = None  # type: ignore[assignment]
