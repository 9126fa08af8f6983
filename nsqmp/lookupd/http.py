"""nsqlookupd's HTTP API: discovery for consumers, administration for nsqadmin and people.

httptools parses; every handler is plain synchronous code over the in-memory registry, so
a request is answered inside ``data_received`` and pipelined requests are answered in order.

The conventions are nsqlookupd's (its httprouter and http_api package):

* routes are method-strict: GET /ping /info /debug /lookup /topics /channels /nodes and
  POST /topic/create /topic/delete /channel/create /channel/delete /topic/tombstone;
* an unknown path is 404 ``{"message":"NOT_FOUND"}``; a known path with another method is
  405 ``{"message":"METHOD_NOT_ALLOWED"}`` with an Allow header; OPTIONS lists the methods;
  a path that differs from a route by a trailing slash, case or ``//``/``..`` is redirected
  (301 for GET, 307 otherwise);
* V1 responses carry ``X-NSQ-Content-Type: nsq; version=1.0``; errors are JSON
  ``{"message":"<CODE>"}``; a POST succeeds with 200 and an empty body; /ping is plain
  text ``OK`` without the V1 header;
* parameters are URL query parameters parsed like Go's url.ParseQuery (a malformed query
  is 400 INVALID_REQUEST); bodies are read and ignored.

Bounds: the request line plus headers may total MAX_HEADER_BYTES (Go's default), beyond
which the answer is 431 and the connection closes; bodies are discarded as they arrive.
"""
from __future__ import annotations

import asyncio
import email.utils
import logging
import re
import time
from collections.abc import Callable
from urllib.parse import unquote_to_bytes

import httptools

from nsqmp.lookupd import VERSION
from nsqmp.lookupd.gojson import dumps
from nsqmp.lookupd.linger import linger_close
from nsqmp.lookupd.registry import (
    CHANNEL, CLIENT, TOPIC, Registration, filter_by_active,
)
from nsqmp.protocol.names import is_valid_name

log = logging.getLogger("nsqmp.lookupd")

MAX_HEADER_BYTES = (1 << 20) + 4096  # Go's http.DefaultMaxHeaderBytes plus its slack
_REASONS = {200: "OK", 301: "Moved Permanently", 307: "Temporary Redirect", 400: "Bad Request",
            404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large",
            500: "Internal Server Error"}
_JSON = "application/json; charset=utf-8"
_TEXT = "text/plain; charset=utf-8"
_HTML = "text/html; charset=utf-8"
_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")


class HttpError(Exception):
    """A V1 error response: ``{"message": "<CODE>"}`` with this status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message


class Response:
    __slots__ = ("status", "body", "ctype", "v1", "headers")

    def __init__(self, status: int, body: bytes = b"", ctype: str | None = None, v1: bool = True,
                 headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.status = status
        self.body = body
        self.ctype = ctype
        self.v1 = v1
        self.headers = headers


def error_response(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, dumps({"message": message}), _JSON, True, headers)


class _HeadersTooLarge(Exception):
    pass


# -- parameters -------------------------------------------------------------------------------
def _unescape(raw: bytes, plus_is_space: bool) -> str:
    if _BAD_ESCAPE.search(raw):
        raise ValueError(f"invalid URL escape in {raw[:40]!r}")
    if plus_is_space:
        raw = raw.replace(b"+", b" ")
    # Go strings are bytes: keep any invalid UTF-8 as it came (name checks then reject it)
    return unquote_to_bytes(raw).decode("utf-8", "surrogateescape")


def parse_query(raw: bytes) -> dict[str, list[str]]:
    """Go's url.ParseQuery: ``&``-separated, ``+`` is a space, a ``;`` or a bad escape is an
    error (raised after the whole query is read, as Go returns the first error)."""
    params: dict[str, list[str]] = {}
    first_error: ValueError | None = None
    for part in raw.split(b"&"):
        if not part:
            continue
        if b";" in part:
            first_error = first_error or ValueError("invalid semicolon separator in query")
            continue
        key, _, value = part.partition(b"=")
        try:
            params.setdefault(_unescape(key, True), []).append(_unescape(value, True))
        except ValueError as exc:
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    return params


def _get(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[0] if values else None


def _valid(name: str) -> bool:
    return is_valid_name(name.encode("utf-8", "surrogateescape"))


def _topic_channel_args(params: dict[str, list[str]]) -> tuple[str, str]:
    """http_api.GetTopicChannelArgs: both present and valid."""
    topic = _get(params, "topic")
    if topic is None:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    if not _valid(topic):
        raise HttpError(400, "INVALID_ARG_TOPIC")
    channel = _get(params, "channel")
    if channel is None:
        raise HttpError(400, "MISSING_ARG_CHANNEL")
    if not _valid(channel):
        raise HttpError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def _topic_arg(params: dict[str, list[str]]) -> str:
    topic = _get(params, "topic")
    if topic is None:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    return topic


# -- handlers: (server, params) -> JSON body, None (200, empty) or a Response ----------------
Handler = Callable[..., "bytes | Response | None"]


def h_ping(server, params) -> Response:
    return Response(200, b"OK", _TEXT, v1=False)


def h_info(server, params) -> bytes:
    return dumps({"version": VERSION})


def h_topics(server, params) -> bytes:
    return dumps({"topics": [r.key for r in server.db.find_registrations(TOPIC, "*", "")]})


def h_channels(server, params) -> bytes:
    topic = _topic_arg(params)
    return dumps({"channels": [r.subkey for r in server.db.find_registrations(CHANNEL, topic, "*")]})


def h_lookup(server, params) -> bytes:
    """The topic's channels and its active, untombstoned producers."""
    topic = _topic_arg(params)
    db = server.db
    if not db.find_registrations(TOPIC, topic, ""):
        raise HttpError(404, "TOPIC_NOT_FOUND")
    channels = [r.subkey for r in db.find_registrations(CHANNEL, topic, "*")]
    producers = filter_by_active(db.find_producers(TOPIC, topic, ""), server.inactive_ns, server.tombstone_ns)
    # each peer's JSON is serialized once, at IDENTIFY; the hot path only joins bytes
    return (b'{"channels":' + dumps(channels) + b',"producers":['
            + b",".join(p.peer.json for p in producers) + b"]}")


def h_nodes(server, params) -> bytes:
    """Every active broker with its topics and, per topic, whether it is tombstoned."""
    db = server.db
    now = time.time_ns()
    nodes = []
    # tombstones do not hide a node here, only inactivity does
    for client in filter_by_active(db.find_producers(CLIENT, "", ""), server.inactive_ns, 0, now):
        peer = client.peer
        topics = [r.key for r in db.lookup_registrations(peer.id) if r.category == TOPIC and r.subkey == ""]
        tombstones = []
        for topic in topics:
            producer = db.producer(Registration(TOPIC, topic, ""), peer.id)
            tombstones.append(producer is not None and producer.is_tombstoned(server.tombstone_ns, now))
        node = peer.as_dict()
        node["tombstones"] = tombstones
        node["topics"] = topics
        nodes.append(node)
    return dumps({"producers": nodes})


def h_debug(server, params) -> bytes:
    """The whole DB: ``"category:key:subkey"`` -> its producers (Go map: sorted keys)."""
    data: dict[str, list[dict]] = {}
    for k, producers in server.db.items():
        for p in producers:
            peer = p.peer
            data.setdefault(f"{k.category}:{k.key}:{k.subkey}", []).append({
                "id": peer.id,
                "hostname": peer.hostname,
                "broadcast_address": peer.broadcast_address,
                "tcp_port": peer.tcp_port,
                "http_port": peer.http_port,
                "version": peer.version,
                "topology_zone": peer.topology_zone,
                "topology_region": peer.topology_region,
                "last_update": peer.last_update,
                "tombstoned": p.tombstoned,
                "tombstoned_at": p.tombstoned_at,
            })
    return dumps(data, sort_keys=True)


def h_metrics(server, params, accept: str = "") -> Response:
    """GET /metrics (nsqmp's): the registry's figures in Prometheus' text format, or
    OpenMetrics when Accept asks for it (nsqmp.metrics.lookupd)."""
    # imported on the first scrape: prometheus_client costs the start-up of a lookupd never scraped
    from nsqmp.metrics.exposition import render
    from nsqmp.metrics.lookupd import LookupdCollector, LookupdFigures

    db = server.db
    now = time.time_ns()
    per_topic = {r.key: len(filter_by_active(db.find_producers(TOPIC, r.key, ""), server.inactive_ns,
                                             server.tombstone_ns, now))
                 for r in db.find_registrations(TOPIC, "*", "")}
    tombstoned = sum(p.is_tombstoned(server.tombstone_ns, now) for r in db.find_registrations(TOPIC, "*", "")
                     for p in db.find_producers(TOPIC, r.key, ""))
    figures = LookupdFigures(VERSION, len(filter_by_active(db.find_producers(CLIENT, "", ""), server.inactive_ns,
                                                             0, now)),
                             tombstoned, len(db.find_registrations(CHANNEL, "*", "*")), per_topic)
    body, ctype = render(LookupdCollector(figures), accept)
    return Response(200, body, ctype, v1=False)


def h_topic_create(server, params) -> None:
    topic = _topic_arg(params)
    if not _valid(topic):
        raise HttpError(400, "INVALID_ARG_TOPIC")
    log.info("DB: adding topic(%s)", topic)
    server.db.add_registration(Registration(TOPIC, topic, ""))


def h_topic_delete(server, params) -> None:
    """Forget the topic and all its channels (here only; brokers are not told)."""
    topic = _topic_arg(params)
    db = server.db
    for r in db.find_registrations(CHANNEL, topic, "*"):
        log.info("DB: removing channel(%s) from topic(%s)", r.subkey, topic)
        db.remove_registration(r)
    for r in db.find_registrations(TOPIC, topic, ""):
        log.info("DB: removing topic(%s)", topic)
        db.remove_registration(r)


def h_topic_tombstone(server, params) -> None:
    """Hide node (``<broadcast_address>:<http_port>``) from /lookup of the topic for
    --tombstone-lifetime."""
    topic = _topic_arg(params)
    node = _get(params, "node")
    if node is None:
        raise HttpError(400, "MISSING_ARG_NODE")
    log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
    for p in server.db.find_producers(TOPIC, topic, ""):
        if f"{p.peer.broadcast_address}:{p.peer.http_port}" == node:
            p.tombstone()


def h_channel_create(server, params) -> None:
    topic, channel = _topic_channel_args(params)
    log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
    server.db.add_registration(Registration(CHANNEL, topic, channel))
    log.info("DB: adding topic(%s)", topic)
    server.db.add_registration(Registration(TOPIC, topic, ""))


def h_channel_delete(server, params) -> None:
    topic, channel = _topic_channel_args(params)
    db = server.db
    registrations = db.find_registrations(CHANNEL, topic, channel)
    if not registrations:
        raise HttpError(404, "CHANNEL_NOT_FOUND")
    log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
    for r in registrations:
        db.remove_registration(r)


# method -> path -> handler, as nsqlookupd registers them (1.x: no deprecated aliases)
ROUTES: dict[str, dict[str, Handler]] = {
    "GET": {
        "/ping": h_ping,
        "/info": h_info,
        "/debug": h_debug,
        "/lookup": h_lookup,
        "/topics": h_topics,
        "/channels": h_channels,
        "/nodes": h_nodes,
        "/metrics": h_metrics,
    },
    "POST": {
        "/topic/create": h_topic_create,
        "/topic/delete": h_topic_delete,
        "/channel/create": h_channel_create,
        "/channel/delete": h_channel_delete,
        "/topic/tombstone": h_topic_tombstone,
    },
}
_FOLDED_ROUTES = {method: {path.lower(): path for path in routes} for method, routes in ROUTES.items()}


# -- routing (httprouter's rules) ---------------------------------------------------------------
def clean_path(path: str) -> str:
    """httprouter's CleanPath: one leading slash, no ``//``, ``.`` or ``..``; a trailing
    slash is kept."""
    out: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    cleaned = "/" + "/".join(out)
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


def _fixed_path(method: str, path: str) -> str | None:
    folded = _FOLDED_ROUTES[method]
    cleaned = clean_path(path).lower()
    for candidate in (cleaned, cleaned[:-1] if cleaned.endswith("/") else cleaned + "/"):
        if candidate in folded:
            return folded[candidate]
    return None


def allowed(path: str, method: str) -> str:
    """The Allow header for ``path`` (empty when no other method has it)."""
    if path == "*":
        methods = sorted(ROUTES)
    else:
        methods = sorted(m for m, routes in ROUTES.items() if m != method and path in routes)
    return ", ".join(methods + ["OPTIONS"]) if methods else ""


def _redirect(status: int, method: str, location: str, raw_query: bytes) -> Response:
    if raw_query:
        location += "?" + raw_query.decode("latin-1")
    headers = (("Location", location),)
    if method == "GET":
        body = f'<a href="{location.replace("&", "&amp;")}">{_REASONS[status]}</a>.\n\n'.encode("latin-1")
        return Response(status, body, _HTML, False, headers)
    return Response(status, b"", None, False, headers)


def route(server, method: str, path: str, raw_query: bytes, accept: str = "") -> Response:
    """Answer one request (`accept`: its Accept header, which only /metrics reads)."""
    routes = ROUTES.get(method)
    if routes is not None:
        handler = routes.get(path)
        if handler is not None:
            try:
                params = parse_query(raw_query)
            except ValueError:
                return error_response(400, "INVALID_REQUEST")
            try:
                result = handler(server, params, accept) if handler is h_metrics else handler(server, params)
            except HttpError as exc:
                return error_response(exc.status, exc.message)
            if result is None:
                return Response(200)
            if isinstance(result, Response):
                return result
            return Response(200, result, _JSON)
        if path != "/":
            status = 301 if method == "GET" else 307
            toggled = path[:-1] if len(path) > 1 and path.endswith("/") else path + "/"
            if toggled in routes:
                return _redirect(status, method, toggled, raw_query)
            fixed = _fixed_path(method, path)
            if fixed is not None:
                return _redirect(status, method, fixed, raw_query)
    allow = allowed(path, method)
    if allow:
        if method == "OPTIONS":
            return Response(200, b"", None, False, (("Allow", allow),))
        return error_response(405, "METHOD_NOT_ALLOWED", (("Allow", allow),))
    return error_response(404, "NOT_FOUND")


# -- the connection ---------------------------------------------------------------------------
class _Date:
    """The Date header, formatted once a second."""

    second = -1
    value = b""

    @classmethod
    def get(cls) -> bytes:
        now = int(time.time())
        if now != cls.second:
            cls.second = now
            cls.value = email.utils.formatdate(now, usegmt=True).encode()
        return cls.value


class HttpConnection(asyncio.Protocol):
    """One HTTP/1.1 connection (keep-alive and pipelining)."""

    def __init__(self, server) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.done = False  # answered for the last time: nothing more is parsed
        self.remote = "?"
        self._url = bytearray()
        self._header_bytes = 0
        self._accept = ""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote = f"{peer[0]}:{peer[1]}"
        self.server.connections.add(self)

    def connection_lost(self, exc) -> None:
        self.transport = None
        self.server.connections.discard(self)

    def pause_writing(self) -> None:
        # a pipelining client that does not read its answers gets no more parsing
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.done:
            self.transport.resume_reading()

    def close(self) -> None:
        self.done = True
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.done:
            return  # lingering before the close: dropped
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # answered already; no protocol switch here, so nothing after it makes sense
            self.done = True
            if self.transport is not None:
                linger_close(self.transport)
        except httptools.HttpParserCallbackError:
            if self._header_bytes > MAX_HEADER_BYTES:
                self._plain_error(431)
            else:
                log.exception("HTTP callback failed")
                self._plain_error(400)
        except httptools.HttpParserError:
            self._plain_error(400)

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url.clear()
        self._header_bytes = 0
        self._accept = ""

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        if name.lower() == b"accept":  # for /metrics' format
            self._accept = value.decode("latin-1")

    def _count(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > MAX_HEADER_BYTES:
            raise _HeadersTooLarge()

    def on_message_complete(self) -> None:
        if self.done:
            return
        method = self.parser.get_method().decode("latin-1")
        keep_alive = self.parser.should_keep_alive()
        try:
            url = httptools.parse_url(bytes(self._url))
            path = _unescape(url.path or b"/", plus_is_space=False)
        except (httptools.HttpParserInvalidURLError, ValueError):
            self._plain_error(400)
            return
        raw_query = url.query or b""
        started = time.perf_counter()
        try:
            resp = route(self.server, method, path, raw_query, self._accept)
        except Exception:  # a bug must not take the daemon down
            log.exception("HTTP %s %s failed", method, path)
            resp = error_response(500, "INTERNAL_ERROR")
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%d %s %s (%s) %.3fms", resp.status, method, bytes(self._url).decode("latin-1"),
                      self.remote, (time.perf_counter() - started) * 1e3)
        self._write(resp, keep_alive, head_only=method == "HEAD", http10=self.parser.get_http_version() == "1.0")

    def _write(self, resp: Response, keep_alive: bool, head_only: bool = False, http10: bool = False) -> None:
        transport = self.transport
        if transport is None or self.done:
            return
        version = "HTTP/1.0" if http10 else "HTTP/1.1"  # Go answers in the request's version
        parts = [f"{version} {resp.status} {_REASONS.get(resp.status, 'OK')}\r\n".encode()]
        if resp.ctype:
            parts.append(b"Content-Type: " + resp.ctype.encode() + b"\r\n")
        if resp.v1:
            parts.append(b"X-NSQ-Content-Type: nsq; version=1.0\r\n")
        for name, value in resp.headers:
            parts.append(f"{name}: {value}\r\n".encode("latin-1", "replace"))
        parts.append(b"Date: " + _Date.get() + b"\r\nContent-Length: " + str(len(resp.body)).encode() + b"\r\n")
        if not keep_alive:
            parts.append(b"Connection: close\r\n")
        elif http10:
            parts.append(b"Connection: keep-alive\r\n")
        parts.append(b"\r\n")
        if not head_only:
            parts.append(resp.body)
        transport.write(b"".join(parts))
        if not keep_alive:
            self.done = True
            linger_close(transport)

    def _plain_error(self, status: int) -> None:
        """What Go's HTTP server itself answers to a request it cannot parse; then it closes."""
        text = f"{status} {_REASONS[status]}".encode()
        self._write(Response(status, text, _TEXT, v1=False), keep_alive=False)
