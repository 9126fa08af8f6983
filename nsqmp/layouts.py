"""The byte layouts C and Python both read and write, declared once for Python.

The diagrams are in ``native/layouts.h`` (the C declarations, prefix ``NQL_``); this
module declares the same names for the Python side (a size where C has a number, a
``struct.Struct`` of that size where Python packs the layout) and imports nothing of
ours, so every package may use it. ``tests/test_layouts.py`` holds each value here equal
to ``nsqmp._native.layouts`` (the header's constants, exported by ``native/layouts.c``).

The layouts it declares: the segment file header and records (with the DEFER bit and
the due time), the NSQ message header, the frame head, an MPUB's spans and an ack log
entry; each is drawn once, in native/layouts.h.

The ring's layout is drawn in ``native/ring.h`` and declared for Python in
:mod:`nsqmp.ipc.pyring`; the ring records' in :mod:`nsqmp.ipc.records`.
"""
from __future__ import annotations

import struct

# segment file header (nsqmp.diskqueue.segment writes and scans it)
SEGMENT_MAGIC = b"NQSG"
SEGMENT_VERSION = 1
SEGMENT_HEADER = struct.Struct("<4sHHI")  # magic, version, acceptor, seq; zero up to SEGMENT_HEADER_SIZE
SEGMENT_HEADER_SIZE = 64

# segment record
RECORD_HEAD = struct.Struct("<II")  # length word, crc32c of everything after it
LENGTH_MASK = 0x7FFFFFFF  # of the length word: bytes after the crc (a record's length limit)
DEFER = 0x80000000  # of the length word: a due time comes first
DUE = struct.Struct("<q")  # a DEFER record's due time, unix ns

# NSQ message header (a message frame's data; a segment record's payload past its due time)
MESSAGE_HEAD = struct.Struct(">qH16s")  # timestamp ns, attempts, id
ATTEMPTS_AT = 8
ID_AT = 10
ID = 16  # bytes of a message id

# NSQ frame (server to client)
FRAME_SIZE = struct.Struct(">i")  # the size word: the bytes after it (frame_ends walks by it)
FRAME_HEAD = struct.Struct(">ii")  # size = 4 + len(data), type
FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2
MESSAGE_FRAME_HEAD = struct.Struct(">iiqH16s")  # FRAME_HEAD + MESSAGE_HEAD in one pack: 34 bytes

# spans: where each body of an MPUB is in the read buffer (mpub_spans -> encode_records)
SPAN = struct.Struct("<II")  # offset, size

# ack log entry (nsqmp.diskqueue.acklog); an all-zero entry ends what was written
ACK_ENTRY = struct.Struct("<HHIQ")  # channel id, acceptor, seq, offset
ACK_ACCEPTOR_AT = 2
ACK_SEQ_AT = 4


def record_length(word: int) -> int:
    """Bytes after the crc of the record whose length word is word."""
    return word & LENGTH_MASK


def is_deferred(word: int) -> bool:
    """Whether the record whose length word is word starts with a due time."""
    return bool(word & DEFER)


def blob_deferred(blob: bytes | bytearray | memoryview) -> bool:
    """Whether the first record of blob (segment records, back to back) is DEFER."""
    return len(blob) >= 4 and bool(RECORD_HEAD.unpack_from(blob)[0] & DEFER)
