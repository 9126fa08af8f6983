"""The router's read-back path in pure Python: the twin of native/readback.c.

Same API and same results as the native ``Message``, ``read_messages`` and
``pack_frames`` (the tests compare them byte for byte); nsqmp/router/readback.py picks
one. Segment records, message headers and frames are drawn in native/layouts.h and declared
for Python in nsqmp.layouts, imported here.
"""
from __future__ import annotations

import struct

from nsqmp.layouts import (DEFER, DUE, FRAME_MESSAGE, ID, ID_AT, LENGTH_MASK, MESSAGE_FRAME_HEAD, MESSAGE_HEAD,
                           RECORD_HEAD)

__all__ = ["Message", "pack_frames", "pack_members", "read_messages"]

_WORD = struct.Struct("<I")  # a record's length word (RECORD_HEAD's first field)
_TS = struct.Struct(">q")  # a message header's timestamp (MESSAGE_HEAD's first field)
_HEAD = RECORD_HEAD.size
_MIN = MESSAGE_HEAD.size
_ID_END = ID_AT + ID
_FRAME_HEAD_SIZE = MESSAGE_FRAME_HEAD.size  # 34


class Message:
    """A message as the router holds it; shared by every channel of its topic. msg_id (16
    bytes) and body are copied into it and read-only, as in the native one."""

    __slots__ = ("_id", "ts", "_body", "segment", "offset")

    def __init__(self, msg_id: bytes | bytearray | memoryview, ts: int, body: bytes | bytearray | memoryview,
                 segment, offset: int) -> None:
        # a copy unless already bytes; TypeError unless bytes-like, as the native "y*"
        msg_id = msg_id if type(msg_id) is bytes else bytes(memoryview(msg_id))
        if len(msg_id) != ID:
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
    while len(entries) < want and n - pos >= _HEAD:
        word = word_at(data, pos)[0]
        length = word & LENGTH_MASK
        if length == 0:
            raise ValueError(f"no record at offset {base + pos}")
        p = pos + _HEAD
        stop = p + length
        if word & DEFER:
            if length < _MIN + DUE.size:
                raise ValueError(f"record too short at offset {base + pos}")
            if stop > n:
                break
            due = DUE.unpack_from(data, p)[0]
            p += DUE.size
            if due:
                deferred += 1
        else:
            if length < _MIN:
                raise ValueError(f"record too short at offset {base + pos}")
            if stop > n:
                break
            due = 0
        append((Message(data[p + ID_AT:p + _ID_END], ts_at(data, p)[0], data[p + _MIN:stop], segment,
                        base + pos), due))
        pos = stop
    return entries, pos, deferred


def pack_frames(head, entries, start: int, max_bytes: int) -> tuple[bytes, int]:
    """head + the NSQ message frames of entries[start:] ((Message, attempts) pairs) while
    the frames total at most max_bytes (always at least one frame); (bytes, next index)."""
    if start < 0:
        raise ValueError("start must not be negative")
    parts = [head]
    pack = MESSAGE_FRAME_HEAD.pack
    size = 0
    i, n = start, len(entries)
    while i < n:
        m, attempts = entries[i]
        body = m.body
        flen = _FRAME_HEAD_SIZE + len(body)
        if i > start and size + flen > max_bytes:
            break
        parts.append(pack(flen - 4, FRAME_MESSAGE, m.ts, attempts & 0xFFFF, m.id))
        parts.append(body)
        size += flen
        i += 1
    return b"".join(parts), i


def pack_members(head, members: list, start: int, max_bytes: int) -> tuple[bytes, int]:
    """pack_frames over a flight's flat members list (message, attempts, ...: what fly
    appends); start and the index returned count messages, not list items."""
    if len(members) % 2:
        raise TypeError("members must be a list of message, attempts, ...")
    if start < 0:
        raise ValueError("start must not be negative")
    # the pairs from start on only: the router calls this once per record of a flight
    rest = members[2 * start:]
    data, taken = pack_frames(head, list(zip(rest[::2], rest[1::2])), 0, max_bytes)
    return data, start + taken
