"""The router's read-back path in pure Python: the twin of native/readback.c.

Same API and same results as the native ``Message``, ``read_messages`` and
``pack_frames`` (the tests compare them byte for byte); nsqmp/router/readback.py picks
one. Segment records are those of nsqmp/diskqueue/segment.py (drawn in
native/publish.h); frames are those of nsqmp/protocol/frames.py.
"""
from __future__ import annotations

import struct

from nsqmp.diskqueue.segment import DEFER, MIN_PAYLOAD

__all__ = ["Message", "pack_frames", "read_messages"]

_WORD = struct.Struct("<I")
_TS = struct.Struct(">q")
_DUE = struct.Struct("<q")
_LENGTH = 0x7FFFFFFF
_FRAME_HEAD = struct.Struct(">iiqH16s")  # size, type 2, timestamp, attempts, id
_FRAME_HEAD_SIZE = _FRAME_HEAD.size  # 34


class Message:
    """A message as the router holds it; shared by every channel of its topic. msg_id (16
    bytes) and body are copied into it and read-only, as in the native one."""

    __slots__ = ("_id", "ts", "_body", "segment", "offset")

    def __init__(self, msg_id: bytes | bytearray | memoryview, ts: int, body: bytes | bytearray | memoryview,
                 segment, offset: int) -> None:
        # a copy unless already bytes; TypeError unless bytes-like, as the native "y*"
        msg_id = msg_id if type(msg_id) is bytes else bytes(memoryview(msg_id))
        if len(msg_id) != 16:
            raise ValueError("a message id must be 16 bytes")
        self._id = msg_id
        self.ts = ts
        self._body = body if type(body) is bytes else bytes(memoryview(body))
        self.segment = segment  # the Segment whose refs count this message, or None
        self.offset = offset  # of its record in that segment

    @property
    def id(self) -> bytes:
        return self._id

    @property
    def body(self) -> bytes:
        return self._body


def read_messages(buf, base: int, want: int, segment) -> tuple[list[tuple[Message, int]], int, int]:
    """Up to `want` whole records from the start of buf: (entries, consumed, deferred).

    entries are (Message, due_ns or 0), each message's offset base + its record's
    position in buf; consumed is the bytes of those whole records (a partial record at
    the end is left); deferred counts the entries with due_ns != 0. A length word of 0
    (ValueError "no record at offset N") or a record shorter than a message header
    (ValueError "record too short at offset N") is an error. CRCs are not verified.
    """
    data = buf if type(buf) is bytes else memoryview(buf).cast("B")
    n = len(data)
    entries: list[tuple[Message, int]] = []
    append = entries.append
    word_at = _WORD.unpack_from
    ts_at = _TS.unpack_from
    deferred = 0
    pos = 0
    while len(entries) < want and n - pos >= 8:
        word = word_at(data, pos)[0]
        length = word & _LENGTH
        if length == 0:
            raise ValueError(f"no record at offset {base + pos}")
        p = pos + 8
        stop = p + length
        if word & DEFER:
            if length < MIN_PAYLOAD + 8:
                raise ValueError(f"record too short at offset {base + pos}")
            if stop > n:
                break
            due = _DUE.unpack_from(data, p)[0]
            p += 8
            if due:
                deferred += 1
        else:
            if length < MIN_PAYLOAD:
                raise ValueError(f"record too short at offset {base + pos}")
            if stop > n:
                break
            due = 0
        append((Message(data[p + 10:p + 26], ts_at(data, p)[0], data[p + 26:stop], segment,
                        base + pos), due))
        pos = stop
    return entries, pos, deferred


def pack_frames(head, entries, start: int, max_bytes: int) -> tuple[bytes, int]:
    """head + the NSQ message frames of entries[start:] ((Message, attempts) pairs) while
    the frames total at most max_bytes (always at least one frame); (bytes, next index)."""
    if start < 0:
        raise ValueError("start must not be negative")
    parts = [head]
    pack = _FRAME_HEAD.pack
    size = 0
    i, n = start, len(entries)
    while i < n:
        m, attempts = entries[i]
        body = m.body
        flen = _FRAME_HEAD_SIZE + len(body)
        if i > start and size + flen > max_bytes:
            break
        parts.append(pack(flen - 4, 2, m.ts, attempts & 0xFFFF, m.id))
        parts.append(body)
        size += flen
        i += 1
    return b"".join(parts), i
