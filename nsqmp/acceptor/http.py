"""nsqd's HTTP API on an acceptor: /ping, /info, /pub, /mpub, /stats.

httptools parses; each route is one coroutine-free handler or, for /stats (which asks every
router), a coroutine. Errors are nsqd's: a JSON body {"message": "<CODE>"} with nsqd's
status code, and every V1 response carries X-NSQ-Content-Type.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from urllib.parse import parse_qs, urlsplit

import httptools
import orjson

from nsqmp.acceptor.identify import VERSION
from nsqmp.acceptor.publisher import TopicFull
from nsqmp.config.options import DURATION, OPTIONS_BY_ATTR
from nsqmp.diskqueue.encoder import SPAN, spans_of
from nsqmp.memstats import FIELDS as MEMORY_FIELDS
from nsqmp.config.options import parse_address
from nsqmp.golog import LEVELS
from nsqmp.protocol.names import is_valid_name
from nsqmp.protocol.parser import mpub_spans

log = logging.getLogger("nsqmp.acceptor")

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            413: "Request Entity Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}
_JSON = b"application/json; charset=utf-8"
_GO_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_TEXT = b"text/plain; charset=utf-8"


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Request:
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


_GO_BAD_REQUEST = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                   b"Connection: close\r\n\r\n400 Bad Request")


class HttpConnection(asyncio.Protocol):
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
            self._write_raw(400, b"", _TEXT, False)
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
                status, body, ctype = exc.status, orjson.dumps({"message": exc.message}), _JSON
            except Exception:  # a bug must not take the acceptor down
                log.exception("HTTP %s %s failed", req.method, req.path)
                status, body, ctype = 500, orjson.dumps({"message": "INTERNAL_ERROR"}), _JSON
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
            + (b"Content-Type: " + ctype + b"\r\n" if body or ctype == _JSON else b"")
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
            return 403, orjson.dumps({"message": "TLS_REQUIRED", "https_port": self.server.https_port}), _JSON
        if req.path.startswith("/config/"):
            return await h_config(self.server, req)
        route = ROUTES.get(req.path)
        if route is None:
            raise HttpError(404, "NOT_FOUND")
        methods, handler = route
        if req.method not in methods:
            raise HttpError(405, "METHOD_NOT_ALLOWED")
        return await handler(self.server, req)


def _params(req: Request) -> None:
    """nsqd's NewReqParams / url.ParseQuery failing: 400 INVALID_REQUEST."""
    if req.bad_query:
        raise HttpError(400, "INVALID_REQUEST")


def _topic(req: Request) -> bytes:
    _params(req)
    topic = req.query.get("topic")
    if topic is None:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    raw = topic.encode()
    if not is_valid_name(raw):
        raise HttpError(400, "INVALID_TOPIC")
    return raw


async def h_ping(server, req: Request):
    if server.health:
        return 500, f"NOK - {server.health}".encode(), _TEXT
    return 200, b"OK", _TEXT


async def h_info(server, req: Request):
    opts = server.opts
    return 200, orjson.dumps({
        "version": VERSION,
        "broadcast_address": opts.broadcast_address,
        "hostname": server.hostname,
        "http_port": server.http_port,
        "tcp_port": server.tcp_port,
        "start_time": server.start_time,
        "max_heartbeat_interval": int(opts.max_heartbeat_interval * 1e9),
        "max_output_buffer_size": opts.max_output_buffer_size,
        "max_output_buffer_timeout": int(opts.max_output_buffer_timeout * 1e9),
        "max_deflate_level": opts.max_deflate_level,
        "topology_zone": "",
        "topology_region": "",
    }), _JSON


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
    max_size = server.opts.max_msg_size
    length = req.headers.get(b"content-length")
    if length is not None and length.isdigit() and int(length) > max_size:
        raise HttpError(413, "MSG_TOO_BIG")
    if len(req.body) > max_size:
        raise HttpError(413, "MSG_TOO_BIG")
    if not req.body:
        raise HttpError(400, "MSG_EMPTY")
    topic = _topic(req)
    defer_ms = 0
    if "defer" in req.query:
        raw = req.query["defer"]
        if not _GO_INT.fullmatch(raw):  # Go's ParseInt: no spaces, no underscores
            raise HttpError(400, "INVALID_DEFER")
        defer_ms = int(raw)
        if not 0 <= defer_ms <= int(server.opts.max_req_timeout * 1000):
            raise HttpError(400, "INVALID_DEFER")
    _publish(server, topic, req.body, SPAN.pack(0, len(req.body)), defer_ms)
    return 200, b"OK", _TEXT


async def h_mpub(server, req: Request):
    opts = server.opts
    length = req.headers.get(b"content-length")
    if (length is not None and length.isdigit() and int(length) > opts.max_body_size) \
            or len(req.body) > opts.max_body_size:
        raise HttpError(413, "BODY_TOO_BIG")
    topic = _topic(req)
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
        await _admin(server, {"op": "topic_create", "topic": topic.decode()})
    return 200, b"OK", _TEXT


async def h_stats(server, req: Request):
    _params(req)
    fmt = req.query.get("format", "text")
    # nsqd reads a parameter that is absent as "": no filter
    topic = req.query.get("topic") or None
    channel = req.query.get("channel") or None
    include_clients = _bool_param(req.query.get("include_clients"), True)
    include_mem = _bool_param(req.query.get("include_mem"), True)
    include_timer = _bool_param(req.query.get("include_timer"), False)  # nsqmp's own
    found: list = await server.gather_stats(topic, channel, include_clients)
    topics: list | None = None  # nsqd returns its empty Stats for a topic it does not have: null, null
    producers: list | None = None
    if topic is None or found:
        if channel is not None:  # a topic without that channel is left out
            found = [t for t in found if t["channels"]]
        topics = found
        if not include_clients:
            for t in found:
                for c in t["channels"]:
                    c["clients"] = None
        else:
            # null rather than [] when there is none, as nsqd's nil slice
            producers = server.producers.local(topic) + server.producers.others(topic) or None
    stats = {
        "version": VERSION,
        "health": f"NOK - {server.health}" if server.health else "OK",
        "start_time": server.start_time,
        "topics": topics,
    }
    if include_timer:
        stats["nsqmp_fire_lateness"] = await server.gather_fire_lateness()
    if include_mem:  # omitempty in nsqd
        stats["memory"] = await server.gather_memory()
    stats["producers"] = producers
    if fmt == "json":
        return 200, orjson.dumps(stats), _JSON
    return 200, render_text(stats, time.time()).encode(), _TEXT


# nsqd's boolParams: these spellings are read, anything else keeps the default
_BOOLS = {"true": True, "1": True, "false": False, "0": False}


def _bool_param(value: str | None, default: bool) -> bool:
    return _BOOLS.get(value, default) if value is not None else default


def render_text(stats: dict, now: float) -> str:
    """/stats in nsqd's text format (its printStats and ClientV2Stats.String, line by line)."""
    start = stats["start_time"]
    out = [f"nsqd v{VERSION} (built w/nsqmp)\n",
           f"start_time {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(start))}\n",
           f"uptime {go_duration(max(0.0, now - start))}\n",
           f"\nHealth: {stats['health']}\n"]
    memory = stats.get("memory")
    if memory is not None:
        out.append("\nMemory:\n")
        out += [f"   {name:<25}\t{memory[name]}\n" for name in MEMORY_FIELDS]
    topics = stats["topics"] or []
    out.append("\nTopics:" if topics else "\nTopics: None\n")
    for t in topics:
        out.append(f"\n{'*P ' if t['paused'] else '   '}[{t['topic_name']:<15}] depth: {t['depth']:<5} "
                   f"be-depth: {t['backend_depth']:<5} msgs: {t['message_count']:<8} "
                   f"e2e%: {_e2e(t)}\n")
        for c in t["channels"]:
            out.append(f"{'   *P ' if c['paused'] else '      '}[{c['channel_name']:<25}] "
                       f"depth: {c['depth']:<5} be-depth: {c['backend_depth']:<5} "
                       f"inflt: {c['in_flight_count']:<4} def: {c['deferred_count']:<4} "
                       f"re-q: {c['requeue_count']:<5} timeout: {c['timeout_count']:<5} "
                       f"msgs: {c['message_count']:<8} e2e%: {_e2e(c)}\n")
            for cl in c["clients"] or []:
                out.append(f"        {client_line(cl, now)}\n")
    producers = stats["producers"] or []
    if not producers:
        out.append("\nProducers: None\n")
    else:
        out.append("\nProducers:\n")
        out += [f"   {client_line(p, now)}\n" for p in producers]
    return "".join(out)


def _e2e(item: dict) -> str:
    """nsqd's quantile Result.String(): each percentile's value as stringy.NanoSecondToHuman."""
    return ", ".join(_ns_to_human(p["value"]) for p in item["e2e_processing_latency"]["percentiles"] or ())


def _ns_to_human(v: float) -> str:
    for size, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if v > size:
            return f"{v / size:.1f}{suffix}"
    return f"{v:.1f}ns"


def client_line(cl: dict, now: float) -> str:
    """nsqd's ClientV2Stats.String(): a producer's line when it has published, else a consumer's."""
    port = cl["remote_address"].rpartition(":")[2]
    ident = f"{cl['hostname']}:{port} {cl['user_agent']}"
    connected = go_duration(float(int(max(0.0, now - cl["connect_ts"]))))
    counts = cl.get("pub_counts")
    if counts:
        total = sum(pc["count"] for pc in counts)
        topics = ",".join(f"{pc['topic']}={pc['count']}" for pc in counts)
        return f"[{cl['version']} {ident:<21}] msgs: {total:<8} topics: {topics} connected: {connected}"
    return (f"[{cl['version']} {ident:<21}] state: {cl['state']} inflt: {cl['in_flight_count']:<4} "
            f"rdy: {cl['ready_count']:<4} fin: {cl['finish_count']:<8} re-q: {cl['requeue_count']:<8} "
            f"msgs: {cl['message_count']:<8} connected: {connected}")


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String() of a non-negative duration given in seconds."""
    ns = int(round(seconds * 1e9))
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:  # below a second Go switches unit: ns, µs or ms
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return _trim(ns, size) + unit
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _trim(rest, 1_000_000_000) + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text


def _trim(value: int, unit: int) -> str:
    """value / unit with the fraction's trailing zeros dropped (Go's fmtFrac)."""
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{str(frac).rjust(digits, '0').rstrip('0')}"


async def h_config(server, req: Request):
    """GET /config/<option>: the option's value as JSON (nsqd's config-file key names).

    PUT changes nsqlookupd_tcp_addresses (a JSON array of host:port) or log_level (text) at
    run time, as nsqd does: router 0 relays the value to every acceptor (acceptor 0 then
    connects to the new set of lookupds) before this acceptor answers with the new value.
    """
    key = req.path[len("/config/"):]
    if req.method == "PUT":
        await _config_put(server, key, req.body)
    elif req.method != "GET":
        raise HttpError(405, "METHOD_NOT_ALLOWED")
    else:
        # a PUT answered by another acceptor a moment ago: its CONFIG_SET may be waiting in
        # our ring while this request was read first
        server.catch_up()
    try:
        value = getattr(server.opts, key)
    except AttributeError:
        raise HttpError(400, "INVALID_OPTION") from None
    return 200, orjson.dumps(config_value(key, value)), _JSON


def config_value(key: str, value):
    """An option's value as nsqd's JSON has it: a duration is Go's time.Duration, an
    integer count of nanoseconds; a repeatable option a list."""
    option = OPTIONS_BY_ATTR.get(key)
    if option is not None and option.type is DURATION and isinstance(value, (int, float)):
        return round(value * 1e9)
    if isinstance(value, tuple):
        return list(value)
    return value


def _parse_lookupd_addresses(body: bytes) -> list[str]:
    """A JSON array of host:port strings (null is the empty list, as Go reads it)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise HttpError(400, "INVALID_VALUE") from None
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise HttpError(400, "INVALID_VALUE")
    try:
        return [str(parse_address(a)) for a in value]
    except ValueError:
        raise HttpError(400, "INVALID_VALUE") from None


async def _config_put(server, key: str, body: bytes) -> None:
    if not body or len(body) > server.opts.max_msg_size:
        raise HttpError(413, "INVALID_VALUE")
    value: str | list[str]
    if key == "nsqlookupd_tcp_addresses":
        value = _parse_lookupd_addresses(body)
    elif key == "log_level":
        value = body.decode("utf-8", "replace").lower()
        if value not in LEVELS:
            raise HttpError(400, "INVALID_VALUE")
    else:
        raise HttpError(400, "INVALID_OPTION")
    replies = await server.ask_routers({"op": "config_set", "option": key, "value": value},
                                       [server.plan.router_slot(0)])
    if not replies or replies[0].get("error"):
        raise HttpError(500, "INTERNAL_ERROR")


_STATUS = {"TOPIC_NOT_FOUND": 404, "CHANNEL_NOT_FOUND": 404, "INVALID_REQUEST": 400}


async def _admin(server, request: dict):
    reply = await server.ask_owner(request)
    err = reply.get("error")
    if err:
        raise HttpError(_STATUS.get(err, 500), err)
    return 200, b"", _TEXT


def _topic_arg(req: Request, validate: bool) -> str:
    _params(req)
    topic = req.query.get("topic")
    if topic is None:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    if validate and not is_valid_name(topic.encode()):
        raise HttpError(400, "INVALID_TOPIC")
    return topic


def _topic_channel_args(req: Request) -> tuple[str, str]:
    """nsqd's GetTopicChannelArgs: both present and valid."""
    _params(req)
    topic = req.query.get("topic")
    if topic is None:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    if not is_valid_name(topic.encode()):
        raise HttpError(400, "INVALID_ARG_TOPIC")
    channel = req.query.get("channel")
    if channel is None:
        raise HttpError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel.encode()):
        raise HttpError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def _topic_op(op: str, validate: bool):
    async def handler(server, req: Request):
        return await _admin(server, {"op": op, "topic": _topic_arg(req, validate)})
    return handler


def _channel_op(op: str):
    async def handler(server, req: Request):
        topic, channel = _topic_channel_args(req)
        return await _admin(server, {"op": op, "topic": topic, "channel": channel})
    return handler


ROUTES = {
    "/ping": (("GET",), h_ping),
    "/info": (("GET",), h_info),
    "/pub": (("POST",), h_pub),  # nsqd registers POST only: PUT is 405
    "/mpub": (("POST",), h_mpub),
    "/stats": (("GET",), h_stats),
    "/topic/create": (("POST",), _topic_op("topic_create", validate=True)),
    "/topic/delete": (("POST",), _topic_op("topic_delete", validate=False)),
    "/topic/empty": (("POST",), _topic_op("topic_empty", validate=True)),
    "/topic/pause": (("POST",), _topic_op("topic_pause", validate=False)),
    "/topic/unpause": (("POST",), _topic_op("topic_unpause", validate=False)),
    "/channel/create": (("POST",), _channel_op("channel_create")),
    "/channel/delete": (("POST",), _channel_op("channel_delete")),
    "/channel/empty": (("POST",), _channel_op("channel_empty")),
    "/channel/pause": (("POST",), _channel_op("channel_pause")),
    "/channel/unpause": (("POST",), _channel_op("channel_unpause")),
}

