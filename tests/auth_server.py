"""A real authorization server for tests: nsqd's auth contract over HTTP (or HTTPS) on
127.0.0.1, port 0, in a thread; it answers per secret and records every query it got."""
from __future__ import annotations

import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import orjson

__all__ = ["AuthServer", "Query", "dead_address"]


@dataclass
class Query:
    method: str
    path: str
    fields: dict[str, str]  # the four fields, from the query string (GET) or the JSON body (POST)
    headers: dict[str, str]  # lower-cased names
    body: bytes


class AuthServer:
    """``grant(secret, ...)`` sets the 200 answer for a secret, ``answer(secret, status,
    body)`` any other; unknown secrets get 403. ``queries`` lists what came in."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.answers: dict[str, tuple[int, bytes, float]] = {}
        self.queries: list[Query] = []
        self.redirects: dict[str, tuple[int, str]] = {}  # path -> (status, Location without the query)
        self.redirected: list[tuple[str, str]] = []  # (method, path) of each request answered by a redirect
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- answers ------------------------------------------------------------------------
    def grant(self, secret: str, authorizations: list[dict], ttl: int = 3600, identity: str = "",
              identity_url: str = "", delay: float = 0.0) -> None:
        body = orjson.dumps({"ttl": ttl, "identity": identity, "identity_url": identity_url,
                             "authorizations": authorizations})
        self.answer(secret, 200, body, delay)

    def answer(self, secret: str, status: int, body: bytes | dict, delay: float = 0.0) -> None:
        raw = orjson.dumps(body) if isinstance(body, dict) else body
        with self._lock:
            self.answers[secret] = (status, raw, delay)

    def queries_for(self, secret: str) -> list[Query]:
        with self._lock:
            return [q for q in self.queries if q.fields.get("secret") == secret]

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None
        return self._httpd.server_address[1]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/auth") -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}{path}"

    def start(self) -> "AuthServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                q = urlsplit(self.path)
                if self._redirect("GET", q.path, q.query):
                    return
                fields = {k: v[0] for k, v in parse_qs(q.query, keep_blank_values=True).items()}
                self._answer(Query("GET", q.path, fields, self._headers(), b""))

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self._redirect("POST", urlsplit(self.path).path, ""):
                    return
                try:
                    data = orjson.loads(body)
                    fields = {k: v[0] for k, v in data.items()}
                except (orjson.JSONDecodeError, AttributeError, IndexError, TypeError):
                    fields = {}
                self._answer(Query("POST", urlsplit(self.path).path, fields, self._headers(), body))

            def _redirect(self, method: str, path: str, query: str) -> bool:
                with server._lock:
                    target = server.redirects.get(path)
                    if target is None:
                        return False
                    server.redirected.append((method, path))
                status, location = target
                self.send_response(status)
                self.send_header("Location", location + (f"?{query}" if query else ""))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True

            def _headers(self) -> dict[str, str]:
                return {k.lower(): v for k, v in self.headers.items()}

            def _answer(self, query: Query) -> None:
                with server._lock:
                    server.queries.append(query)
                    status, body, delay = server.answers.get(
                        query.fields.get("secret", ""), (403, b'{"message":"NOT_AUTHORIZED"}', 0.0))
                if delay:
                    time.sleep(delay)  # the slow auth server under test
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the broker gave up waiting (a timeout test)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        if self.ssl_context is not None:
            self._httpd.socket = self.ssl_context.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="auth-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)


def dead_address() -> str:
    """host:port on 127.0.0.1 where nothing listens (bound, then closed): connection refused."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"
