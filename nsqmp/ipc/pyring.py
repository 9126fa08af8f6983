"""Pure-Python twin of the native shared-memory SPSC byte ring.

This module is the *reference implementation* of the ring semantics: it
implements exactly the binary layout drawn in the comment at the top of
``native/ring.h`` (header of 512 bytes: magic/version/capacity/max_record,
``head`` at offset 64, ``tail`` at 128, ``consumer_sleeping`` at 192,
``producer_waiting`` at 256, data area from 512; records are
``u32 payload_len, u32 reserved`` + payload padded to 8 bytes, with a wrap
marker ``0xFFFFFFFF`` when a record does not fit before the end of the data
area) and the same API as ``nsqmp._native.Ring``, so both can be mixed on
the same buffer (format with one, push with the other, pop with either).

Memory ordering: the twin performs plain loads/stores through a
``memoryview`` in the same order the C code uses (record bytes, then head;
then the flag check; etc.).  The shared words (head, tail and the two flags)
are accessed through one-item memoryviews cast to ``Q``/``I``, whose item
get/set is a single native load/store.  ``struct.pack_into`` must NOT be
used for them: it zeroes the destination before writing the value, so a
concurrent reader can observe 0.  (It is fine for record headers, which the
other side only reads after they are published.)  Where the C code has a
seq_cst fence the twin calls ``_fence()`` (an uncontended lock round trip, a
full barrier on x86).  The flag "swaps" are a read followed by a write, not
atomic exchanges; that is safe because a side only clears the other side's
flag when it also rings the doorbell (a stray ring is harmless).  The twin
therefore relies on x86-64 (TSO) ordering: it is the reference for
*semantics* and a fallback on x86, not a correct implementation for
weakly-ordered CPUs (use the native one there).

Unlike the native type it does not require the buffer to be 8-byte aligned.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct
import sys
import threading
from collections.abc import Sequence
from operator import index as _index
from typing import Any

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "MAX_CAPACITY",
    "MIN_CAPACITY",
    "VERSION",
    "WRAP_MARKER",
    "PyRing",
    "record_size",
    "ring_size",
]

MAGIC = 0x4752514E  # "NQRG" as a little-endian u32
VERSION = 1
HEADER_SIZE = 512
MIN_CAPACITY = 4096
MAX_CAPACITY = 1 << 30
RECORD_HEADER = 8
WRAP_MARKER = 0xFFFFFFFF

# header offsets
OFF_MAGIC = 0
OFF_VERSION = 4
OFF_CAPACITY = 8
OFF_MAX_RECORD = 16
OFF_HEAD = 64
OFF_TAIL = 128
OFF_CONSUMER_SLEEPING = 192
OFF_PRODUCER_WAITING = 256

_U32 = struct.Struct("<I")
_REC = struct.Struct("<II")
_HDR = struct.Struct("<IHHQI")  # magic, version, reserved, capacity, max_record

# A full memory barrier for the Dekker-style sleep/wake handshake.  x86 TSO
# may reorder a store with a later load, so the twin needs a real fence where
# the C code has atomic_thread_fence(memory_order_seq_cst): acquiring and
# releasing an uncontended lock executes a LOCK-prefixed instruction, which
# is a full barrier on x86.
_fence_lock = threading.Lock()


def _fence() -> None:
    with _fence_lock:
        pass


# madvise for release_if_idle(): the C code calls it directly; ctypes is the twin's way
_libc = ctypes.CDLL(None, use_errno=True)
_madvise = _libc.madvise
_madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_madvise.restype = ctypes.c_int
_MADV_REMOVE = getattr(mmap, "MADV_REMOVE", 9)  # Linux's value
_PAGE = mmap.PAGESIZE
_NO_HEAD = -1  # last/released head before the first release_if_idle() call
# quiet: less than capacity >> _QUIET_SHIFT bytes since the previous call (see QUIET_SHIFT
# in native/ring.c: a trickle must not keep a burst's pages resident)
_QUIET_SHIFT = 5
# a private buffer (bytearray, private mapping): nothing to free
_NOT_SHARED = {errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS}


_CAPACITY_ERROR = "ring capacity must be a power of two between 4096 and 1 GiB"


def _capacity_valid(capacity: int) -> bool:
    return MIN_CAPACITY <= capacity <= MAX_CAPACITY and capacity & (capacity - 1) == 0


def _check_capacity(capacity: Any) -> int:
    if not isinstance(capacity, int):
        raise TypeError(f"capacity must be an int, not {type(capacity).__name__}")
    if not _capacity_valid(capacity):
        raise ValueError(_CAPACITY_ERROR)
    return int(capacity)


def ring_size(capacity: int) -> int:
    """Bytes of buffer needed for a ring with this data capacity."""
    return HEADER_SIZE + _check_capacity(capacity)


def record_size(length: int) -> int:
    """Bytes a record with ``length`` payload bytes occupies in the data area."""
    return (RECORD_HEADER + length + 7) & ~7


def _writable_view(buf: Any) -> memoryview:
    try:
        mv = memoryview(buf)
    except TypeError:
        raise TypeError(
            f"ring buffer must be a writable contiguous bytes-like object, "
            f"not {type(buf).__name__}"
        ) from None
    if mv.readonly or not mv.c_contiguous:
        mv.release()
        raise TypeError(
            f"ring buffer must be a writable contiguous bytes-like object, "
            f"not {type(buf).__name__}"
        )
    if mv.format != "B" or mv.ndim != 1:
        flat = mv.cast("B")
        mv.release()
        mv = flat
    return mv


def _payload(item: Any) -> bytes | memoryview:
    if type(item) is bytes:
        return item
    try:
        mv = memoryview(item)
    except TypeError:
        raise TypeError(
            f"record must be a contiguous bytes-like object, not {type(item).__name__}"
        ) from None
    if not mv.c_contiguous:
        raise TypeError(
            f"record must be a contiguous bytes-like object, not {type(item).__name__}"
        )
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


class PyRing:
    """Single-producer/single-consumer record ring over a formatted buffer.

    Same API and semantics as ``nsqmp._native.Ring``.
    """

    __slots__ = (
        "_capacity",
        "_data_addr",
        "_head",
        "_last_head",
        "_mask",
        "_max_record",
        "_mv",
        "_released_head",
        "_sleeping",
        "_tail",
        "_waiting",
    )

    def __init__(self, buf: Any) -> None:
        if sys.byteorder != "little":  # pragma: no cover
            raise RuntimeError("the ring layout is little-endian only")
        mv = _writable_view(buf)
        try:
            n = mv.nbytes
            if n < HEADER_SIZE:
                raise ValueError("buffer too small for the ring")
            magic, version, _reserved, capacity, max_record = _HDR.unpack_from(mv, 0)
            if magic != MAGIC:
                raise ValueError("buffer does not hold a ring (bad magic)")
            if version != VERSION:
                raise ValueError("unsupported ring layout version")
            if not _capacity_valid(capacity):
                raise ValueError(_CAPACITY_ERROR)
            if max_record != capacity // 4:
                raise ValueError("corrupt ring header")
            if n - HEADER_SIZE < capacity:
                raise ValueError("buffer too small for the ring")
        except BaseException:
            mv.release()
            raise
        self._mv: memoryview | None = mv
        # One-item views of the shared words: item access is a single
        # native load/store (see the module docstring).
        self._head = mv[OFF_HEAD : OFF_HEAD + 8].cast("Q")
        self._tail = mv[OFF_TAIL : OFF_TAIL + 8].cast("Q")
        self._sleeping = mv[OFF_CONSUMER_SLEEPING : OFF_CONSUMER_SLEEPING + 4].cast("I")
        self._waiting = mv[OFF_PRODUCER_WAITING : OFF_PRODUCER_WAITING + 4].cast("I")
        self._capacity: int = capacity
        self._mask: int = capacity - 1
        self._max_record: int = max_record
        # the data area's address, for madvise; stable while self._mv holds the export
        # (the ctypes object's own export ends with this statement)
        self._data_addr: int = ctypes.addressof(ctypes.c_char.from_buffer(mv)) + HEADER_SIZE
        self._last_head = _NO_HEAD
        self._released_head = _NO_HEAD

    @classmethod
    def format(cls, buf: Any, capacity: int) -> PyRing:
        """Write a fresh header (head/tail/flags zeroed) into buf; return a ring."""
        capacity = _check_capacity(capacity)
        mv = _writable_view(buf)
        try:
            if mv.nbytes < HEADER_SIZE + capacity:
                raise ValueError("buffer too small for the ring")
            mv[:HEADER_SIZE] = bytes(HEADER_SIZE)
            _HDR.pack_into(mv, 0, 0, VERSION, 0, capacity, capacity // 4)
            mv[OFF_MAGIC : OFF_MAGIC + 4] = _U32.pack(MAGIC)  # magic last
        finally:
            mv.release()
        return cls(buf)

    def release(self) -> None:
        """Release the buffer early; later operations raise ValueError."""
        mv = self._mv
        if mv is not None:
            self._mv = None
            for word in (self._head, self._tail, self._sleeping, self._waiting):
                word.release()
            mv.release()

    def _view(self) -> memoryview:
        mv = self._mv
        if mv is None:
            raise ValueError("operation on a released Ring")
        return mv

    # -- properties ---------------------------------------------------------

    @property
    def capacity(self) -> int:
        self._view()
        return self._capacity

    @property
    def max_record(self) -> int:
        self._view()
        return self._max_record

    def _used(self) -> int:
        tail = self._tail[0]  # tail first: head only grows, so head >= tail
        head = self._head[0]
        return min(head - tail, self._capacity)

    @property
    def used(self) -> int:
        self._view()
        return self._used()

    @property
    def free(self) -> int:
        self._view()
        return self._capacity - self._used()

    # -- producer -------------------------------------------------------------

    def _fits(self, head: int, tail: int, length: int) -> int:
        """-1 if a record of ``length`` bytes does not fit, else bytes skipped."""
        need = (RECORD_HEADER + length + 7) & ~7
        room = self._capacity - (head & self._mask)
        skip = 0 if need <= room else room
        if (head - tail) + skip + need > self._capacity:
            return -1
        return skip

    def _write(
        self, mv: memoryview, head: int, tail: int, data: Any, length: int
    ) -> int:
        """Write one record at local head (unpublished); new head or -1 if full."""
        skip = self._fits(head, tail, length)
        if skip < 0:
            return -1
        if skip:
            if skip >= RECORD_HEADER:
                _REC.pack_into(mv, HEADER_SIZE + (head & self._mask), WRAP_MARKER, 0)
            head += skip
        off = HEADER_SIZE + (head & self._mask)
        _REC.pack_into(mv, off, length, 0)
        if length:
            mv[off + RECORD_HEADER : off + RECORD_HEADER + length] = data
        return head + ((RECORD_HEADER + length + 7) & ~7)

    def _publish(self, head: int) -> bool:
        self._head[0] = head  # store-release in C
        _fence()  # seq_cst fence
        sleeping = self._sleeping
        if sleeping[0]:
            sleeping[0] = 0  # atomic exchange 1 -> 0 in C
            return True
        return False

    def _checked_payload(self, item: Any) -> tuple[Any, int]:
        data = _payload(item)
        length = len(data) if isinstance(data, bytes) else data.nbytes
        if length > self._max_record:
            raise ValueError(
                f"record of {length} bytes exceeds max_record ({self._max_record})"
            )
        return data, length

    def push(self, data: Any) -> int:
        """0 = full (nothing written), 1 = written, 2 = written + wake consumer."""
        mv = self._view()
        payload, length = self._checked_payload(data)
        head = self._head[0]
        head = self._write(mv, head, self._tail[0], payload, length)
        if head < 0:
            return 0
        return 2 if self._publish(head) else 1

    def push_many(self, records: Sequence[Any], start: int = 0) -> tuple[int, bool]:
        """Push records[start:] until one does not fit; publish head once.

        Returns (number written, wake_needed).  An invalid item raises and
        nothing is published.
        """
        mv = self._view()
        if not isinstance(records, (list, tuple)):
            try:
                records = list(records)
            except TypeError:
                raise TypeError(
                    "records must be a sequence of bytes-like objects"
                ) from None
        n = len(records)
        start = _index(start)
        if start < 0 or start > n:
            raise ValueError(f"start {start} out of range for {n} records")
        head0 = head = self._head[0]
        tail = self._tail[0]
        tail_refreshed = False
        write = self._write
        checked = self._checked_payload
        i = start
        while i < n:
            payload, length = checked(records[i])
            new_head = write(mv, head, tail, payload, length)
            if new_head < 0 and not tail_refreshed:
                # the consumer may have freed space since we started
                tail = self._tail[0]
                tail_refreshed = True
                new_head = write(mv, head, tail, payload, length)
            if new_head < 0:
                break
            head = new_head
            i += 1
        wake = False
        if head != head0:
            wake = self._publish(head)
        return i - start, wake

    def prepare_wait(self, needed: int) -> bool:
        """Producer: announce waiting; True if safe to sleep, False if it fits now."""
        self._view()
        needed = _index(needed)
        if needed < 0:
            raise ValueError("needed must be >= 0")
        if needed > self._max_record:
            raise ValueError(
                f"record of {needed} bytes exceeds max_record ({self._max_record})"
            )
        waiting = self._waiting
        head = self._head[0]
        if self._fits(head, self._tail[0], needed) >= 0:  # cheap pre-check
            if waiting[0]:
                waiting[0] = 0
            return False
        waiting[0] = 1
        _fence()  # seq_cst fence
        if self._fits(head, self._tail[0], needed) >= 0:
            waiting[0] = 0
            return False
        return True

    def release_if_idle(self) -> int:
        """Producer, on a slow timer: when the ring is empty and quiet (less than
        capacity/32 bytes pushed since the previous call; the first call only looks), give
        the data area's whole pages back (madvise MADV_REMOVE); returns the bytes
        released. See Ring_release_if_idle in native/ring.c for why a consumer running
        meanwhile never sees a released record."""
        self._view()
        head = self._head[0]
        last, self._last_head = self._last_head, head
        if (head != self._tail[0]  # load-acquire of tail in C
                or last == _NO_HEAD or head - last >= self._capacity >> _QUIET_SHIFT
                or head == self._released_head):
            return 0  # not empty, busy, or released already
        self._released_head = head
        start = (self._data_addr + _PAGE - 1) & ~(_PAGE - 1)
        end = (self._data_addr + self._capacity) & ~(_PAGE - 1)
        if end <= start:
            return 0
        if _madvise(start, end - start, _MADV_REMOVE) != 0:
            err = ctypes.get_errno()
            if err in _NOT_SHARED:
                return 0
            raise OSError(err, os.strerror(err))
        return end - start

    # -- consumer ---------------------------------------------------------------

    def _peek(
        self, mv: memoryview, tail: int, head: int
    ) -> tuple[int, int, int] | None:
        """(payload offset, length, next tail) of the next record, or None."""
        if tail == head:
            return None
        cap = self._capacity
        if head - tail > cap:
            raise RuntimeError("ring data area is corrupt (invalid record header)")
        pos = tail & self._mask
        room = cap - pos
        n = (
            WRAP_MARKER
            if room < RECORD_HEADER
            else _U32.unpack_from(mv, HEADER_SIZE + pos)[0]
        )
        if n == WRAP_MARKER:
            tail += room
            if tail >= head:
                raise RuntimeError("ring data area is corrupt (invalid record header)")
            pos = 0
            room = cap
            n = _U32.unpack_from(mv, HEADER_SIZE)[0]
        size = (RECORD_HEADER + n + 7) & ~7
        if n > self._max_record or size > room or size > head - tail:
            raise RuntimeError("ring data area is corrupt (invalid record header)")
        return HEADER_SIZE + pos + RECORD_HEADER, n, tail + size

    def pop(self) -> bytes | None:
        """Remove and return the oldest record, or None if empty."""
        mv = self._view()
        head = self._head[0]  # load-acquire in C
        rec = self._peek(mv, self._tail[0], head)
        if rec is None:
            return None
        off, n, nxt = rec
        data = bytes(mv[off : off + n])
        self._tail[0] = nxt  # store-release in C
        return data

    def pop_many(
        self, max_records: int = 1 << 30, max_bytes: int = 1 << 62
    ) -> list[bytes]:
        """Pop up to max_records records / max_bytes payload bytes (>= 1 if any)."""
        mv = self._view()
        max_records = _index(max_records)
        max_bytes = _index(max_bytes)
        if max_records < 0 or max_bytes < 0:
            raise ValueError("max_records and max_bytes must be >= 0")
        head = self._head[0]  # load-acquire in C
        tail0 = tail = self._tail[0]
        out: list[bytes] = []
        total = 0
        peek = self._peek
        while len(out) < max_records:
            rec = peek(mv, tail, head)
            if rec is None:
                break
            off, n, nxt = rec
            if out and total + n > max_bytes:
                break
            out.append(bytes(mv[off : off + n]))
            total += n
            tail = nxt
        if tail != tail0:
            self._tail[0] = tail  # store-release in C
        return out

    def prepare_sleep(self) -> bool:
        """Consumer: announce sleep; True if safe to sleep, False if data present."""
        self._view()
        sleeping = self._sleeping
        if self._head[0] != self._tail[0]:  # cheap pre-check, no announcement
            if sleeping[0]:
                sleeping[0] = 0
            return False
        sleeping[0] = 1
        _fence()  # seq_cst fence
        if self._head[0] != self._tail[0]:
            sleeping[0] = 0
            return False
        return True

    def take_producer_wakeup(self) -> bool:
        """Consumer, after popping: True if the producer must be woken."""
        self._view()
        _fence()  # seq_cst fence
        waiting = self._waiting
        if waiting[0]:
            waiting[0] = 0  # atomic exchange 1 -> 0 in C
            return True
        return False
