"""Segment files: where a topic's messages live from the moment a publisher gets `OK`.

One writer per file: acceptor `a` appends the messages it accepts for a topic to
``<topic dir>/<a:02d>.<seq:08d>.seg`` (see layout.py). The file is grown in reserved
steps, and rolls to the next sequence number when the next batch would pass
``max-bytes-per-file``. A batch (one PUB or a whole MPUB) is one contiguous append.

File layout: a 64-byte header (magic 'NQSG', version, acceptor, seq), then records back
to back: length word (bit 31: DEFER), crc32c, [due time], NSQ message header, body. Drawn
once in native/layouts.h and declared for Python in nsqmp.layouts (imported below). The
due time of a DPUB travels with the message and survives a restart. A length word of 0
where a record would start marks the end of what was written (the file is zero past it).
Limits: 26 <= length <= max-msg-size + 34.

The checksum is CRC-32C (Castagnoli). The acceptor's publish path writes records with
the native encoder (native/publish.h: SSE4.2 crc32 instruction, else a table; its twin
nsqmp/diskqueue/pyencoder.py); encode() below and the readers use the crc32c package
(SSE4.2/ARMv8 where the CPU has them). The tests check both give the same value.

Space is reserved with posix_fallocate before it is written: a failed reservation is an
ordinary OSError (ENOSPC) that becomes E_PUB_FAILED / HTTP 500 before any byte of the
batch is written, so a full disk never leaves half a batch (nor, as a write through a
mapping into a hole would, a SIGBUS).

The writer's file state (descriptor, position, the end of the reserved space, appends
not yet synced) lives in its SegmentTail (native/segtail.c; twin in pubrun.py), which a
connection's run of PUB/MPUB reaches without this class: SegmentTail.run() frames,
checks, stamps, encodes and appends a run from the read buffer in one C call, and gives
the PUBLISH_AT for it (head_of(seq) is that record's template, from the acceptor). It
takes nothing that needs a roll or a growth: append() does those, and the tail goes on
from there. A run of up to PUB_RUN_MAPPED_MAX bytes (a few one-message PUBs) is copied
into a shared mapping of the file, a window of WINDOW bytes of the reserved space moved
on as the file fills (munmap, mmap), so the acceptor's resident memory holds at most one
window per topic, not the file; a longer run is one pwrite.
Measured (issue 24, 2026-11-25, nsq's bench_writer, 5 s runs alternated, the acceptor's
CPU per message from /proc):
- one-message PUBs on 4 connections: 15.5 us per PUB through the mapping against 16.7 us
  with pwrite (a system call per PUB saved), 51.2k/s against 48.3k/s;
- MPUBs of 200 on 4 connections, all through the mapping: 0.44-0.53 us per message
  against 0.38-0.43 with pwrite, 1.76M/s against 1.91M/s: a write fault per 4 KiB page
  costs more than pwrite's copy of the page.
The space under a window is reserved (posix_fallocate: a write through it never meets a
full disk) and inside the file's size, so only a file cut short by someone else while
mapped could raise a SIGBUS. A sync is an fdatasync, which writes back the pages
dirtied through the mapping too.

Unless --sync-every is 1 (then each append syncs before it returns, and its OK waits for
that), the OK does not wait for a sync: --sync-every and --sync-timeout bound how much
a power loss can take, as in nsqd. Those syncs run on one background thread (fdatasync
releases the GIL): a sync of tens of MB at a file's roll took the acceptor's loop, and
every publish and delivery on it, 50-140 ms. The jobs run in order, and a file's
descriptor is closed by the last job that names it. close() waits for them.
"""
from __future__ import annotations

import logging
import mmap
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import crc32c as _crc32c

from nsqmp.diskqueue.encoder import SegmentTail
from nsqmp.diskqueue.synctimes import SYNCS
from nsqmp.layouts import (DEFER, DUE, LENGTH_MASK, MESSAGE_HEAD, RECORD_HEAD, SEGMENT_HEADER,
                            SEGMENT_HEADER_SIZE, SEGMENT_MAGIC, SEGMENT_VERSION)

log = logging.getLogger("nsqmp.diskqueue")
_syncer: ThreadPoolExecutor | None = None


def in_background(job, *args) -> Future:
    """Run job(*args) on the syncing thread (created on first use, in the process that
    uses it: never inherited across a fork)."""
    global _syncer
    if _syncer is None:
        _syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="segment-sync")
    return _syncer.submit(job, *args)


def drain_background() -> None:
    """Wait until every job given to in_background() so far is done (before a directory
    whose files it deletes is removed or made again)."""
    if _syncer is not None:
        _syncer.submit(_nothing).result()


def _nothing() -> None:
    pass


def _forget_syncer() -> None:
    global _syncer
    _syncer = None  # its thread does not exist in a forked child


os.register_at_fork(after_in_child=_forget_syncer)


def remove_file(path: str) -> None:
    """Delete a finished segment file, logging a failure: for in_background()."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.error("cannot delete finished segment %s: %s", path, exc)


def sync_file(fd: int, path: str, close: bool = False) -> None:
    """fdatasync fd (and close it if close), logging a failure: for in_background().
    Its duration goes to the process's sync histogram (synctimes.SYNCS, for /metrics)."""
    try:
        started = time.perf_counter_ns()
        os.fdatasync(fd)
        SYNCS.add(time.perf_counter_ns() - started)
    except OSError as exc:  # the data stays in the page cache; only a power loss can take it
        log.error("cannot sync %s: %s", path, exc)
    if close:
        os.close(fd)

MAGIC, VERSION, HEADER, HEADER_SIZE = SEGMENT_MAGIC, SEGMENT_VERSION, SEGMENT_HEADER, SEGMENT_HEADER_SIZE
MIN_PAYLOAD = MESSAGE_HEAD.size  # the shortest record payload: a message header, empty body
WINDOW = 4 << 20  # bytes of a file mapped at a time for publish runs (a multiple of the page)
_GROW_STEP = 1 << 20
_GROW_MAX = 8 << 20


def segment_path(topic_dir: str, acceptor: int, seq: int) -> str:
    return os.path.join(topic_dir, f"{acceptor:02d}.{seq:08d}.seg")


def parse_name(filename: str) -> tuple[int, int] | None:
    """(acceptor, seq) of a segment file name, or None."""
    parts = filename.split(".")
    if len(parts) != 3 or parts[2] != "seg" or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


def encode(payloads: list[bytes], due_ns: int = 0) -> bytes:
    """The bytes of a batch of records, as appended to a segment (due_ns: deferred until)."""
    crc = _crc32c.crc32c
    head = RECORD_HEAD.pack
    if due_ns:
        due = DUE.pack(due_ns)
        return b"".join([head((len(p) + 8) | DEFER, crc(due + p)) + due + p for p in payloads])
    return b"".join([head(len(p), crc(p)) + p for p in payloads])


def iter_blob(blob: bytes | memoryview) -> Iterator[tuple[int, bytes, int]]:
    """(offset in blob, message encoding, due_ns or 0) of each record from encode() (trusted)."""
    view = memoryview(blob)
    pos, end = 0, len(view)
    unpack = RECORD_HEAD.unpack_from
    while pos < end:
        word, _ = unpack(view, pos)
        length = word & LENGTH_MASK
        start = pos
        pos += 8
        if word & DEFER:
            yield start, bytes(view[pos + 8:pos + length]), DUE.unpack_from(view, pos)[0]
        else:
            yield start, bytes(view[pos:pos + length]), 0
        pos += length


class SegmentWriter:
    """Appends batches for one (topic, acceptor); owns the current segment's descriptor."""

    def __init__(self, topic_dir: str, acceptor: int, max_bytes: int, sync_every: int,
                 tail: SegmentTail | None = None, head_of: Callable[[int], bytes] | None = None) -> None:
        """tail: the SegmentTail that publish runs take (the acceptor's, bound to a topic);
        head_of(seq): the PUBLISH_AT record for a run into file seq (without it, no run)."""
        self.topic_dir = topic_dir
        self.acceptor = acceptor
        self.max_bytes = max(max_bytes, HEADER_SIZE + 4096)
        self.sync_every = sync_every
        os.makedirs(topic_dir, exist_ok=True)
        existing = [parse_name(n) for n in os.listdir(topic_dir)]
        # a new incarnation never writes into an old file: it may hold unread records.
        # Sequence numbers are never reused (the ack log names records by them): the
        # router never deletes an acceptor's newest file, so the maximum on disk only grows.
        self.seq = 1 + max((p[1] for p in existing if p and p[0] == acceptor), default=-1)
        # the file's state that runs share (fd, position, reserved end, appends unsynced)
        self.tail = tail if tail is not None else SegmentTail(window=WINDOW)
        self.tail.sync_every = sync_every
        self.tail.on_sync = self.sync
        self._head_of = head_of
        self._fd = -1
        self._path = ""
        self._size = 0
        self._last_job: Future | None = None  # the newest background sync (or sync and close)

    @property
    def pos(self) -> int:
        """Where the next append goes."""
        return self.tail.pos

    def _open(self, at_least: int) -> None:
        path = segment_path(self.topic_dir, self.acceptor, self.seq)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        size = max(min(_GROW_STEP, self.max_bytes), at_least)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            os.close(fd)
            os.unlink(path)  # nothing was written: the next try reuses this sequence number
            raise
        self._fd = fd
        self._path = path
        self._size = size
        self._pwrite(HEADER.pack(MAGIC, VERSION, self.acceptor, self.seq), 0)
        self.tail.attach(fd, HEADER_SIZE, self._run_end(),
                         self._head_of(self.seq) if self._head_of is not None else None)

    def _run_end(self) -> int:
        """Where a run's records must end: in the reserved space, with room for the zero
        length word after them, and within max-bytes-per-file."""
        return min(self._size - RECORD_HEAD.size, self.max_bytes)

    def append(self, blob: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Write one batch (encoded records); returns (seq, offset) of its first record."""
        need = len(blob)
        tail = self.tail
        if self._fd >= 0 and tail.pos + need > self.max_bytes and tail.pos > HEADER_SIZE:
            self._roll(HEADER_SIZE + need + RECORD_HEAD.size)
        if self._fd < 0:
            self._open(HEADER_SIZE + need + RECORD_HEAD.size)
        offset = tail.pos
        end = offset + need
        if end + RECORD_HEAD.size > self._size:
            step = max(_GROW_STEP, min(self._size, _GROW_MAX))
            new_size = max(min(self._size + step, max(self.max_bytes, end + 8)), end + RECORD_HEAD.size)
            os.posix_fallocate(self._fd, self._size, new_size - self._size)  # ENOSPC: nothing written
            self._size = new_size
            tail.end = self._run_end()
        self._pwrite(blob, offset)
        tail.pos = end
        tail.unsynced += 1
        if self.sync_every == 1:  # strict: this append's OK waits for its sync
            os.fdatasync(self._fd)
            tail.unsynced = 0
        elif self.sync_every and tail.unsynced >= self.sync_every:
            self.sync()
        return self.seq, offset

    def _pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        with memoryview(data) as view:
            done = 0
            while done < len(view):  # a regular file takes it all at once; loop anyway
                done += os.pwrite(self._fd, view[done:], offset + done)

    def sync(self) -> None:
        """fdatasync what was written since the last sync, on the background thread."""
        if self._fd < 0 or not self.tail.unsynced:
            return
        self._last_job = in_background(sync_file, self._fd, self._path, False)
        self.tail.unsynced = 0

    def _roll(self, at_least: int) -> None:
        """Go on in the next file; the full one's last sync and its close happen in the
        background, once the next one exists (creating a file waits for a journal commit
        that a big sync is holding)."""
        fd, path = self._fd, self._path
        self.tail.detach()
        self._fd = -1  # if the next file cannot be made, the next append tries again
        self.seq += 1
        try:
            self._open(at_least)
        finally:
            self._last_job = in_background(sync_file, fd, path, True)
            self.tail.unsynced = 0

    def close(self) -> None:
        """Sync and close now (a stop): after every background job of this writer."""
        if self._last_job is not None:
            self._last_job.result()
            self._last_job = None
        self.tail.detach()
        if self._fd >= 0:
            if self.tail.unsynced:
                os.fdatasync(self._fd)
                self.tail.unsynced = 0
            os.close(self._fd)
            self._fd = -1


class ScanStats:
    """What a scan had to skip: records with a bad checksum or length, and their bytes."""

    __slots__ = ("damaged", "skipped_bytes")

    def __init__(self) -> None:
        self.damaged = 0
        self.skipped_bytes = 0


# how far past a damaged record to look for the next valid one (a length word can be
# damaged too, so the record's own length cannot always be trusted)
RESYNC_WINDOW = (1 << 20) + (2 << 20)


def scan(path: str, stats: ScanStats | None = None, resync: bool = True) -> Iterator[tuple[int, bytes, int]]:
    """(offset, message encoding, due_ns) of every valid record, up to the end of the data.

    A damaged record (bad checksum, impossible length, torn or zeroed by a crash or a
    power loss) is skipped and reading resumes at the next valid record: first where the
    damaged record's own length says the next one starts, else at the first offset within
    RESYNC_WINDOW where a valid record begins. nsqd instead renames the file ".bad" and
    loses everything after the damage. With resync=False (a file a live writer may still
    be appending to) reading stops at the first record that is not valid.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < HEADER_SIZE:
            return
        data = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
    try:
        if data[:4] != MAGIC:
            return
        yield from _records(data, stats if stats is not None else ScanStats(), resync)
    finally:
        data.close()


def _valid_at(data, pos: int) -> int:
    """Size of the whole record (head + payload) if a valid one starts at pos, else 0."""
    if pos + 8 > len(data):
        return 0
    word, crc = RECORD_HEAD.unpack_from(data, pos)
    length = word & LENGTH_MASK
    if length < MIN_PAYLOAD + (DUE.size if word & DEFER else 0) or pos + 8 + length > len(data):
        return 0
    if _crc32c.crc32c(data[pos + 8:pos + 8 + length]) != crc:
        return 0
    return 8 + length


_ZEROS = bytes(8)
_NONZERO = re.compile(rb"[^\x00]")


def _next_valid(data, pos: int) -> int:
    """Offset of the first valid record after a damaged one at pos, or -1."""
    if data[pos:pos + 8] == _ZEROS:
        m = _NONZERO.search(data, pos)
        if m is None:
            return -1  # zeros to the end: the end of what was written
        start = max(pos + 1, m.start() - 7)
    else:
        guess = pos + 8 + (RECORD_HEAD.unpack_from(data, pos)[0] & LENGTH_MASK)
        if _valid_at(data, guess):
            return guess
        start = pos + 1
    for p in range(start, min(len(data) - 8, start + RESYNC_WINDOW)):
        if _valid_at(data, p):
            return p
    return -1


def _records(data, stats: ScanStats, resync: bool) -> Iterator[tuple[int, bytes, int]]:
    pos = HEADER_SIZE
    while pos + 8 <= len(data):
        total = _valid_at(data, pos)
        if not total:
            if not resync:
                return
            found = _next_valid(data, pos)
            if found < 0:
                if data[pos:pos + 8] != _ZEROS:  # trailing garbage, not the clean end
                    stats.damaged += 1
                    stats.skipped_bytes += len(data) - pos
                return
            stats.damaged += 1
            stats.skipped_bytes += found - pos
            pos = found
            continue
        word = RECORD_HEAD.unpack_from(data, pos)[0]
        payload = data[pos + 8:pos + total]
        if word & DEFER:
            yield pos, payload[8:], DUE.unpack_from(payload)[0]
        else:
            yield pos, payload, 0
        pos += total
