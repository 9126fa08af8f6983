"""GET /channel/peek and /topic/peek: the next messages a channel would deliver (or a
topic holds), answered by the router that owns the topic (router/peek.py), unchanged.

Query: topic, channel (/channel/peek), n (1..MAX_N, default 10), state (queued,
deferred, in_flight or all, default all), max_body (bytes of each body shown, 0..
MAX_BODY, default 4096), format (json, default, or raw). Bad input is a 400 in nsqd's
style (MISSING_ARG_TOPIC, INVALID_TOPIC, INVALID_N, ...); an unknown topic or channel
a 404; a topic whose messages already flow to its channels (has channels, not paused)
400 TOPIC_HAS_CHANNELS.

format=json: {"topic", "channel", "depth", "deferred_count", "in_flight_count",
"paused", "messages": [{"id", "timestamp", "attempts", "state", "due_ns" |
"deadline_ns" + "client", "body_size", "truncated", "body" (base64)}]}.

format=raw (application/octet-stream): the messages back to back, each one record::

    +--------+-------+-------+----------+-----------+--------+---------+-----------+---------+
    | size   | state | flags | attempts | timestamp | id     | when_ns | body_size | body    |
    | u32 BE | u8    | u8    | u16 BE   | i64 BE    | 16 B   | i64 BE  | u32 BE    | ...     |
    +--------+-------+-------+----------+-----------+--------+---------+-----------+---------+
    size: the bytes after the size word (PEEK_RECORD.size - 4 + len(body))
    state: 0 queued, 1 deferred, 2 in_flight; flags bit 0: the body is truncated
    attempts: deliveries so far (NSQ's u16, saturated); id: the 16 ASCII hex bytes
    when_ns: due time (deferred) or deadline (in flight), wall clock; else 0
    body_size: the whole body's size; body: its first min(body_size, max_body) bytes
"""
from __future__ import annotations

import base64
import struct

import orjson

from nsqmp.acceptor.http_admin import topic_arg
from nsqmp.acceptor.http_request import JSON, HttpError, Request
from nsqmp.protocol.names import is_valid_name

DEFAULT_N = 10
MAX_N = 1000  # more is 400 INVALID_N: an answer stays a few MB at most
DEFAULT_MAX_BODY = 4096
MAX_BODY = 1 << 20  # nsqd's default --max-msg-size: a whole body
STATES = ("queued", "deferred", "in_flight", "all")
RAW = b"application/octet-stream"

PEEK_RECORD = struct.Struct(">IBBHq16sqI")  # the raw record's head, drawn above
STATE_CODES = {"queued": 0, "deferred": 1, "in_flight": 2}
TRUNCATED = 0x01

_STATUS = {"TOPIC_NOT_FOUND": 404, "CHANNEL_NOT_FOUND": 404, "TOPIC_HAS_CHANNELS": 400,
           "INVALID_REQUEST": 400}


def _int_arg(req: Request, name: str, default: int, low: int, high: int, code: str) -> int:
    """An integer query argument in [low, high]; else 400 code."""
    text = req.query.get(name)
    if text is None:
        return default
    try:
        value = int(text, 10)
    except ValueError:
        raise HttpError(400, code) from None
    if not low <= value <= high:
        raise HttpError(400, code)
    return value


def _request(req: Request, op: str, with_channel: bool) -> tuple[dict, str]:
    """The CONTROL request of a peek and the answer's format, from the query (checked)."""
    request = {"op": op, "topic": topic_arg(req)}
    if with_channel:
        channel = req.query.get("channel")
        if channel is None:
            raise HttpError(400, "MISSING_ARG_CHANNEL")
        if not is_valid_name(channel.encode()):
            raise HttpError(400, "INVALID_CHANNEL")
        request["channel"] = channel
    request["n"] = _int_arg(req, "n", DEFAULT_N, 1, MAX_N, "INVALID_N")
    request["max_body"] = _int_arg(req, "max_body", DEFAULT_MAX_BODY, 0, MAX_BODY, "INVALID_MAX_BODY")
    state = req.query.get("state", "all")
    if state not in STATES:
        raise HttpError(400, "INVALID_STATE")
    request["state"] = state
    fmt = req.query.get("format", "json")
    if fmt not in ("json", "raw"):
        raise HttpError(400, "INVALID_FORMAT")
    return request, fmt


def pack_raw(messages: list[dict]) -> bytes:
    """The format=raw body of a peek's messages (module doc)."""
    parts = []
    for msg in messages:
        body = base64.b64decode(msg["body"])
        parts.append(PEEK_RECORD.pack(
            PEEK_RECORD.size - 4 + len(body), STATE_CODES[msg["state"]], TRUNCATED if msg["truncated"] else 0,
            min(msg["attempts"], 0xFFFF), msg["timestamp"], msg["id"].encode("ascii"),
            msg.get("due_ns", msg.get("deadline_ns", 0)), msg["body_size"]))
        parts.append(body)
    return b"".join(parts)


def parse_raw(data: bytes) -> list[dict]:
    """The messages of a format=raw body (the inverse of pack_raw, bodies as bytes)."""
    names = {code: name for name, code in STATE_CODES.items()}
    out, pos = [], 0
    while pos < len(data):
        size, state, flags, attempts, ts, msg_id, when, body_size = PEEK_RECORD.unpack_from(data, pos)
        start, pos = pos + PEEK_RECORD.size, pos + 4 + size
        out.append({"id": msg_id.decode("ascii"), "timestamp": ts, "attempts": attempts,
                    "state": names[state], "when_ns": when, "body_size": body_size,
                    "truncated": bool(flags & TRUNCATED), "body": data[start:pos]})
    return out


async def _peek(server, req: Request, op: str, with_channel: bool):
    request, fmt = _request(req, op, with_channel)
    reply = await server.ask_owner(request)
    err = reply.get("error")
    if err:
        raise HttpError(_STATUS.get(err, 500), err)
    if fmt == "raw":
        return 200, pack_raw(reply["messages"]), RAW
    return 200, orjson.dumps(reply), JSON


async def h_channel_peek(server, req: Request):
    """GET /channel/peek?topic=T&channel=C[&n=&state=&max_body=&format=]."""
    return await _peek(server, req, "channel_peek", True)


async def h_topic_peek(server, req: Request):
    """GET /topic/peek?topic=T[&n=&state=&max_body=&format=]."""
    return await _peek(server, req, "topic_peek", False)


PEEK_ROUTES = {
    "/channel/peek": (("GET",), h_channel_peek),
    "/topic/peek": (("GET",), h_topic_peek),
}
