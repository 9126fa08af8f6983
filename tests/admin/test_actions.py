"""The admin's actions against a real cluster (effects checked on the brokers and the lookupd),
nsqadmin's ACL, nsqmp's CSRF and Origin checks, notifications to a real HTTP server, base path."""
from __future__ import annotations

import http.server
import threading

import orjson
import pytest

from tests.harness import wait_for


def _topic(broker, name: str) -> dict | None:
    found = [t for t in broker.stats(topic=name)["topics"] if t["topic_name"] == name]
    return found[0] if found else None


def _chan(broker, topic: str, channel: str) -> dict | None:
    t = _topic(broker, topic)
    found = [c for c in (t or {}).get("channels") or () if c["channel_name"] == channel]
    return found[0] if found else None


def _seed(cluster, topic: str = "acts", channel: str = "c1", n: int = 4) -> None:
    for b in cluster.brokers:
        assert b.http("POST", f"/topic/create?topic={topic}")[0] == 200
        assert b.http("POST", f"/channel/create?topic={topic}&channel={channel}")[0] == 200
        for i in range(n):
            assert b.http("POST", f"/pub?topic={topic}", b"x%d" % i)[0] == 200


class _Sink(http.server.BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, self.headers.get("Content-Type"), orjson.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def sink():
    _Sink.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, _Sink.received
    server.shutdown()
    server.server_close()


def test_every_action_on_every_broker(cluster, make_admin, sink):
    server, received = sink
    _seed(cluster)
    admin = make_admin("--lookupd-http-address", cluster.lookupd_http,
                       "--notification-http-endpoint", f"http://127.0.0.1:{server.server_port}/hook")
    wait_for(lambda: len(admin.get("/api/topics/acts")["nodes"]) == 2, what="both brokers have the topic")
    b0, b1 = cluster.brokers

    assert admin.act("POST", "/api/topics/acts/c1", {"action": "pause"}) == (200, {"message": ""})
    assert all(_chan(b, "acts", "c1")["paused"] for b in (b0, b1))
    assert admin.get("/api/topics/acts/c1")["paused"] is True
    assert admin.act("POST", "/api/topics/acts/c1", {"action": "unpause"})[0] == 200
    assert not any(_chan(b, "acts", "c1")["paused"] for b in (b0, b1))
    assert admin.act("POST", "/api/topics/acts/c1", {"action": "empty"})[0] == 200
    assert [_chan(b, "acts", "c1")["depth"] for b in (b0, b1)] == [0, 0]

    assert admin.act("POST", "/api/topics/acts", {"action": "pause"})[0] == 200
    assert all(_topic(b, "acts")["paused"] for b in (b0, b1))
    assert admin.act("POST", "/api/topics/acts", {"action": "unpause"})[0] == 200
    assert not any(_topic(b, "acts")["paused"] for b in (b0, b1))
    assert admin.act("POST", "/api/topics/acts", {"action": "empty"})[0] == 200
    assert admin.act("POST", "/api/topics/acts", {"action": "explode"}) == (400, {"message": "INVALID_ACTION"})

    assert admin.act("POST", "/api/topics", {"topic": "fresh", "channel": "ch"})[0] == 200
    assert "fresh" in cluster.lookupd.get("/topics")["topics"]
    assert cluster.lookupd.get("/channels?topic=fresh")["channels"] == ["ch"]
    assert admin.act("POST", "/api/topics", {"topic": "bad name!"}) == (400, {"message": "INVALID_TOPIC"})
    # a channel created on the brokers that have the topic
    assert admin.act("POST", "/api/topics", {"topic": "acts", "channel": "c2"})[0] == 200
    assert all(_chan(b, "acts", "c2") is not None for b in (b0, b1))

    assert admin.act("DELETE", "/api/topics/acts/c2")[0] == 200
    assert all(_chan(b, "acts", "c2") is None for b in (b0, b1))

    node = cluster.nsqd_http(1)
    assert admin.act("DELETE", f"/api/nodes/{node}", {"topic": "acts"})[0] == 200
    assert _topic(b1, "acts") is None and _topic(b0, "acts") is not None

    assert admin.act("DELETE", "/api/topics/acts")[0] == 200
    assert _topic(b0, "acts") is None
    wait_for(lambda: "acts" not in cluster.lookupd.get("/topics")["topics"], what="lookupd forgot the topic")

    want = ["pause_channel", "unpause_channel", "empty_channel", "pause_topic", "unpause_topic", "empty_topic",
            "create_topic", "create_channel", "create_topic", "create_channel", "delete_channel",
            "tombstone_topic_producer", "delete_topic"]
    wait_for(lambda: len(received) == len(want), what=lambda: f"notifications: {received}")
    by_action = sorted((r[2]["action"] for r in received))
    assert by_action == sorted(want)
    path, ctype, note = next(r for r in received if r[2]["action"] == "tombstone_topic_producer")
    assert path == "/hook" and ctype == "application/json"
    assert (note["topic"], note["node"]) == ("acts", node) and "channel" not in note and "user" not in note
    assert note["url"] == f"http://127.0.0.1:{admin.port}/api/nodes/{node}"
    assert note["remote_ip"].startswith("127.0.0.1:") and isinstance(note["timestamp"], int) and note["via"]
    pause = next(r[2] for r in received if r[2]["action"] == "pause_channel")
    assert (pause["topic"], pause["channel"]) == ("acts", "c1")


def test_csrf_origin_and_acl(cluster, make_admin):
    _seed(cluster, "guarded", "c", 1)
    admin = make_admin("--nsqd-http-address", cluster.nsqd_http(0), "--admin-user", "alice",
                       "--admin-user", "bob", "--acl-http-header", "X-User", "--csrf-token", "s3cret")
    body = orjson.dumps({"action": "pause"})
    path = "/api/topics/guarded"
    status, raw, _ = admin.request("POST", path, body)
    assert (status, orjson.loads(raw)) == (403, {"message": "CSRF_TOKEN_MISSING"})
    status, raw, _ = admin.request("POST", path, body, {"X-NSQMP-CSRF-Token": "wrong", "X-User": "alice"})
    assert (status, orjson.loads(raw)) == (403, {"message": "CSRF_TOKEN_INVALID"})
    status, raw, _ = admin.request("DELETE", path, None, {"X-NSQMP-CSRF-Token": "s3cret", "X-User": "alice",
                                                          "Origin": "http://evil.example"})
    assert (status, orjson.loads(raw)) == (403, {"message": "ORIGIN_MISMATCH"})
    assert _topic(cluster.brokers[0], "guarded") is not None  # nothing happened so far

    assert admin.act("POST", path, {"action": "pause"}, user="mallory", header="X-User") == (
        403, {"message": "FORBIDDEN"})
    assert admin.act("POST", path, {"action": "pause"}) == (403, {"message": "FORBIDDEN"})
    assert not _topic(cluster.brokers[0], "guarded")["paused"]
    assert admin.get("/api/config", **{"X-User": "bob"})["is_admin"] is True
    assert admin.get("/api/config")["is_admin"] is False

    status, raw, _ = admin.request("POST", path, body, {"X-NSQMP-CSRF-Token": "s3cret", "X-User": "bob",
                                                        "Origin": f"http://127.0.0.1:{admin.port}"})
    assert status == 200, raw
    assert _topic(cluster.brokers[0], "guarded")["paused"]


def test_base_path_pages_static_and_api(cluster, make_admin):
    admin = make_admin("--nsqd-http-address", cluster.nsqd_http(0), "--base-path", "/ops/nsq/")
    token = admin.get("/ops/nsq/api/config")["csrf_token"]
    for page in ("/ops/nsq/", "/ops/nsq/topics/t", "/ops/nsq/topics/t/c", "/ops/nsq/nodes",
                 f"/ops/nsq/nodes/{cluster.nsqd_http(0)}", "/ops/nsq/lookup", "/ops/nsq/counter"):
        status, body, headers = admin.request("GET", page)
        assert status == 200 and headers["Content-Type"].startswith("text/html"), page
        assert b"__NSQMP_" not in body and token.encode() in body
        assert b'content="/ops/nsq"' in body
    status, body, _ = admin.request("GET", "/ops/nsq/static/index.html")
    assert status == 200 and b"__NSQMP_BASE_PATH__" in body  # served as is under /static
    assert admin.request("GET", "/ops/nsq/static/../API.md")[0] == 404
    assert admin.request("GET", "/api/topics")[0] == 404
    assert admin.get("/ops/nsq/api/topics")["message"] == ""
    assert admin.request("GET", "/ops/nsq/ping")[1] == b"OK"
    # no broker has topic t: nothing to pause, nothing failed (as nsqadmin)
    assert admin.act("POST", "/api/topics/t", {"action": "pause"}, base="/ops/nsq") == (200, {"message": ""})


def test_config_endpoint_as_nsqadmin(cluster, make_admin, tmp_path):
    admin = make_admin("--nsqd-http-address", cluster.nsqd_http(0), "--statsd-interval", "30")
    assert admin.get("/config/log_level") == 2  # lg.INFO
    assert admin.get("/config/statsd_interval") == 30_000_000_000  # a Go time.Duration
    assert admin.get("/config/nsqd_http_addresses") == [cluster.nsqd_http(0)]
    status, raw, _ = admin.request("GET", "/config/bogus")
    assert (status, orjson.loads(raw)) == (400, {"message": "INVALID_OPTION"})
    # a script's PUT (no CSRF token, as nsqadmin's scripts send none)
    status, raw, _ = admin.request("PUT", "/config/log_level", b"debug")
    assert (status, orjson.loads(raw)) == (200, 1)
    status, raw, _ = admin.request("PUT", "/config/nsqlookupd_http_addresses",
                                   orjson.dumps([cluster.lookupd_http]))
    assert status == 200 and orjson.loads(raw) == [cluster.lookupd_http]
    wait_for(lambda: admin.get("/api/nodes")["nodes"], what="nodes through the lookupd set at run time")
    status, _, _ = admin.request("PUT", "/config/log_level", b"debug", {"Origin": "http://evil.example"})
    assert status == 403
    status, _, _ = admin.request("PUT", "/config/http_address", b"x")
    assert status == 400
    outsider = make_admin("--nsqd-http-address", cluster.nsqd_http(0), "--allow-config-from-cidr", "10.0.0.0/8")
    assert outsider.request("GET", "/config/log_level")[0] == 403
