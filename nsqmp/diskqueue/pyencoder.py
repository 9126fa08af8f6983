"""Pure-Python twin of the publish-path encoder (native/publish.{h,c}), and the reference.

Message bodies, given as spans of a source buffer (packed little-endian u32
``(offset, size)`` pairs, as ``mpub_spans`` returns them), become the segment records
of :mod:`nsqmp.diskqueue.segment` (drawn once, in ``native/layouts.h``; declared for
Python in :mod:`nsqmp.layouts`), written into a writable buffer, with attempts 0.

Same API and the same bytes as the native functions; the tests compare them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import crc32c as _crc32c

from nsqmp.layouts import DEFER, DUE, LENGTH_MASK, MESSAGE_HEAD, RECORD_HEAD, SPAN

if TYPE_CHECKING:
    from typing_extensions import Buffer

_EXTRA = RECORD_HEAD.size + MESSAGE_HEAD.size
CRC32C_HARDWARE = 0  # the twin uses the crc32c package


def crc32c(data: Buffer, value: int = 0, /) -> int:
    """CRC-32C of data, continuing from value."""
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError("value must fit in 32 bits")
    return _crc32c.crc32c(bytes(data), value)


def _spans(spans: Buffer) -> list[tuple[int, int]]:
    view = memoryview(spans).cast("B")
    if len(view) % SPAN.size:
        raise ValueError("spans must be packed (offset u32, size u32) pairs")
    return list(SPAN.iter_unpack(view))


def records_size(spans: Buffer, deferred: bool, /) -> int:
    """Bytes of the segment records encode_records writes for these spans."""
    extra = _EXTRA + (DUE.size if deferred else 0)
    total = 0
    for _, size in _spans(spans):
        if size + extra - RECORD_HEAD.size > LENGTH_MASK:
            raise ValueError("a message is too long for a segment record")
        total += size + extra
    return total


def encode_records(dst: Buffer, dst_pos: int, src: Buffer, spans: Buffer, ts_ns: int,
                   first_id: int, due_ns: int, /) -> int:
    """Write the records of every span of src into dst at dst_pos; returns the bytes written.

    Message k gets the ID first_id + k; due_ns != 0 makes the records deferred.
    Raises ValueError, writing nothing, if a span is outside src or dst is too small.
    """
    out = memoryview(dst).cast("B")
    if out.readonly:
        raise BufferError("Object is not writable.")
    data = memoryview(src).cast("B")
    pairs = _spans(spans)
    if dst_pos < 0 or dst_pos > len(out):
        raise ValueError("dst is too small for the records")
    for off, size in pairs:
        if off + size > len(data):
            raise ValueError("a span is outside src")
    need = records_size(spans, due_ns != 0)
    if need > len(out) - dst_pos:
        raise ValueError("dst is too small for the records")
    due = DUE.pack(due_ns) if due_ns else b""
    pos = dst_pos
    for k, (off, size) in enumerate(pairs):
        msg_id = b"%016x" % ((first_id + k) & 0xFFFFFFFFFFFFFFFF)
        payload = due + MESSAGE_HEAD.pack(ts_ns, 0, msg_id) + bytes(data[off:off + size])
        word = len(payload) | (DEFER if due_ns else 0)
        record = RECORD_HEAD.pack(word, _crc32c.crc32c(payload)) + payload
        out[pos:pos + len(record)] = record
        pos += len(record)
    return pos - dst_pos
