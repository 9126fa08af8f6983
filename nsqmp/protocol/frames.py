"""Server-to-client framing of the NSQ TCP protocol V2.

Frame on the wire (big-endian)::

    +-----------+-----------+----------------+
    | size: i32 | type: i32 | data           |   size = 4 + len(data)
    +-----------+-----------+----------------+
      type 0 = response, 1 = error, 2 = message

Message frame data (also the payload of a segment record, see nsqmp.diskqueue)::

    +----------------+---------------+---------------+--------+
    | timestamp: i64 | attempts: u16 | id: 16 bytes  | body   |
    | ns since epoch |               | ASCII hex     |        |
    +----------------+---------------+---------------+--------+
      26 bytes of header: the smallest valid message
"""
from __future__ import annotations

import struct

MAGIC_V2 = b"  V2"

FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2

MESSAGE_HEADER = struct.Struct(">qH16s")
MESSAGE_HEADER_SIZE = MESSAGE_HEADER.size  # 26
FRAME_HEADER = struct.Struct(">ii")

HEARTBEAT = b"_heartbeat_"
OK = b"OK"
CLOSE_WAIT = b"CLOSE_WAIT"


def frame(frame_type: int, data: bytes) -> bytes:
    """One framed unit, ready to write."""
    return FRAME_HEADER.pack(len(data) + 4, frame_type) + data


def response(data: bytes) -> bytes:
    return frame(FRAME_RESPONSE, data)


def error(data: bytes) -> bytes:
    return frame(FRAME_ERROR, data)


_MESSAGE_FRAME_HEAD = struct.Struct(">iiqH16s")  # FRAME_HEADER + MESSAGE_HEADER in one pack


def message_frame(timestamp: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """A type-2 frame carrying one message."""
    return _MESSAGE_FRAME_HEAD.pack(len(body) + MESSAGE_HEADER_SIZE + 4, FRAME_MESSAGE,
                                    timestamp, attempts & 0xFFFF, msg_id) + body


OK_FRAME = response(OK)
HEARTBEAT_FRAME = response(HEARTBEAT)
CLOSE_WAIT_FRAME = response(CLOSE_WAIT)
