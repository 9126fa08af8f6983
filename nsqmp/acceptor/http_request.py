"""What the HTTP endpoint families share: the request as parsed, nsqd's error reply, the
content types, and the checks of the query every family makes."""
from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from nsqmp.protocol.names import is_valid_name

JSON = b"application/json; charset=utf-8"
TEXT = b"text/plain; charset=utf-8"
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


class HttpError(Exception):
    """nsqd's error reply: its status and a JSON body {"message": message}."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Request:
    """One HTTP request, whole (its body bounded by --max-body-size)."""
    __slots__ = ("method", "path", "query", "bad_query", "body", "headers", "keep_alive")

    def __init__(self, method: str, url: bytes, headers: dict[bytes, bytes], body: bytes, keep_alive: bool):
        parts = urlsplit(url.decode("latin-1"))
        self.method = method
        self.path = parts.path
        self.query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        # what Go's url.ParseQuery refuses: a ';' separator or a '%' not followed by two hex digits
        self.bad_query = ";" in parts.query or _BAD_ESCAPE.search(parts.query) is not None
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive


def check_params(req: Request) -> None:
    """nsqd's NewReqParams / url.ParseQuery failing: 400 INVALID_REQUEST."""
    if req.bad_query:
        raise HttpError(400, "INVALID_REQUEST")


def topic_param(req: Request) -> bytes:
    """The topic of /pub and /mpub, checked as nsqd's getTopicFromQuery."""
    check_params(req)
    topic = req.query.get("topic")
    if topic is None:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    raw = topic.encode()
    if not is_valid_name(raw):
        raise HttpError(400, "INVALID_TOPIC")
    return raw
