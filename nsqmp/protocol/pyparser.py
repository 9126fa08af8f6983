"""Pure-Python twin of the native command parser (``nsqmp._native.Parser``).

The reference implementation: same API, same results, same error texts as
``native/parser.c``; the wire layouts, the limits and nsqd's error texts are
drawn once, in ``native/parser.h``. The tests run both on arbitrary bytes and
require identical answers.

``PyParser(max_msg_size, max_body_size, max_line=16384).scan(buf, pos)`` walks
the buffer from ``pos`` and returns ``(commands, end, status, error)``:

- ``commands``: ``(params, body_off, body_len, next)`` per command; ``params`` is
  the line split on every single space (``params[0]`` the token); ``body_off`` is
  the offset of the body in ``buf`` (IDENTIFY, AUTH, PUB, MPUB, DPUB), or
  ``NO_BODY``; only the last command may have ``BODY_PENDING`` (its size or body
  is not all there; ``body_len`` is the size, -1 if unknown) or ``BODY_INVALID``
  (its size breaks a limit: ``error``); ``next`` is where the following command
  starts (the command's own line again when its body is not ready).
- ``end``: where the next scan should start.
- ``status``: why the scan stopped (``SCAN_*``).
- ``error``: ``(code, text)`` with ``SCAN_BAD_BODY``, else None.

``mpub_spans`` validates an MPUB body as nsqd does and returns its messages as packed
little-endian u32 ``(offset, size)`` pairs, or the error.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from nsqmp.layouts import SPAN

if TYPE_CHECKING:
    from typing_extensions import Buffer

MAX_LINE = 16384

NO_BODY = -1
BODY_PENDING = -2
BODY_INVALID = -3

SCAN_NEED_MORE = 0
SCAN_MORE = 1
SCAN_BODY_PENDING = 2
SCAN_BAD_BODY = 3
SCAN_LINE_TOO_LONG = 4

Command = tuple[tuple[bytes, ...], int, int, int]
ClientErrorText = tuple[str, str]

_I32 = struct.Struct(">i")
_SPAN = SPAN  # nsqmp.layouts: where each body of an MPUB is
# one shared object per known token, as the native parser has
_TOKENS = {t: t for t in (b"IDENTIFY", b"AUTH", b"PUB", b"MPUB", b"DPUB", b"SUB", b"RDY", b"FIN",
                          b"REQ", b"TOUCH", b"CLS", b"NOP")}


def _limit_bigger_body(name: str, size: int, max_msg: int, max_body: int) -> ClientErrorText | None:
    # IDENTIFY, AUTH: the upper limit first
    if size > max_body:
        return ("E_BAD_BODY", f"{name} body too big {size} > {max_body}")
    if size <= 0:
        return ("E_BAD_BODY", f"{name} invalid body size {size}")
    return None


def _limit_message(name: str, size: int, max_msg: int, max_body: int) -> ClientErrorText | None:
    # PUB, DPUB
    if size <= 0:
        return ("E_BAD_MESSAGE", f"{name} invalid message body size {size}")
    if size > max_msg:
        return ("E_BAD_MESSAGE", f"{name} message too big {size} > {max_msg}")
    return None


def _limit_mpub(name: str, size: int, max_msg: int, max_body: int) -> ClientErrorText | None:
    if size <= 0:
        return ("E_BAD_BODY", f"{name} invalid body size {size}")
    if size > max_body:
        return ("E_BAD_BODY", f"{name} body too big {size} > {max_body}")
    return None


_BODY_LIMITS = {
    b"IDENTIFY": _limit_bigger_body, b"AUTH": _limit_bigger_body,
    b"PUB": _limit_message, b"DPUB": _limit_message, b"MPUB": _limit_mpub,
}


def _bytes(buf: Any) -> bytes | bytearray:
    """Something with .find: bytes and bytearray as they are, other buffers copied."""
    if isinstance(buf, (bytes, bytearray)):
        return buf
    return memoryview(buf).cast("B").tobytes()


def _limit_arg(value: int, what: str) -> int:
    value = value.__index__()
    if value < 0:
        raise ValueError(f"{what} must be >= 0")
    return value


def _walk_args(buf: Any, pos: int, most: int, most_name: str) -> tuple[bytes | bytearray, int, int]:
    """scan() and fins(): the buffer's bytes, the start and the limit, checked alike."""
    pos, most = pos.__index__(), most.__index__()
    if pos < 0:
        raise ValueError("pos must be >= 0")
    if most < 1:
        raise ValueError(f"{most_name} must be >= 1")
    data = _bytes(buf)
    if pos > len(data):
        raise ValueError("pos is past the end of the buffer")
    return data, pos, most


class PyParser:
    """Framing of NSQ V2 commands in a connection's read buffer."""

    def __init__(self, max_msg_size: int, max_body_size: int, max_line: int = MAX_LINE) -> None:
        self._max_msg = _limit_arg(max_msg_size, "max_msg_size")
        self._max_body = _limit_arg(max_body_size, "max_body_size")
        max_line = max_line.__index__()
        if max_line < 1:
            raise ValueError("max_line must be >= 1")
        self._max_line = max_line

    @property
    def max_msg_size(self) -> int:
        return self._max_msg

    @property
    def max_body_size(self) -> int:
        return self._max_body

    @property
    def max_line(self) -> int:
        return self._max_line

    def fins(self, buf: Buffer, pos: int = 0, max_ids: int = 512) -> tuple[bytes, int]:
        """The IDs of the plain FIN lines (native/parser.h) from pos, at most max_ids:
        ``(ids, end)``, the 16-byte IDs end to end and where the first other line starts.
        scan() would return the same lines as ``(b"FIN", ID)`` commands."""
        data, pos, max_ids = _walk_args(buf, pos, max_ids, "max_ids")
        n = len(data)
        ids: list[bytes] = []
        while len(ids) < max_ids and n - pos >= 21 and data.startswith(b"FIN ", pos):
            ident = bytes(data[pos + 4:pos + 20])
            if b" " in ident or b"\n" in ident:
                break
            after = data[pos + 20]
            if after == 10 and ident[15] != 13:
                size = 21
            elif after == 13 and n - pos >= 22 and data[pos + 21] == 10:
                size = 22
            else:
                break
            if size > self._max_line:
                break
            ids.append(ident)
            pos += size
        return b"".join(ids), pos

    def scan(self, buf: Buffer, pos: int = 0, max_commands: int = 1024
             ) -> tuple[list[Command], int, int, ClientErrorText | None]:
        """Every complete command in buf from pos (see the module docstring)."""
        data, pos, max_commands = _walk_args(buf, pos, max_commands, "max_commands")
        n = len(data)
        max_line, max_msg, max_body = self._max_line, self._max_msg, self._max_body
        commands: list[Command] = []
        append = commands.append
        while True:
            if len(commands) >= max_commands:
                return commands, pos, SCAN_MORE, None
            nl = data.find(b"\n", pos, pos + max_line)
            if nl < 0:
                status = SCAN_LINE_TOO_LONG if n - pos >= max_line else SCAN_NEED_MORE
                return commands, pos, status, None
            end = nl - 1 if nl > pos and data[nl - 1] == 13 else nl  # one trailing \r
            params = tuple(bytes(data[pos:end]).split(b" "))
            token = _TOKENS.get(params[0])
            if token is not None:
                params = (token, *params[1:])
            check = _BODY_LIMITS.get(params[0])
            start = nl + 1
            if check is None:
                append((params, NO_BODY, 0, start))
                pos = start
                continue
            if n - start < 4:
                append((params, BODY_PENDING, -1, pos))
                return commands, pos, SCAN_BODY_PENDING, None
            (size,) = _I32.unpack_from(data, start)
            error = check(params[0].decode(), size, max_msg, max_body)
            if error is not None:
                append((params, BODY_INVALID, size, pos))
                return commands, pos, SCAN_BAD_BODY, error
            if n - start - 4 < size:
                append((params, BODY_PENDING, size, pos))
                return commands, pos, SCAN_BODY_PENDING, None
            pos = start + 4 + size
            append((params, start + 4, size, pos))


def _mpub_max_messages(max_body_size: int) -> int:
    """Go's (max_body_size - 4) / 5, truncating toward zero."""
    q = abs(max_body_size - 4) // 5
    return q if max_body_size >= 4 else -q


def _mpub_walk(buf: Buffer, start: int, length: int, max_msg_size: int, max_body_size: int
               ) -> tuple[bytes | bytearray, list[tuple[int, int]] | None, ClientErrorText | None]:
    """Validate the MPUB body buf[start:start+length]: (data, [(offset, size)], None) or the error."""
    start, length = start.__index__(), length.__index__()
    if start < 0:
        raise ValueError("start must be >= 0")
    if length < 0:
        raise ValueError("length must be >= 0")
    max_msg = _limit_arg(max_msg_size, "max_msg_size")
    max_body = _limit_arg(max_body_size, "max_body_size")
    data = _bytes(buf)
    if start + length > len(data):
        raise ValueError("start + length is past the end of the buffer")
    end = start + length
    if length < 4:
        return data, None, ("E_BAD_BODY", "MPUB failed to read message count")
    (count,) = _I32.unpack_from(data, start)
    if count <= 0 or count > _mpub_max_messages(max_body):
        return data, None, ("E_BAD_BODY", f"MPUB invalid message count {count}")
    spans = []
    pos = start + 4
    for i in range(count):
        if end - pos < 4:
            return data, None, ("E_BAD_MESSAGE", f"MPUB failed to read message({i}) body size")
        (size,) = _I32.unpack_from(data, pos)
        if size <= 0:
            return data, None, ("E_BAD_MESSAGE", f"MPUB invalid message({i}) body size {size}")
        if size > max_msg:
            return data, None, ("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg}")
        pos += 4
        if end - pos < size:
            return data, None, ("E_BAD_MESSAGE", "MPUB failed to read message body")
        spans.append((pos, size))
        pos += size
    return data, spans, None


def mpub_spans(buf: Buffer, start: int, length: int, max_msg_size: int, max_body_size: int, /
               ) -> tuple[bytes | None, ClientErrorText | None]:
    """The messages of an MPUB body as packed little-endian u32 (offset in buf, size) pairs:
    (spans, None), or (None, (code, text)) at the first error."""
    data, spans, error = _mpub_walk(buf, start, length, max_msg_size, max_body_size)
    if spans is None:
        return None, error
    if len(data) > 0xFFFFFFFF:
        raise ValueError("mpub_spans() needs a buffer under 4 GiB")
    return b"".join(_SPAN.pack(off, size) for off, size in spans), None
