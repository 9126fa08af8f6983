"""Pure-Python twin of native/pubrun.c: a run of PUB/MPUB commands from a read buffer to
a segment file in one call (the reference; same API, same bytes, same stops).

``pub_run(buf, pos, topic, fd, file_pos, room, max_msg_size, max_body_size, ts_ns, node,
ms, seq, window=None, window_pos=0)`` takes, from ``buf[pos:]``, the commands
``PUB <topic>\\n`` and ``MPUB <topic>\\n`` that the general parse loop would answer OK,
encodes one segment record per message (stamped ts_ns, ids from the generator state
(ms, seq) of nsqmp/protocol/ids.py, one per message) and writes them at ``file_pos`` of
``fd``: copied into ``window`` (a writable mapping of the file) at ``window_pos`` when
they are at most PUB_RUN_MAPPED_MAX bytes and fit, else with one pwrite (``fd < 0``: not
written). It stops before the first command that is not of that form, is incomplete, or
would not fit in ``room``; see native/pubrun.c for the exact rules. Returns
``(end, commands, messages, written, ms, seq, status)``.

``SegmentTail`` is the twin of native/segtail.c: the file state of a segment writer
with what a run needs (topic, ids, limits, the PUBLISH_AT template), so that a
connection's run is one call, ``tail.run(buf, pos)``.
"""
from __future__ import annotations

import mmap
import os
import struct
import time
from typing import TYPE_CHECKING

from nsqmp.diskqueue.pyencoder import crc32c
from nsqmp.layouts import MESSAGE_HEAD, RECORD_HEAD

if TYPE_CHECKING:
    from typing_extensions import Buffer

PUB_RUN_END, PUB_RUN_MORE, PUB_RUN_OTHER, PUB_RUN_ROOM = 0, 1, 2, 3
PUB_RUN_MAPPED_MAX = 4096  # a run's bytes copied into the window at most (as the C)
_EPOCH_MS = 1288834974657  # nsqmp/protocol/ids.py's
_SEQ_MAX = 0x1000
_MAX_OUT = 1 << 20  # bytes encoded per call at most (as the C)
_I32 = struct.Struct(">i")
_EXTRA = RECORD_HEAD.size + MESSAGE_HEAD.size


class _Run:
    """The records of one call and the id generator's state."""

    def __init__(self, ts: int, node: int, ms: int, seq: int, limit: int) -> None:
        self.out = bytearray()
        self.ts = ts
        self.node = node & 0x3FF
        now_ms = ts // 1_000_000 - _EPOCH_MS
        self.ms, self.seq = (now_ms, 0) if now_ms > ms else (ms, seq)
        self.limit = limit

    def encode(self, body: bytes) -> None:
        if self.seq >= _SEQ_MAX:
            self.ms, self.seq = self.ms + 1, 0
        msg_id = b"%016x" % ((self.ms << 22 | self.node << 12 | self.seq) & 0xFFFFFFFFFFFFFFFF)
        self.seq += 1
        payload = MESSAGE_HEAD.pack(self.ts, 0, msg_id) + body
        self.out += RECORD_HEAD.pack(len(payload), crc32c(payload)) + payload


def _line(data: bytes, at: int, verb: bytes, topic: bytes) -> int:
    """Bytes of the line verb+topic+\\n at data[at:], 0 if another command, -1 if cut short."""
    want = verb + topic + b"\n"
    have = data[at:at + len(want)]
    if not want.startswith(have):
        return 0
    return len(want) if len(have) == len(want) else -1


def _take(run: _Run, data: bytes, at: int, topic: bytes, max_msg: int, max_body: int
          ) -> tuple[int, int, int]:
    """(status, bytes used, messages) of the command at data[at:]."""
    avail = len(data) - at
    mpub = data[at:at + 1] == b"M"
    line = _line(data, at, b"MPUB " if mpub else b"PUB ", topic)
    if line == 0:
        return PUB_RUN_OTHER, 0, 0
    if line < 0 or avail - line < 4:
        return PUB_RUN_MORE, 0, 0
    (size,) = _I32.unpack_from(data, at + line)
    body = at + line + 4
    if not mpub:
        if size <= 0 or size > max_msg:
            return PUB_RUN_OTHER, 0, 0
        if avail - line - 4 < size:
            return PUB_RUN_MORE, 0, 0
        if len(run.out) + _EXTRA + size > run.limit:
            return PUB_RUN_ROOM, 0, 0
        run.encode(data[body:body + size])
        return PUB_RUN_END, line + 4 + size, 1
    if size < 4 or size > max_body:
        return PUB_RUN_OTHER, 0, 0
    if avail - line - 4 < size:
        return PUB_RUN_MORE, 0, 0
    (count,) = _I32.unpack_from(data, body)
    if count <= 0 or count > (max_body - 4) // 5:
        return PUB_RUN_OTHER, 0, 0
    spans, q, end, need = [], body + 4, body + size, 0
    for _ in range(count):
        if end - q < 4:
            return PUB_RUN_OTHER, 0, 0
        (m,) = _I32.unpack_from(data, q)
        if m <= 0 or m > max_msg or end - q - 4 < m:
            return PUB_RUN_OTHER, 0, 0
        spans.append((q + 4, m))
        need += _EXTRA + m
        q += 4 + m
    if len(run.out) + need > run.limit:
        return PUB_RUN_ROOM, 0, 0
    for off, m in spans:
        run.encode(data[off:off + m])
    return PUB_RUN_END, line + 4 + size, count


def pub_run(buf: Buffer, pos: int, topic: bytes, fd: int, file_pos: int, room: int,
            max_msg_size: int, max_body_size: int, ts_ns: int, node: int, ms: int, seq: int,
            window: Buffer | None = None, window_pos: int = 0, /
            ) -> tuple[int, int, int, int, int, int, int]:
    """Take the PUB/MPUB commands for topic from buf[pos:] and append their records to fd
    (see the module docstring). Raises OSError if the write fails."""
    data = bytes(buf)
    win = None if window is None else memoryview(window)
    if win is not None and win.readonly:
        raise BufferError("Object is not writable.")  # what the C's PyObject_GetBuffer says
    if not 0 <= pos <= len(data) or not topic or (win is not None and not 0 <= window_pos <= len(win)):
        raise ValueError("pos outside the buffer, window_pos outside the window, or an empty topic")
    run = _Run(ts_ns, node, ms, seq, max(0, min(room, _MAX_OUT)))
    at, commands, messages, status = pos, 0, 0, PUB_RUN_END
    while at < len(data):
        status, used, count = _take(run, data, at, bytes(topic), max_msg_size, max_body_size)
        if status != PUB_RUN_END:
            break
        at += used
        commands += 1
        messages += count
    if run.out and win is not None and len(run.out) <= min(PUB_RUN_MAPPED_MAX, len(win) - window_pos):
        win[window_pos:window_pos + len(run.out)] = run.out
    elif run.out and fd >= 0:
        done = 0
        while done < len(run.out):
            done += os.pwrite(fd, memoryview(run.out)[done:], file_pos + done)
    return at, commands, messages, len(run.out), run.ms, run.seq, status


class SegmentTail:
    """Twin of native/segtail.c's SegmentTail: where an acceptor appends to one topic's
    segment file, with what a publish run needs (native/segtail.c's comment says what
    each part is). The window is a Python mmap of the file."""

    def __init__(self, topic: bytes = b"", ids=None, max_msg: int = 0, max_body: int = 0,
                 fields: tuple[int, int, int] = (0, 0, 0), window: int = 4 << 20) -> None:
        if window <= 0 or window % mmap.PAGESIZE or min(fields) < 0:
            raise ValueError("window must be a positive multiple of the page, fields >= 0")
        self.topic, self.ids, self.max_msg, self.max_body = bytes(topic), ids, max_msg, max_body
        self._fields, self._window = fields, window
        self.head: bytes | None = None
        self.on_sync = None
        self.fd, self.pos, self.end, self.unsynced, self.sync_every = -1, 0, 0, 0, 0
        self.taking = True
        self._map: mmap.mmap | None = None
        self.window_start = self.window_len = 0

    def attach(self, fd: int, pos: int, end: int, head: bytes | None) -> None:
        if head is not None and any(at + n > len(head) for at, n in zip(self._fields, (8, 4, 4))):
            raise ValueError("head is shorter than its fields")
        self._unmap()
        self.fd, self.pos, self.end, self.head = fd, pos, end, head

    def detach(self) -> None:
        self._unmap()
        self.fd, self.head = -1, None

    def run(self, buf: Buffer, pos: int) -> tuple[int, int, int, bytes | None]:
        if not 0 <= pos <= len(buf):
            raise ValueError("pos outside the buffer")
        if not self.taking or self.fd < 0 or self.head is None or self.ids is None or not self.topic:
            return pos, 0, 0, None
        at = self.pos
        win_end = self.window_start + self.window_len
        if self._map is None or at < self.window_start or (
                win_end - at < PUB_RUN_MAPPED_MAX and win_end < self.end):
            self._remap(at)
        ids = self.ids
        end, commands, messages, size, ms, seq, _ = pub_run(
            buf, pos, self.topic, self.fd, at, self.end - at, self.max_msg, self.max_body,
            time.time_ns(), ids.node, ids.ms, ids.seq, self._map, at - self.window_start)
        if not commands:
            return pos, 0, 0, None
        ids.ms, ids.seq = ms, seq
        self.pos = at + size
        self.unsynced += 1
        record = bytearray(self.head)
        for at_field, fmt, value in zip(self._fields, ("<Q", "<I", "<I"), (at, messages, size)):
            struct.pack_into(fmt, record, at_field, value)
        if self.sync_every == 1:
            os.fdatasync(self.fd)
            self.unsynced = 0
        elif self.sync_every > 0 and self.unsynced >= self.sync_every and self.on_sync is not None:
            self.on_sync()
        return end, commands, messages, bytes(record)

    def _remap(self, at: int) -> None:
        self._unmap()
        start = at - at % mmap.PAGESIZE
        length = min(self.end - start, self._window)
        if length <= 0:
            return
        try:
            self._map = mmap.mmap(self.fd, length, offset=start)
        except OSError:
            return  # runs go by pwrite
        self.window_start, self.window_len = start, length

    def _unmap(self) -> None:
        if self._map is not None:
            self._map.close()
        self._map = None
        self.window_start = self.window_len = 0
