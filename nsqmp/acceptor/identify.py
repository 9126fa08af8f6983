"""IDENTIFY: range checks of the client's JSON and the negotiated response (nsqd 1.3.0)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

VERSION = "1.3.0"


class IdentifyError(ValueError):
    """Becomes E_BAD_BODY "IDENTIFY <message>"."""


@dataclass
class ClientSettings:
    client_id: str = ""
    hostname: str = ""
    user_agent: str = ""
    feature_negotiation: bool = False
    heartbeat_interval_ms: int = 30_000
    output_buffer_size: int = 16384
    output_buffer_timeout_ms: int = 250
    msg_timeout_ms: int = 60_000
    sample_rate: int = 0
    deflate_level: int = 6
    tls: bool = False  # negotiated: asked for (tls_v1) and the server has a certificate
    snappy: bool = False  # negotiated: asked for by the client and allowed (--snappy)
    deflate: bool = False  # negotiated: asked for by the client and allowed (--deflate)


# nsqd decodes the body into a typed struct: a field of the wrong JSON type (a string or a
# fraction where an integer goes, a number where a bool goes) fails the whole decode, and
# null leaves the field at its zero value
_STR_FIELDS = ("client_id", "hostname", "user_agent", "short_id", "long_id", "topology_zone", "topology_region")
_BOOL_FIELDS = ("feature_negotiation", "tls_v1", "snappy", "deflate")
_INT_FIELDS = ("heartbeat_interval", "output_buffer_size", "output_buffer_timeout", "deflate_level",
               "sample_rate", "msg_timeout")


def _check_types(data: dict[str, Any]) -> None:
    for keys, ok in ((_STR_FIELDS, lambda v: isinstance(v, str)),
                     (_BOOL_FIELDS, lambda v: isinstance(v, bool)),
                     (_INT_FIELDS, lambda v: isinstance(v, int) and not isinstance(v, bool))):
        for key in keys:
            value = data.get(key)
            if value is not None and not ok(value):
                raise IdentifyError("failed to decode JSON body")


def _int(data: dict[str, Any], key: str, default: int = 0) -> int:
    value = data.get(key)
    return default if value is None else int(value)


def _heartbeat(data: dict[str, Any], opts: Any, settings: ClientSettings) -> None:
    """heartbeat_interval: -1 none, 0 the default 30 s, else 1 s to --max-heartbeat-interval."""
    max_hb = int(opts.max_heartbeat_interval * 1000)
    hb = _int(data, "heartbeat_interval")
    if hb == -1:
        settings.heartbeat_interval_ms = -1
    elif hb == 0:
        settings.heartbeat_interval_ms = 30_000
    elif 1000 <= hb <= max_hb:
        settings.heartbeat_interval_ms = hb
    else:
        raise IdentifyError(f"heartbeat interval ({hb}) is invalid")


def _output_buffer(data: dict[str, Any], opts: Any, settings: ClientSettings) -> None:
    """output_buffer_timeout and output_buffer_size, as nsqd's SetOutputBuffer: the timeout
    first, then the size (-1 also zeroes the timeout)."""
    obt = _int(data, "output_buffer_timeout")
    min_obt = int(opts.min_output_buffer_timeout * 1000)
    max_obt = int(opts.max_output_buffer_timeout * 1000)
    if obt == -1:
        settings.output_buffer_timeout_ms = 0
    elif obt == 0:
        settings.output_buffer_timeout_ms = int(opts.output_buffer_timeout * 1000)
    elif min_obt <= obt <= max_obt:
        settings.output_buffer_timeout_ms = obt
    else:
        raise IdentifyError(f"output buffer timeout ({obt}) is invalid")

    obs = _int(data, "output_buffer_size")
    if obs == -1:
        settings.output_buffer_size = 1
        settings.output_buffer_timeout_ms = 0
    elif obs == 0:
        pass
    elif 64 <= obs <= opts.max_output_buffer_size:
        settings.output_buffer_size = obs
    else:
        raise IdentifyError(f"output buffer size ({obs}) is invalid")


def negotiate(data: Any, opts: Any, settings: ClientSettings) -> None:
    """Apply an IDENTIFY body to settings, or raise IdentifyError with nsqd's wording."""
    if not isinstance(data, dict):
        raise IdentifyError("failed to decode JSON body")
    _check_types(data)
    if data.get("client_id") is not None:
        settings.client_id = data["client_id"]
    if data.get("hostname") is not None:
        settings.hostname = data["hostname"]
    settings.user_agent = data.get("user_agent") or ""
    settings.feature_negotiation = bool(data.get("feature_negotiation"))

    _heartbeat(data, opts, settings)
    _output_buffer(data, opts, settings)

    rate = _int(data, "sample_rate")
    if not 0 <= rate <= 99:
        raise IdentifyError(f"sample rate ({rate}) is invalid")
    settings.sample_rate = rate

    mt = _int(data, "msg_timeout")
    if mt == 0:
        settings.msg_timeout_ms = int(opts.msg_timeout * 1000)
    elif 1000 <= mt <= int(opts.max_msg_timeout * 1000):
        settings.msg_timeout_ms = mt
    else:
        raise IdentifyError(f"msg timeout ({mt}) is invalid")

    level = _int(data, "deflate_level", 6) or 6
    settings.deflate_level = max(1, min(level, opts.max_deflate_level))
    settings.tls = bool(data.get("tls_v1", False)) and bool(opts.tls_cert and opts.tls_key)
    settings.snappy = bool(data.get("snappy", False)) and bool(opts.snappy)
    settings.deflate = bool(data.get("deflate", False)) and bool(opts.deflate)


def response(opts: Any, settings: ClientSettings) -> bytes:
    """The JSON nsqd sends back when feature_negotiation is on.

    tls_v1, snappy and deflate are what was negotiated (asked for, and allowed here).
    """
    return orjson.dumps({
        "max_rdy_count": opts.max_rdy_count,
        "version": VERSION,
        "max_msg_timeout": int(opts.max_msg_timeout * 1000),
        "msg_timeout": settings.msg_timeout_ms,
        "tls_v1": settings.tls,
        "deflate": settings.deflate,
        "deflate_level": settings.deflate_level,
        "max_deflate_level": opts.max_deflate_level,
        "snappy": settings.snappy,
        "sample_rate": settings.sample_rate,
        "auth_required": bool(opts.auth_http_addresses),
        "output_buffer_size": settings.output_buffer_size,
        "output_buffer_timeout": settings.output_buffer_timeout_ms,
    })
