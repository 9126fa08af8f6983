"""JSON the way nsqlookupd's Go encoding/json writes and reads it.

Writing: Go escapes ``<``, ``>`` and ``&`` (and U+2028/U+2029) inside strings and sorts
the keys of maps (structs keep their field order). Reading an IDENTIFY body into PeerInfo:
keys match field names exactly or else case-insensitively, unknown keys are ignored,
``null`` leaves a field alone, a wrong type (a float or string for a port, a number for a
name) is an error, and so is anything but an object (or ``null``) at the top.
"""
from __future__ import annotations

import json
from typing import Any

import orjson

_ESCAPES = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"),
            ("\u2028".encode(), b"\\u2028"), ("\u2029".encode(), b"\\u2029"))


def dumps(value: Any, sort_keys: bool = False) -> bytes:
    """Serialize like Go's json.Marshal (sort_keys for Go maps)."""
    out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    # outside strings JSON has none of these bytes, so replacing them everywhere is safe
    for raw, escaped in _ESCAPES:
        if raw in out:
            out = out.replace(raw, escaped)
    return out


STRING_FIELDS = ("remote_address", "hostname", "broadcast_address", "version",
                 "topology_zone", "topology_region")
INT_FIELDS = ("tcp_port", "http_port")
_FIELDS = {name: name for name in STRING_FIELDS + INT_FIELDS}
_FOLDED = {name.casefold(): name for name in _FIELDS}
_INT64 = (-(1 << 63), (1 << 63) - 1)


class _Object(list):
    """An object's (key, value) pairs in order, told apart from a JSON array."""


def _no_constants(name: str) -> Any:
    raise ValueError(f"invalid JSON literal {name}")  # Go has no NaN or Infinity


def _clean(text: str) -> str:
    """Go decodes a lone surrogate escape (\\ud800) as U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def decode_peer_fields(body: bytes) -> dict[str, Any]:
    """The PeerInfo fields an IDENTIFY body sets; raises ValueError like json.Unmarshal
    would return an error."""
    try:
        value = json.loads(body.decode("utf-8", "replace"), object_pairs_hook=_Object,
                           parse_constant=_no_constants)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if value is None:
        return {}
    if not isinstance(value, _Object):
        raise ValueError("cannot unmarshal a non-object into PeerInfo")
    fields: dict[str, Any] = {}
    for key, item in value:
        name = _FIELDS.get(key) or _FOLDED.get(key.casefold())
        if name is None or item is None:
            continue
        if name in INT_FIELDS:
            if type(item) is not int or not _INT64[0] <= item <= _INT64[1]:
                raise ValueError(f"cannot unmarshal {item!r} into the int field {name}")
        elif not isinstance(item, str):
            raise ValueError(f"cannot unmarshal {item!r} into the string field {name}")
        else:
            item = _clean(item)
        fields[name] = item
    return fields
