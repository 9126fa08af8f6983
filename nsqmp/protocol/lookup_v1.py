"""nsqlookupd's TCP protocol V1, the part both ends share (the daemon in nsqmp/lookupd/tcp.py,
the broker's registrar in nsqmp/acceptor/registrar.py).

    broker -> lookupd   "  V1" once, then lines "<COMMAND>[ <param>...]\\n";
                        IDENTIFY's line is followed by [4-byte size][JSON]
    lookupd -> broker   [4-byte size][data] (big-endian; NO frame type): "OK", a JSON
                        object, or "<E_CODE> <description>" after which it closes
"""
from __future__ import annotations

import struct

MAGIC = b"  V1"
SIZE = struct.Struct(">i")
OK = b"OK"


def frame(data: bytes) -> bytes:
    """``[4-byte size][data]``: every response and error of protocol V1."""
    return SIZE.pack(len(data)) + data


def identify(body: bytes) -> bytes:
    return b"IDENTIFY\n" + frame(body)


def register(topic: bytes, channel: bytes = b"") -> bytes:
    return b"REGISTER " + topic + (b" " + channel if channel else b"") + b"\n"


def unregister(topic: bytes, channel: bytes = b"") -> bytes:
    return b"UNREGISTER " + topic + (b" " + channel if channel else b"") + b"\n"


PING = b"PING\n"
