"""What clients ask nsqlookupd and nsqd over HTTP: producers of a topic, topics, /stats.

As nsq's http_api client: a connect timeout and a request timeout, the V1 Accept header
(``application/vnd.nsq; version=1.0``, so answers are the bare JSON), addresses given as
``host:port`` or as a URL.
"""
from __future__ import annotations

import http.client
import socket
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import orjson

ACCEPT_V1 = "application/vnd.nsq; version=1.0"


class HTTPError(Exception):
    """A request failed: no connection, a timeout, a non-200 status (``status``) or bad JSON."""

    def __init__(self, text: str, status: int = 0) -> None:
        super().__init__(text)
        self.status = status


@dataclass(frozen=True)
class Producer:
    """A broker as nsqlookupd's /lookup lists it."""

    broadcast_address: str
    tcp_port: int
    http_port: int
    hostname: str = ""

    @property
    def tcp_address(self) -> str:
        """Where clients connect: broadcast_address:tcp_port."""
        return _join(self.broadcast_address, self.tcp_port)

    @property
    def http_address(self) -> str:
        """Its HTTP API: broadcast_address:http_port."""
        return _join(self.broadcast_address, self.http_port)


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def get_json(address: str, path: str, connect_timeout: float = 2.0, request_timeout: float = 5.0) -> dict:
    """GET http://address/path and decode its JSON; HTTPError says why not."""
    url = address if "://" in address else f"http://{address}"
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    conn = http.client.HTTPConnection(host, port, timeout=connect_timeout)
    try:
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(request_timeout)
        conn.request("GET", parts.path.rstrip("/") + path, headers={"Accept": ACCEPT_V1})
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, socket.timeout, http.client.HTTPException) as exc:
        raise HTTPError(f"GET {url}{path}: {exc}") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise HTTPError(f"GET {url}{path}: got response {resp.status} {body[:200].decode(errors='replace')}",
                        resp.status)
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HTTPError(f"GET {url}{path}: bad JSON: {exc}") from None
    # a lookupd that ignores the V1 Accept header wraps its answer (the pre-1.0 API)
    if isinstance(data, dict) and "status_code" in data and "data" in data:
        data = data["data"] or {}
    return data


def lookup(lookupd: str, topic: str, connect_timeout: float = 2.0, request_timeout: float = 5.0) -> list[Producer]:
    """The producers one lookupd lists for a topic ([] if it does not know the topic)."""
    try:
        data = get_json(lookupd, f"/lookup?topic={quote(topic, safe='')}", connect_timeout, request_timeout)
    except HTTPError as exc:
        if exc.status == 404:
            return []
        raise
    return [Producer(p["broadcast_address"], int(p["tcp_port"]), int(p["http_port"]), p.get("hostname", ""))
            for p in data.get("producers") or []]


def topic_producers(lookupds: list[str], topic: str, connect_timeout: float = 2.0,
                    request_timeout: float = 5.0) -> list[Producer]:
    """clusterinfo.GetLookupdTopicProducers: the union over every lookupd (by HTTP address);
    HTTPError only if every lookupd failed."""
    found: dict[str, Producer] = {}
    errors = []
    for addr in lookupds:
        try:
            for p in lookup(addr, topic, connect_timeout, request_timeout):
                found.setdefault(p.http_address, p)
        except HTTPError as exc:
            errors.append(str(exc))
    if lookupds and len(errors) == len(lookupds):
        raise HTTPError("failed to query any nsqlookupd: " + "; ".join(errors))
    return list(found.values())


def lookupd_topics(lookupds: list[str], connect_timeout: float = 2.0, request_timeout: float = 5.0) -> list[str]:
    """clusterinfo.GetLookupdTopics: the sorted union of every lookupd's /topics."""
    topics: set[str] = set()
    errors = []
    for addr in lookupds:
        try:
            topics.update(get_json(addr, "/topics", connect_timeout, request_timeout).get("topics") or [])
        except HTTPError as exc:
            errors.append(str(exc))
    if lookupds and len(errors) == len(lookupds):
        raise HTTPError("failed to query any nsqlookupd: " + "; ".join(errors))
    return sorted(topics)
