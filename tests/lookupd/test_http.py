"""The HTTP API: every endpoint's shape, status codes, headers and error bodies."""
from __future__ import annotations

import socket

import orjson
import pytest

from tests.lookupd.helpers import broker

V1_HEADER = "nsq; version=1.0"
JSON = "application/json; charset=utf-8"


def error(d, method: str, path: str) -> tuple[int, str]:
    status, body, headers = d.http(method, path)
    assert headers["Content-Type"] == JSON, headers
    assert headers["X-NSQ-Content-Type"] == V1_HEADER
    return status, orjson.loads(body)["message"]


def ok_empty(d, method: str, path: str) -> None:
    status, body, headers = d.http(method, path)
    assert (status, body) == (200, b""), (path, status, body)
    assert headers["X-NSQ-Content-Type"] == V1_HEADER
    assert "Content-Type" not in headers


def test_ping_and_info(lookupd):
    status, body, headers = lookupd.http("GET", "/ping")
    assert (status, body) == (200, b"OK")
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert "X-NSQ-Content-Type" not in headers  # /ping is plain text, not V1
    status, body, headers = lookupd.http("GET", "/info")
    assert (status, body) == (200, b'{"version":"1.3.0"}')
    assert headers["X-NSQ-Content-Type"] == V1_HEADER and headers["Content-Type"] == JSON


def test_empty_registry(lookupd):
    assert lookupd.get("/topics") == {"topics": []}
    assert lookupd.get("/channels?topic=nothing") == {"channels": []}
    assert lookupd.get("/nodes") == {"producers": []}
    assert lookupd.get("/debug") == {}
    assert error(lookupd, "GET", "/lookup?topic=nothing") == (404, "TOPIC_NOT_FOUND")
    assert error(lookupd, "GET", "/lookup?topic=") == (404, "TOPIC_NOT_FOUND")
    assert error(lookupd, "GET", "/lookup") == (400, "MISSING_ARG_TOPIC")
    assert error(lookupd, "GET", "/lookup?channel=x") == (400, "MISSING_ARG_TOPIC")
    assert error(lookupd, "GET", "/channels") == (400, "MISSING_ARG_TOPIC")


def test_lookup_nodes_and_debug_shapes(lookupd):
    with broker(lookupd.tcp_port, tcp_port=4150, http_port=4151, address="b1",
                registrations=("t", "t c1", "t c2", "u")) as b1, \
         broker(lookupd.tcp_port, tcp_port=5150, http_port=5151, address="b2", registrations=("t",)) as b2:
        lookup = lookupd.get("/lookup?topic=t")
        assert lookup["channels"] == ["c1", "c2"]
        producers = sorted(lookup["producers"], key=lambda p: p["tcp_port"])
        assert [list(p) for p in producers] == [["remote_address", "hostname", "broadcast_address", "tcp_port",
                                                 "http_port", "version", "topology_zone", "topology_region"]] * 2
        local1 = "{}:{}".format(*b1.sock.getsockname()[:2])
        assert producers[0] == {"remote_address": local1, "hostname": "fake-broker", "broadcast_address": "b1",
                                "tcp_port": 4150, "http_port": 4151, "version": "1.3.0",
                                "topology_zone": "", "topology_region": ""}
        assert producers[1]["broadcast_address"] == "b2"
        assert lookupd.get("/topics") == {"topics": ["t", "u"]}
        assert lookupd.get("/lookup?topic=u")["channels"] == []

        nodes = sorted(lookupd.get("/nodes")["producers"], key=lambda n: n["tcp_port"])
        assert list(nodes[0]) == ["remote_address", "hostname", "broadcast_address", "tcp_port", "http_port",
                                  "version", "topology_zone", "topology_region", "tombstones", "topics"]
        assert (nodes[0]["topics"], nodes[0]["tombstones"]) == (["t", "u"], [False, False])
        assert (nodes[1]["topics"], nodes[1]["tombstones"]) == (["t"], [False])

        debug = lookupd.get("/debug")
        assert list(debug) == sorted(debug)  # a Go map: sorted keys
        assert sorted(debug) == ["channel:t:c1", "channel:t:c2", "client::", "topic:t:", "topic:u:"]
        assert len(debug["topic:t:"]) == 2 and len(debug["client::"]) == 2
        entry = debug["channel:t:c1"][0]
        assert list(entry) == ["broadcast_address", "hostname", "http_port", "id", "last_update", "tcp_port",
                               "tombstoned", "tombstoned_at", "topology_region", "topology_zone", "version"]
        assert entry["id"] == local1 and entry["tombstoned"] is False
        assert entry["tombstoned_at"] == -6795364578871345152  # Go's zero time.Time in UnixNano
        assert entry["last_update"] > 1_600_000_000 * 10**9
        b2.close()


def test_topic_create_and_delete(lookupd):
    assert error(lookupd, "POST", "/topic/create") == (400, "MISSING_ARG_TOPIC")
    assert error(lookupd, "POST", "/topic/create?topic=bad!") == (400, "INVALID_ARG_TOPIC")
    assert error(lookupd, "POST", "/topic/create?topic=") == (400, "INVALID_ARG_TOPIC")
    ok_empty(lookupd, "POST", "/topic/create?topic=made")
    ok_empty(lookupd, "POST", "/topic/create?topic=made")  # idempotent
    assert lookupd.get("/topics") == {"topics": ["made"]}
    assert lookupd.get("/lookup?topic=made") == {"channels": [], "producers": []}

    ok_empty(lookupd, "POST", "/channel/create?topic=made&channel=c")
    assert error(lookupd, "POST", "/topic/delete") == (400, "MISSING_ARG_TOPIC")
    ok_empty(lookupd, "POST", "/topic/delete?topic=made")
    assert lookupd.get("/topics") == {"topics": []}
    assert lookupd.get("/channels?topic=made") == {"channels": []}
    ok_empty(lookupd, "POST", "/topic/delete?topic=never-was")  # not an error in nsqlookupd


def test_topic_delete_removes_registrations_of_live_brokers(lookupd):
    with broker(lookupd.tcp_port, registrations=("t c",)) as b:
        ok_empty(lookupd, "POST", "/topic/delete?topic=t")
        assert error(lookupd, "GET", "/lookup?topic=t") == (404, "TOPIC_NOT_FOUND")
        assert lookupd.get("/nodes")["producers"][0]["topics"] == []
        assert b.cmd("REGISTER t") == b"OK"  # the broker still has it and says so again
        assert len(lookupd.get("/lookup?topic=t")["producers"]) == 1


def test_channel_create_and_delete(lookupd):
    for path, expected in [
        ("/channel/create", (400, "MISSING_ARG_TOPIC")),
        ("/channel/create?channel=c", (400, "MISSING_ARG_TOPIC")),
        ("/channel/create?topic=bad*&channel=c", (400, "INVALID_ARG_TOPIC")),
        ("/channel/create?topic=t", (400, "MISSING_ARG_CHANNEL")),
        ("/channel/create?topic=t&channel=bad*", (400, "INVALID_ARG_CHANNEL")),
        ("/channel/delete?topic=t", (400, "MISSING_ARG_CHANNEL")),
        ("/channel/delete?topic=t&channel=nope", (404, "CHANNEL_NOT_FOUND")),
    ]:
        assert error(lookupd, "POST", path) == expected, path
    ok_empty(lookupd, "POST", "/channel/create?topic=t&channel=c")
    ok_empty(lookupd, "POST", "/channel/create?topic=t&channel=d%23ephemeral")
    assert lookupd.get("/topics") == {"topics": ["t"]}  # creating a channel creates its topic
    assert lookupd.get("/lookup?topic=t") == {"channels": ["c", "d#ephemeral"], "producers": []}
    ok_empty(lookupd, "POST", "/channel/delete?topic=t&channel=c")
    assert lookupd.get("/channels?topic=t") == {"channels": ["d#ephemeral"]}
    assert error(lookupd, "POST", "/channel/delete?topic=t&channel=c") == (404, "CHANNEL_NOT_FOUND")


def test_tombstone_arguments(lookupd):
    assert error(lookupd, "POST", "/topic/tombstone") == (400, "MISSING_ARG_TOPIC")
    assert error(lookupd, "POST", "/topic/tombstone?topic=t") == (400, "MISSING_ARG_NODE")
    ok_empty(lookupd, "POST", "/topic/tombstone?topic=t&node=nowhere:1")  # nothing to tombstone: fine
    assert lookupd.get("/topics") == {"topics": []}


@pytest.mark.parametrize("method,path,status,message,allow", [
    ("GET", "/topic/create?topic=t", 405, "METHOD_NOT_ALLOWED", "POST, OPTIONS"),
    ("GET", "/topic/tombstone", 405, "METHOD_NOT_ALLOWED", "POST, OPTIONS"),
    ("POST", "/lookup?topic=t", 405, "METHOD_NOT_ALLOWED", "GET, OPTIONS"),
    ("PUT", "/ping", 405, "METHOD_NOT_ALLOWED", "GET, OPTIONS"),
    ("DELETE", "/topic/delete", 405, "METHOD_NOT_ALLOWED", "POST, OPTIONS"),
    ("GET", "/create_topic?topic=t", 404, "NOT_FOUND", None),  # pre-1.0 aliases are gone in 1.x
    ("POST", "/delete_topic?topic=t", 404, "NOT_FOUND", None),
    ("GET", "/stats", 404, "NOT_FOUND", None),
    ("GET", "/", 404, "NOT_FOUND", None),
    ("GET", "/debug/pprof", 404, "NOT_FOUND", None),
])
def test_router_errors(lookupd, method, path, status, message, allow):
    got_status, body, headers = lookupd.http(method, path)
    assert (got_status, orjson.loads(body)) == (status, {"message": message})
    assert headers["X-NSQ-Content-Type"] == V1_HEADER
    assert headers.get("Allow") == allow


def test_options_head_and_redirects(lookupd):
    status, body, headers = lookupd.http("OPTIONS", "/lookup")
    assert (status, body, headers["Allow"]) == (200, b"", "GET, OPTIONS")
    status, body, headers = lookupd.http("OPTIONS", "/nothing-here")
    assert status == 404
    status, body, headers = lookupd.http("HEAD", "/ping")  # httprouter does not map HEAD to GET
    assert (status, body, headers["Allow"]) == (405, b"", "GET, OPTIONS")
    status, body, headers = lookupd.http("GET", "/topics/")
    assert (status, headers["Location"]) == (301, "/topics")
    assert body == b'<a href="/topics">Moved Permanently</a>.\n\n'
    status, _, headers = lookupd.http("GET", "/Lookup?topic=x")
    assert (status, headers["Location"]) == (301, "/lookup?topic=x")
    status, _, headers = lookupd.http("GET", "//nodes")
    assert (status, headers["Location"]) == (301, "/nodes")
    status, body, headers = lookupd.http("POST", "/topic/create/?topic=x")
    assert (status, body, headers["Location"]) == (307, b"", "/topic/create?topic=x")
    assert lookupd.get("/topics") == {"topics": []}  # a redirect does not act


def test_query_parsing_like_go(lookupd):
    ok_empty(lookupd, "POST", "/topic/create?topic=a%2Eb")  # escapes are decoded: a.b
    ok_empty(lookupd, "POST", "/channel/create?topic=a.b&channel=c&topic=ignored")  # the first value counts
    assert lookupd.get("/lookup?topic=a.b") == {"channels": ["c"], "producers": []}
    assert lookupd.get("/lookup?x=1&&topic=a.b&") == {"channels": ["c"], "producers": []}
    assert lookupd.get("/look%75p?topic=a.b")["channels"] == ["c"]  # the path is unescaped too
    for path in ("/lookup?topic=%zz", "/lookup?topic=a.b;x=1", "/lookup?topic=a.b&bad=%"):
        assert error(lookupd, "GET", path) == (400, "INVALID_REQUEST"), path
    assert error(lookupd, "POST", "/topic/create?topic=a+b") == (400, "INVALID_ARG_TOPIC")  # + is a space
    assert error(lookupd, "POST", "/topic/create?topic=%C3%A9") == (400, "INVALID_ARG_TOPIC")


def test_wildcard_topic_as_in_nsqlookupd(lookupd):
    """nsqlookupd's registry treats "*" as a wildcard, so /lookup?topic=* answers for all."""
    with broker(lookupd.tcp_port, registrations=("a x", "b y")):
        lookup = lookupd.get("/lookup?topic=*")
        assert sorted(lookup["channels"]) == ["x", "y"] and len(lookup["producers"]) == 1
        assert sorted(lookupd.get("/channels?topic=*")["channels"]) == ["x", "y"]


def _raw(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_keep_alive_pipelining_and_http_10(lookupd):
    requests = b"".join(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n" for _ in range(50))
    out = _raw(lookupd.http_port, requests + b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200 OK") == 51 and out.endswith(b'{"version":"1.3.0"}')
    out = _raw(lookupd.http_port, b"GET /ping HTTP/1.0\r\n\r\nGET /ping HTTP/1.0\r\n\r\n")
    assert out.startswith(b"HTTP/1.0 200 OK") and out.count(b"200 OK") == 1  # 1.0 without keep-alive
    assert b"Connection: close" in out
    out = _raw(lookupd.http_port, b"GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /ping HTTP/1.0\r\n\r\n")
    assert out.count(b"HTTP/1.0 200 OK") == 2 and b"Connection: keep-alive" in out


def test_bad_requests_and_size_limits(lookupd):
    out = _raw(lookupd.http_port, b"NOT HTTP AT ALL\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 Bad Request") and out.endswith(b"400 Bad Request")
    huge = b"GET /ping HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * (2 << 20) + b"\r\n\r\n"
    out = _raw(lookupd.http_port, huge)
    assert out.startswith(b"HTTP/1.1 431 Request Header Fields Too Large")
    out = _raw(lookupd.http_port, b"GET /" + b"a" * (2 << 20) + b" HTTP/1.1\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431")
    # a body is read and ignored, however big, and the connection goes on
    body = b"x" * (8 << 20)
    out = _raw(lookupd.http_port, b"POST /topic/create?topic=big HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)
               + body + b"GET /topics HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert out.count(b"200 OK") == 2 and out.endswith(b'{"topics":["big"]}')
    assert lookupd.http("GET", "/ping")[0] == 200
