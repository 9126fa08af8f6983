"""Bytes from the wire in error texts, printed the way nsqd's Go format verbs print them."""
from __future__ import annotations


def go_s(raw: bytes) -> str:
    """Bytes from the wire as Go's %s prints them: as they are (FatalClientError.wire gives them back)."""
    return raw.decode("utf-8", "surrogateescape")


def go_q(name: bytes) -> str:
    """Go's %q (strconv.Quote) of a name from the wire."""
    out = ['"']
    for ch in name.decode("utf-8", "surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
