"""Server-to-client framing of the NSQ TCP protocol V2.

The frame (size i32, type i32, data; big-endian) and the message header (timestamp i64,
attempts u16, id 16 ASCII hex; also a segment record's payload) are drawn once in
native/layouts.h and declared for Python in nsqmp.layouts; the names below are those.
"""
from __future__ import annotations

import os
from array import array

from nsqmp.layouts import FRAME_ERROR, FRAME_HEAD, FRAME_SIZE, FRAME_MESSAGE, FRAME_RESPONSE, MESSAGE_FRAME_HEAD, MESSAGE_HEAD

__all__ = ["CLOSE_WAIT", "CLOSE_WAIT_FRAME", "FRAME_ERROR", "FRAME_HEADER", "FRAME_MESSAGE", "FRAME_RESPONSE",
           "HEARTBEAT", "HEARTBEAT_FRAME", "MAGIC_V2", "MESSAGE_HEADER", "MESSAGE_HEADER_SIZE", "OK", "OK_FRAME",
           "error", "frame", "frame_ends", "message_frame", "py_frame_ends", "response"]

MAGIC_V2 = b"  V2"

MESSAGE_HEADER = MESSAGE_HEAD
MESSAGE_HEADER_SIZE = MESSAGE_HEAD.size  # 26
FRAME_HEADER = FRAME_HEAD

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


def message_frame(timestamp: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """A type-2 frame carrying one message."""
    return MESSAGE_FRAME_HEAD.pack(len(body) + MESSAGE_HEADER_SIZE + 4, FRAME_MESSAGE,
                                    timestamp, attempts & 0xFFFF, msg_id) + body


OK_FRAME = response(OK)
HEARTBEAT_FRAME = response(HEARTBEAT)
CLOSE_WAIT_FRAME = response(CLOSE_WAIT)


def py_frame_ends(frames) -> bytes:
    """Where each whole frame of `frames` ends: native u32 offsets, one per frame; a frame
    cut short at the end is not counted. Twin of native/readback.c's."""
    ends = array("I")
    pos, end = 0, len(frames)
    word = FRAME_SIZE.size
    while end - pos >= word:
        (size,) = FRAME_SIZE.unpack_from(frames, pos)
        if not 0 <= size <= end - pos - word:
            break
        pos += word + size
        ends.append(pos)
    return ends.tobytes()


frame_ends = py_frame_ends
if os.environ.get("NSQMP_PURE_PYTHON", "") != "1":
    try:
        from nsqmp._native import frame_ends  # noqa: F811 (native/readback.c)
    except ImportError:  # extension not built
        pass
