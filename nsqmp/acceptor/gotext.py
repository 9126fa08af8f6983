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


# nsqd's identifyDataV2, in its field order: (Go field name, JSON key, Go zero value)
_IDENTIFY_FIELDS = (
    ("ClientID", "client_id", ""), ("Hostname", "hostname", ""), ("HeartbeatInterval", "heartbeat_interval", 0),
    ("OutputBufferSize", "output_buffer_size", 0), ("OutputBufferTimeout", "output_buffer_timeout", 0),
    ("FeatureNegotiation", "feature_negotiation", False), ("TLSv1", "tls_v1", False),
    ("Deflate", "deflate", False), ("DeflateLevel", "deflate_level", 0), ("Snappy", "snappy", False),
    ("SampleRate", "sample_rate", 0), ("UserAgent", "user_agent", ""), ("MsgTimeout", "msg_timeout", 0),
)


def go_identify(data: object) -> str:
    """An IDENTIFY body as nsqd logs it, Go's %+v of its identifyDataV2:
    ``{ClientID:app Hostname:h HeartbeatInterval:30000 ... UserAgent:go-nsq/1.1.0 MsgTimeout:0}``."""
    fields = data if isinstance(data, dict) else {}
    out = []
    for name, key, zero in _IDENTIFY_FIELDS:
        value = fields.get(key, zero)
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float) and value.is_integer():
            text = str(int(value))
        else:
            text = str(value)
        out.append(f"{name}:{text}")
    return "{" + " ".join(out) + "}"
