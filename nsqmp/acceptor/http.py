"""nsqd's HTTP API on an acceptor: the connection, and the routes to the endpoint families
(http_publish: /pub, /mpub; http_admin: /topic/*, /channel/*; http_stats: /stats;
http_metrics: /metrics; http_info: /ping, /info, /config/*).

httptools parses; each route is a coroutine handler (server, request) -> (status, body,
content type). Errors are nsqd's: a JSON body {"message": "<CODE>"} with nsqd's
status code, and every V1 response carries X-NSQ-Content-Type.
"""
from __future__ import annotations

import asyncio
import logging

import httptools
import orjson

from nsqmp.acceptor.http_admin import ADMIN_ROUTES
from nsqmp.acceptor.http_info import h_config, h_info, h_ping
from nsqmp.acceptor.http_log import LOG_ROUTES
from nsqmp.acceptor.http_metrics import h_metrics
from nsqmp.acceptor.http_peek import PEEK_ROUTES
from nsqmp.acceptor.http_publish import h_mpub, h_pub
from nsqmp.acceptor.http_replay import REPLAY_ROUTES
from nsqmp.acceptor.http_request import JSON, TEXT, HttpError, Request
from nsqmp.acceptor.http_stats import h_stats
from nsqmp.acceptor.ttl_dlq import ROUTES as TTL_DLQ_ROUTES

log = logging.getLogger("nsqmp.acceptor")

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            413: "Request Entity Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}
_GO_BAD_REQUEST = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                   b"Connection: close\r\n\r\n400 Bad Request")


class HttpConnection(asyncio.Protocol):
    """One HTTP/1.1 client: requests answered one at a time, in order (pipelining kept)."""

    def __init__(self, server, secure: bool = False) -> None:
        self.server = server
        self.secure = secure
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._queue: list[Request] = []
        self._busy = False

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._write_raw(400, b"", TEXT, False)
        except httptools.HttpParserError:
            # what Go's net/http writes for a request it cannot parse (nsqd adds nothing)
            if self.transport is not None:
                self.transport.write(_GO_BAD_REQUEST)
                self.transport.close()
                self.transport = None

    def connection_lost(self, exc) -> None:
        self.transport = None

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body, self._body_size = b"", {}, [], 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        # bound what we hold: nothing nsqd accepts is bigger than max-body-size
        self._body_size += len(body)
        if self._body_size <= self.server.opts.max_body_size + 1:
            self._body.append(body)

    def on_message_complete(self) -> None:
        req = Request(self.parser.get_method().decode(), self._url, self._headers,
                      b"".join(self._body), self.parser.should_keep_alive())
        if self._body_size > len(req.body):
            req.body = req.body + b"\0"  # marks "too big" to the handlers without holding it
        self._queue.append(req)
        if not self._busy:
            self._busy = True
            self.server.loop.create_task(self._serve())

    async def _serve(self) -> None:
        while self._queue and self.transport is not None:
            req = self._queue.pop(0)
            try:
                status, body, ctype = await self._route(req)
            except HttpError as exc:
                status, body, ctype = exc.status, orjson.dumps({"message": exc.message}), JSON
            except Exception:  # a bug must not take the acceptor down
                log.exception("HTTP %s %s failed", req.method, req.path)
                status, body, ctype = 500, orjson.dumps({"message": "INTERNAL_ERROR"}), JSON
            # nsqd serves /ping through its PlainText decorator: no X-NSQ-Content-Type there
            v1 = not (req.path == "/ping" and req.method == "GET" and status != 403)
            self._write_raw(status, body, ctype, req.keep_alive, v1, head_only=req.method == "HEAD")
        self._busy = False

    def _write_raw(self, status: int, body: bytes, ctype: bytes, keep_alive: bool, v1: bool = True,
                   head_only: bool = False) -> None:
        """One response; a HEAD request gets the headers (Content-Length included) and no body."""
        if self.transport is None:
            return
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n".encode()
            # Go's net/http sniffs a type only from a body: an empty one goes without
            + (b"Content-Type: " + ctype + b"\r\n" if body or ctype == JSON else b"")
            + (b"X-NSQ-Content-Type: nsq; version=1.0\r\n" if v1 else b"")
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n"
            + (b"" if keep_alive else b"Connection: close\r\n")
            + b"\r\n"
        )
        self.transport.write(head if head_only else head + body)
        if not keep_alive:
            self.transport.close()
            self.transport = None

    async def _route(self, req: Request) -> tuple[int, bytes, bytes]:
        if self.server.tls_required is True and not self.secure:
            # nsqd with --tls-required=true refuses plain HTTP (tcp-https leaves it open)
            return 403, orjson.dumps({"message": "TLS_REQUIRED", "https_port": self.server.https_port}), JSON
        if req.path.startswith("/config/"):
            return await h_config(self.server, req)
        route = ROUTES.get(req.path)
        if route is None:
            raise HttpError(404, "NOT_FOUND")
        methods, handler = route
        if req.method not in methods:
            raise HttpError(405, "METHOD_NOT_ALLOWED")
        return await handler(self.server, req)




ROUTES = {
    "/ping": (("GET",), h_ping),
    "/info": (("GET",), h_info),
    "/pub": (("POST",), h_pub),  # nsqd registers POST only: PUT is 405
    "/mpub": (("POST",), h_mpub),
    "/stats": (("GET",), h_stats),
    "/metrics": (("GET",), h_metrics),
    **ADMIN_ROUTES,
    **PEEK_ROUTES,  # /channel/peek, /topic/peek (nsqmp's, issue 23)
    **LOG_ROUTES,  # nsqmp's own: a topic read as a log
    **TTL_DLQ_ROUTES,  # nsqmp's: POST /topic/ttl, /channel/dead-letter
    **REPLAY_ROUTES,  # /channel/rewind; /channel/create takes `from` (issue 23)
}
