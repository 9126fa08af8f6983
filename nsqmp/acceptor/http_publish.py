"""HTTP publishing: /pub and /mpub (nsqd's doPUB, doMPUB)."""
from __future__ import annotations

import logging
import re

from nsqmp.acceptor.http_admin import admin
from nsqmp.acceptor.http_request import TEXT, HttpError, Request, topic_param
from nsqmp.acceptor.publisher import TopicFull
from nsqmp.diskqueue.encoder import SPAN, spans_of
from nsqmp.protocol.parser import mpub_spans

log = logging.getLogger("nsqmp.acceptor")

_GO_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)


def _publish(server, topic: bytes, src: bytes, spans: bytes, defer_ms: int = 0) -> None:
    """Publish the bodies at these spans of src (see Publisher.publish_spans)."""
    try:
        server.publisher.publish_spans(topic, src, spans, defer_ms)
    except TopicFull:
        raise HttpError(503, "TOPIC_FULL") from None
    except OSError as exc:
        log.error("HTTP publish to %s failed: %s", topic.decode(), exc)
        server.health_error(exc)
        raise HttpError(500, "INTERNAL_ERROR") from None
    server.health_ok()


async def h_pub(server, req: Request):
    """POST /pub?topic=...[&defer=ms]: the body is one message."""
    max_size = server.opts.max_msg_size
    length = req.headers.get(b"content-length")
    if length is not None and length.isdigit() and int(length) > max_size:
        raise HttpError(413, "MSG_TOO_BIG")
    if len(req.body) > max_size:
        raise HttpError(413, "MSG_TOO_BIG")
    if not req.body:
        raise HttpError(400, "MSG_EMPTY")
    topic = topic_param(req)
    defer_ms = 0
    if "defer" in req.query:
        raw = req.query["defer"]
        if not _GO_INT.fullmatch(raw):  # Go's ParseInt: no spaces, no underscores
            raise HttpError(400, "INVALID_DEFER")
        defer_ms = int(raw)
        if not 0 <= defer_ms <= int(server.opts.max_req_timeout * 1000):
            raise HttpError(400, "INVALID_DEFER")
    _publish(server, topic, req.body, SPAN.pack(0, len(req.body)), defer_ms)
    return 200, b"OK", TEXT


async def h_mpub(server, req: Request):
    """POST /mpub?topic=...[&binary=true]: messages one a line, or MPUB's binary body."""
    opts = server.opts
    length = req.headers.get(b"content-length")
    if (length is not None and length.isdigit() and int(length) > opts.max_body_size) \
            or len(req.body) > opts.max_body_size:
        raise HttpError(413, "BODY_TOO_BIG")
    topic = topic_param(req)
    binary = req.query.get("binary", "false") not in ("false", "0")
    if binary:
        spans, bad = mpub_spans(req.body, 0, len(req.body), opts.max_msg_size, opts.max_body_size)
        if spans is None:
            raise HttpError(413, bad[0][2:])  # E_BAD_BODY -> BAD_BODY, as nsqd's /mpub
        src = req.body
    else:
        bodies = [line for line in req.body.split(b"\n") if line]
        for line in bodies:
            if len(line) > opts.max_msg_size:
                raise HttpError(413, "MSG_TOO_BIG")
        src, spans = spans_of(bodies)
    if spans:
        _publish(server, topic, src, spans)
    else:  # an empty text body publishes nothing and is OK; nsqd has made the topic by then
        await admin(server, {"op": "topic_create", "topic": topic.decode()})
    return 200, b"OK", TEXT
