"""AUTH: asking nsqd's authorization servers (--auth-http-address) and checking the answer.

The contract is nsqd 1.3.0's (internal/auth, nsqd/client_v2.go):

- Endpoint: an address containing ``://`` is used as it is, otherwise
  ``http://<host:port>/auth``. One server is picked at random; on any failure the next
  ones are tried in turn; the AUTH fails only if every server failed.
- Request: GET ``<endpoint>?common_name=..&remote_ip=..&secret=..&tls=true|false``
  (Go's url.Values: keys sorted, query-escaped) or, with
  ``--auth-http-request-method=post``, a POST of the same fields as a JSON object of
  string arrays (``{"common_name":[""],"remote_ip":["127.0.0.1"],...}``). Both carry
  ``Accept: application/vnd.nsq; version=1.0``. Redirects are followed as Go's client
  follows them, and a 403 to a plain-http endpoint whose body names an ``https_port``
  is retried once over https on that port (nsqd's client does the same).
- Response: 200 and JSON ``{"ttl": s, "identity": .., "identity_url": ..,
  "authorizations": [{"topic": re, "channels": [re, ..], "permissions": [..]}]}``.
  Anything else, an unknown permission, a regex that does not compile or ttl <= 0 is a
  failure.
- Check: regexes are unanchored (Go's MatchString: Python's ``re.search``). SUB needs
  ``subscribe``, a matching topic and one matching channel; PUB/MPUB/DPUB need
  ``publish``, a matching topic and a channel regex that matches the empty string.

The HTTP exchange is asyncio + httptools (already the HTTP server's parser): one short
connection per query, nothing else to depend on, and it runs on the acceptor's own loop.
"""
from __future__ import annotations

import asyncio
import random
import re
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import httptools
import orjson

ACCEPT = "application/vnd.nsq; version=1.0"
_PERMISSIONS = ("subscribe", "publish")
_MAX_RESPONSE = 1 << 20  # an auth answer is a few hundred bytes; bound what we hold
_REDIRECTS = (301, 302, 303, 307, 308)


class AuthFailed(Exception):
    """The auth servers could not authorize (the client only ever sees E_AUTH_FAILED)."""


@dataclass
class Authorization:
    topic: re.Pattern[str]
    channels: list[re.Pattern[str]]
    permissions: list[str]

    def allows(self, topic: str, channel: str) -> bool:
        """nsqd's Authorization.IsAllowed: a channel means subscribe, none means publish."""
        if ("subscribe" if channel else "publish") not in self.permissions:
            return False
        if self.topic.search(topic) is None:
            return False
        return any(c.search(channel) is not None for c in self.channels)


@dataclass
class AuthState:
    """One auth server answer, valid until `expires` (loop time, seconds)."""

    ttl: int
    identity: str
    identity_url: str
    authorizations: list[Authorization] = field(default_factory=list)
    expires: float = 0.0

    def allows(self, topic: str, channel: str) -> bool:
        return any(a.allows(topic, channel) for a in self.authorizations)


def _typed(data: dict, key: str, kind: type, default: Any) -> Any:
    """Go's json.Unmarshal into a typed struct: null keeps the zero value, a wrong type fails."""
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise AuthFailed(f"json: cannot unmarshal {key}")
    return value


def parse_state(body: bytes, now: float) -> AuthState:
    """Decode and validate an auth server's 200 body (nsqd's QueryAuthd checks)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise AuthFailed(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AuthFailed("json: cannot unmarshal response")
    ttl = _typed(data, "ttl", int, 0)
    identity = _typed(data, "identity", str, "")
    identity_url = _typed(data, "identity_url", str, "")
    auths = []
    for raw in _typed(data, "authorizations", list, []):
        if not isinstance(raw, dict):
            raise AuthFailed("json: cannot unmarshal authorization")
        perms = _typed(raw, "permissions", list, [])
        for p in perms:
            if p not in _PERMISSIONS:
                raise AuthFailed(f"unknown permission {p}")
        topic = _typed(raw, "topic", str, "")
        channels = _typed(raw, "channels", list, [])
        try:
            compiled_topic = re.compile(topic)
        except re.error as exc:
            raise AuthFailed(f"unable to compile topic {topic!r} {exc}") from None
        compiled_channels = []
        for c in channels:
            if not isinstance(c, str):
                raise AuthFailed("json: cannot unmarshal channel")
            try:
                compiled_channels.append(re.compile(c))
            except re.error as exc:
                raise AuthFailed(f"unable to compile channel {c!r} {exc}") from None
        auths.append(Authorization(compiled_topic, compiled_channels, list(perms)))
    if ttl <= 0:
        raise AuthFailed(f"invalid TTL {ttl} (must be >0)")
    return AuthState(ttl, identity, identity_url, auths, now + ttl)


def endpoint(address: str) -> str:
    """nsqd's rule: a URL is used as given, host:port becomes http://host:port/auth."""
    return address if "://" in address else f"http://{address}/auth"


def request_fields(remote_ip: str, tls: bool, common_name: str, secret: bytes) -> dict[str, str | bytes]:
    """The four fields nsqd sends; the secret stays bytes (Go strings are bytes)."""
    return {"common_name": common_name, "remote_ip": remote_ip, "secret": secret,
            "tls": "true" if tls else "false"}


def post_body(fields: dict[str, str | bytes]) -> bytes:
    """json.Marshal(url.Values): sorted keys, each value a one-string array, invalid
    UTF-8 replaced by U+FFFD, and Go's HTML-safe escaping of <, > and &."""
    values = {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in fields.items()}
    raw = orjson.dumps({k: [values[k]] for k in sorted(values)})
    return raw.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")


class _Response:
    """httptools callbacks for one response."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.done = False
        self.too_big = False
        self.headers_done = False
        self.length: int | None = None
        self.location = ""

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" and value.strip().isdigit():
            self.length = int(value)
        elif name == b"location":
            self.location = value.decode("latin-1").strip()

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        if len(self.body) + len(body) > _MAX_RESPONSE:
            self.too_big = True
        else:
            self.body += body

    def on_message_complete(self) -> None:
        self.done = True


class AuthClient:
    """Queries the configured auth servers for one acceptor."""

    def __init__(self, opts) -> None:
        self.addresses: list[str] = list(opts.auth_http_addresses)
        self.method: str = opts.auth_http_request_method
        self.connect_timeout: float = opts.http_client_connect_timeout
        self.request_timeout: float = opts.http_client_request_timeout
        self.root_ca_file: str = opts.tls_root_ca_file
        self.tls_min_version: str = opts.tls_min_version
        self._ssl: ssl.SSLContext | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.addresses)

    def ssl_context(self) -> ssl.SSLContext:
        """nsqd's client TLS config: the system roots, or only --tls-root-ca-file's CAs."""
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=self.root_ca_file or None)
            versions = {"tls1.0": ssl.TLSVersion.TLSv1, "tls1.1": ssl.TLSVersion.TLSv1_1,
                        "tls1.2": ssl.TLSVersion.TLSv1_2, "tls1.3": ssl.TLSVersion.TLSv1_3}
            try:  # nsqd's client config has MinVersion: --tls-min-version
                ctx.minimum_version = max(ctx.minimum_version, versions.get(self.tls_min_version, ctx.minimum_version))
            except ValueError:  # an OpenSSL floor above the asked version stays
                pass
            self._ssl = ctx
        return self._ssl

    async def query(self, remote_ip: str, tls: bool, common_name: str, secret: bytes,
                    now: float) -> AuthState:
        """Ask the servers, starting at a random one; the first good answer wins."""
        fields = request_fields(remote_ip, tls, common_name, secret)
        n = len(self.addresses)
        start = random.randrange(n)
        errors = []
        for i in range(n):
            address = self.addresses[(start + i) % n]
            try:
                if self.method == "post":
                    request = self._exchange("POST", endpoint(address), post_body(fields))
                else:
                    # nsqd appends the query to the endpoint as given, even one with a query of its own
                    request = self._exchange("GET", f"{endpoint(address)}?{urlencode(fields)}", b"")
                body = await asyncio.wait_for(request, self.request_timeout)
                return parse_state(body, now)
            except (AuthFailed, OSError, asyncio.TimeoutError, ssl.SSLError, httptools.HttpParserError) as exc:
                errors.append(f"failed to auth against {address} - {exc or type(exc).__name__}")
        raise AuthFailed("; ".join(errors))

    async def _exchange(self, method: str, url: str, body: bytes, retried: bool = False, hops: int = 0) -> bytes:
        """One query, with what Go's client does on the way: it follows redirects (at most
        10; 301/302/303 go on as a GET without the body) and nsqd's client retries a 403
        that names an https_port once over https."""
        status, location, got = await self._round_trip(method, url, body)
        if status in _REDIRECTS and location:
            if hops >= 10:
                raise AuthFailed("stopped after 10 redirects")
            if status in (301, 302, 303):
                method, body = "GET", b""
            return await self._exchange(method, urljoin(url, location), body, retried, hops + 1)
        if status == 403 and not url.startswith("https") and not retried:
            https = _https_endpoint(url, bytes(got.body))
            if https is not None:
                return await self._exchange(method, https, body, True, hops)
        if status != 200:
            raise AuthFailed(f"got response {status} {bytes(got.body[:200])!r}")
        return bytes(got.body)

    async def _round_trip(self, method: str, url: str, body: bytes) -> tuple[int, str, _Response]:
        parts = urlsplit(url)
        secure = parts.scheme == "https"
        host = parts.hostname or ""
        port = parts.port or (443 if secure else 80)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        head = f"{method} {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: {ACCEPT}\r\n"
        if method == "POST":
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        request = (head + "User-Agent: nsqmp\r\nConnection: close\r\n\r\n").encode("latin-1") + body
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=self.ssl_context() if secure else None,
                                    server_hostname=host if secure else None),
            self.connect_timeout)
        try:
            writer.write(request)
            got = _Response()
            parser = httptools.HttpResponseParser(got)
            while not got.done:
                chunk = await reader.read(65536)
                if not chunk:
                    # EOF ends a body sent without a length (HTTP/1.0 style), nothing else
                    if not got.headers_done or (got.length is not None and len(got.body) < got.length):
                        raise AuthFailed("connection closed before the whole response")
                    break
                parser.feed_data(chunk)
            status = parser.get_status_code()
        finally:
            writer.close()
        if got.too_big:
            raise AuthFailed("response too big")
        return status, got.location, got


def _https_endpoint(url: str, body: bytes) -> str | None:
    """The https URL a 403 {"https_port": N} points to (nsqd's httpsEndpoint)."""
    try:
        port = orjson.loads(body).get("https_port")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if not isinstance(port, int) or isinstance(port, bool):
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return parts._replace(scheme="https", netloc=f"{host}:{port}").geturl()
