"""Client side of the NSQ TCP protocol V2: command encoding and frame decoding."""
from __future__ import annotations

import struct
from dataclasses import dataclass

import orjson

from nsqmp.layouts import FRAME_ERROR as FRAME_ERROR  # re-exported: the client's callers read them here
from nsqmp.layouts import FRAME_HEAD as _FRAME
from nsqmp.layouts import FRAME_MESSAGE as FRAME_MESSAGE
from nsqmp.layouts import FRAME_RESPONSE as FRAME_RESPONSE
from nsqmp.layouts import MESSAGE_HEAD as _MSG

MAGIC = b"  V2"
_I32 = struct.Struct(">i")


@dataclass
class Message:
    id: bytes
    timestamp: int
    attempts: int
    body: bytes


def identify(data: dict) -> bytes:
    body = orjson.dumps(data)
    return b"IDENTIFY\n" + _I32.pack(len(body)) + body


def auth(secret: str | bytes) -> bytes:
    body = _b(secret)
    return b"AUTH\n" + _I32.pack(len(body)) + body


def pub(topic: str | bytes, body: bytes) -> bytes:
    return b"PUB " + _b(topic) + b"\n" + _I32.pack(len(body)) + body


def mpub(topic: str | bytes, bodies: list[bytes]) -> bytes:
    parts = [_I32.pack(len(bodies))]
    for body in bodies:
        parts.append(_I32.pack(len(body)))
        parts.append(body)
    payload = b"".join(parts)
    return b"MPUB " + _b(topic) + b"\n" + _I32.pack(len(payload)) + payload


def dpub(topic: str | bytes, defer_ms: int, body: bytes) -> bytes:
    return b"DPUB " + _b(topic) + b" %d\n" % defer_ms + _I32.pack(len(body)) + body


def sub(topic: str | bytes, channel: str | bytes) -> bytes:
    return b"SUB " + _b(topic) + b" " + _b(channel) + b"\n"


def rdy(count: int) -> bytes:
    return b"RDY %d\n" % count


def fin(msg_id: bytes) -> bytes:
    return b"FIN " + msg_id + b"\n"


def req(msg_id: bytes, delay_ms: int) -> bytes:
    return b"REQ " + msg_id + b" %d\n" % delay_ms


def touch(msg_id: bytes) -> bytes:
    return b"TOUCH " + msg_id + b"\n"


NOP = b"NOP\n"
CLS = b"CLS\n"


def _b(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def decode_message(data: bytes | memoryview) -> Message:
    ts, attempts, msg_id = _MSG.unpack_from(data)
    return Message(msg_id, ts, attempts, bytes(data[26:]))


class FrameReader:
    """Accumulates bytes and yields complete (frame_type, data) pairs."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes, most: int | None = None) -> list[tuple[int, bytes]]:
        """Complete frames, at most `most` of them; what follows stays in self.buf (after
        IDENTIFY turns compression on, the rest of a read is no longer frames)."""
        self.buf += data
        out: list[tuple[int, bytes]] = []
        buf = self.buf
        pos = 0
        while len(buf) - pos >= 8 and (most is None or len(out) < most):
            size, ftype = _FRAME.unpack_from(buf, pos)
            if size < 4:
                raise ValueError(f"frame size {size} is less than its type field")
            if len(buf) - pos < 4 + size:
                break
            out.append((ftype, bytes(buf[pos + 8:pos + 4 + size])))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return out


def py_fin_replies(buf: bytes | bytearray | memoryview) -> tuple[bytes, int, int, bytes | None]:
    """(replies, messages, consumed, error): a FIN line for every message frame and NOP for
    every heartbeat among the whole frames at the start of buf, stopping after an error
    frame (its data). The bench reader's scanner; its C twin is nsqmp.bench._client's
    (native/bench/client.c), which nsqmp.bench.tool picks when it is built."""
    replies = []
    pos, n, messages = 0, len(buf), 0
    while n - pos >= 8:
        size, ftype = _FRAME.unpack_from(buf, pos)
        if size < 4:
            raise ValueError(f"bad frame size {size} at {pos}")
        if n - pos < 4 + size:
            break
        data = bytes(buf[pos + 8:pos + 4 + size])
        pos += 4 + size
        if ftype == FRAME_MESSAGE:
            if len(data) < 26:
                raise ValueError(f"message frame of {len(data)} bytes")
            replies.append(b"FIN " + data[10:26] + b"\n")
            messages += 1
        elif ftype == FRAME_RESPONSE:
            if data == b"_heartbeat_":
                replies.append(NOP)
        else:
            return b"".join(replies), messages, pos, data
    return b"".join(replies), messages, pos, None
