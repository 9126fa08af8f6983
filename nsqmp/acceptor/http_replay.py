"""HTTP replay (issue 23): /channel/rewind, and /channel/create with `from`.

    POST /channel/rewind?topic=T&channel=C&to=<point>
    POST /channel/create?topic=T&channel=C&from=<point>   (without from: nsqd's create)

    POST /topic/retention?topic=T&time=<duration>&bytes=<bytesize>   (router/retention.py)

A point is `earliest`, a message id (16 hex digits, as a consumer sees it) or an
RFC 3339 time (`2026-11-24T21:00:00Z`, `...T21:00:00.123456789+01:00`). The request
goes to the router owning the topic (router/rewind.py), which answers with JSON:
{"messages": how many records the channel gets again, "earliest": true when the time
was before every retained message (the replay starts at the earliest), "from":
{acceptor stream: [segment seq, offset]}} (create adds "created").

Errors (nsqd's shape, {"message": CODE}): 400 MISSING_ARG_TOPIC / INVALID_ARG_TOPIC /
MISSING_ARG_CHANNEL / INVALID_ARG_CHANNEL, 400 MISSING_ARG_TO, 400 INVALID_TO (INVALID_FROM
for create), 400 EPHEMERAL_TOPIC (its messages are never in a file), 404
TOPIC_NOT_FOUND / CHANNEL_NOT_FOUND / MESSAGE_NOT_FOUND (no retained record has the
id), 405 for any method but POST.
"""
from __future__ import annotations

import re
from datetime import datetime

import orjson

from nsqmp.acceptor.http_admin import ADMIN_ROUTES, topic_arg, topic_channel_args
from nsqmp.acceptor.http_request import JSON, TEXT, HttpError, Request
from nsqmp.config.options import parse_bytesize, parse_duration

_STATUS = {"TOPIC_NOT_FOUND": 404, "CHANNEL_NOT_FOUND": 404, "MESSAGE_NOT_FOUND": 404,
           "EPHEMERAL_TOPIC": 400, "INVALID_REQUEST": 400}
_HEX_ID = re.compile(r"[0-9a-fA-F]{16}")
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)")


def parse_point(text: str) -> dict | None:
    """{"kind": "earliest" | "id" | "time", "value": id or unix ns} of a point; None if
    it is none of the three forms."""
    if text == "earliest":
        return {"kind": "earliest", "value": 0}
    if _HEX_ID.fullmatch(text):
        return {"kind": "id", "value": int(text, 16)}
    m = _RFC3339.fullmatch(text)
    if m is None:
        return None
    whole, frac, zone = m.groups()
    try:
        at = datetime.fromisoformat(whole.replace("t", "T").replace(" ", "T")
                                    + ("+00:00" if zone in "Zz" else zone))
    except ValueError:
        return None
    ns = int(at.timestamp()) * 1_000_000_000 + int((frac or "0").ljust(9, "0"))
    return {"kind": "time", "value": ns}


async def _ask(server, request: dict):
    reply = await server.ask_owner(request)
    err = reply.get("error")
    if err:
        raise HttpError(_STATUS.get(err, 500), err)
    return 200, orjson.dumps(reply), JSON


async def h_rewind(server, req: Request):
    """POST /channel/rewind."""
    topic, channel = topic_channel_args(req)
    text = req.query.get("to")
    if text is None:
        raise HttpError(400, "MISSING_ARG_TO")
    point = parse_point(text)
    if point is None:
        raise HttpError(400, "INVALID_TO")
    return await _ask(server, {"op": "channel_rewind", "topic": topic, "channel": channel, "to": point})


_create = ADMIN_ROUTES["/channel/create"][1]


async def h_create(server, req: Request):
    """POST /channel/create: nsqd's, or (with `from`) a channel starting in the past."""
    text = req.query.get("from")
    if text is None:
        return await _create(server, req)
    topic, channel = topic_channel_args(req)
    point = parse_point(text)
    if point is None:
        raise HttpError(400, "INVALID_FROM")
    return await _ask(server, {"op": "channel_create_from", "topic": topic, "channel": channel, "to": point})


async def h_retention(server, req: Request):
    """POST /topic/retention?topic=T&time=<duration>&bytes=<bytesize>: the topic's own
    retention in place of the flags' (a missing one is 0; both 0: none for this topic)."""
    topic = topic_arg(req, "INVALID_ARG_TOPIC")
    try:
        time_s = parse_duration(req.query.get("time", "0s"))
        max_bytes = parse_bytesize(req.query.get("bytes", "0"))
    except ValueError:
        raise HttpError(400, "INVALID_VALUE") from None
    if time_s < 0 or max_bytes < 0:
        raise HttpError(400, "INVALID_VALUE")
    reply = await server.ask_owner({"op": "topic_retention", "topic": topic, "time": time_s, "bytes": max_bytes})
    err = reply.get("error")
    if err:
        raise HttpError(_STATUS.get(err, 500), err)
    return 200, b"", TEXT


REPLAY_ROUTES = {
    "/topic/retention": (("POST",), h_retention),
    "/channel/rewind": (("POST",), h_rewind),
    "/channel/create": (("POST",), h_create),
}
