"""--graphite-url: nsqadmin's /api/graphite rate and, with --proxy-graphite, its /render proxy,
against a real HTTP server standing in for Graphite."""
from __future__ import annotations

import http.server
import threading
from urllib.parse import parse_qs, urlparse

import orjson
import pytest


class _Graphite(http.server.BaseHTTPRequestHandler):
    asked: list = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlparse(self.path)
        type(self).asked.append((url.path, parse_qs(url.query), self.headers.get("Authorization")))
        body = orjson.dumps([{"target": "x", "datapoints": [[120.0, 1700000000]]}])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def graphite():
    _Graphite.asked = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Graphite)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", _Graphite.asked
    server.shutdown()
    server.server_close()


def test_rate_and_render_proxy(cluster, make_admin, graphite):
    url, asked = graphite
    admin = make_admin("--nsqd-http-address", cluster.nsqd_http(0), "--graphite-url", url, "--proxy-graphite",
                       "--statsd-interval", "60")
    config = admin.get("/api/config")
    assert (config["graph_enabled"], config["graphite_url"], config["proxy_graphite"]) == (True, url, True)
    assert admin.get("/api/graphite?metric=rate&target=sumSeries(nsq.*.topic.t.message_count)") == {"rate": "2.00"}
    path, query, _ = asked[-1]
    assert path == "/render" and query["from"] == ["-120sec"] and query["until"] == ["-60sec"]
    assert query["target"] == ["sumSeries(nsq.*.topic.t.message_count)"] and query["format"] == ["json"]
    status, _, _ = admin.request("GET", "/api/graphite?metric=depth&target=x")
    assert status == 400
    status, body, headers = admin.request("GET", "/render?target=a.b&format=png", headers={"Authorization": "Basic eDp5"})
    assert status == 200 and orjson.loads(body)[0]["target"] == "x"
    assert asked[-1][0] == "/render" and asked[-1][1]["target"] == ["a.b"] and asked[-1][2] == "Basic eDp5"
