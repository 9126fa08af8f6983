"""nsqmp to-http against a running broker and real HTTP endpoints (http.server on
127.0.0.1): GET with the message in the URL, POST with it as the body, round-robin and
fan-out over two endpoints, a non-2xx answer requeues."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.harness import wait_for


class Endpoint:
    """An HTTP server that records every request and answers `status` (or fails each
    body's first request with 500, when flaky)."""

    def __init__(self, flaky: bool = False) -> None:
        self.requests: list[tuple[str, str, bytes, dict]] = []
        self.flaky = flaky
        self.failed: set[bytes] = set()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, body: bytes) -> None:
                endpoint.requests.append((self.command, self.path, body, dict(self.headers)))
                status = 200
                if endpoint.flaky and body not in endpoint.failed:
                    endpoint.failed.add(body)
                    status = 500
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                self._answer(b"")

            def do_POST(self) -> None:
                self._answer(self.rfile.read(int(self.headers["Content-Length"])))

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def endpoints(n: int, flaky: bool = False) -> Iterator[list[Endpoint]]:
    eps = [Endpoint(flaky) for _ in range(n)]
    try:
        yield eps
    finally:
        for ep in eps:
            ep.close()


def _to_http(utils, broker, topic: str, *args: str):
    return utils("to-http", "--topic", topic, "--nsqd-tcp-address", broker.tcp_address, *args)


def test_get_puts_the_escaped_message_in_the_url_and_post_sends_the_body(broker, utils):
    bodies = [b"a b", b"c&d=e", b"caf\xc3\xa9"]
    broker.http("POST", "/mpub?topic=g", b"\n".join(bodies))
    broker.http("POST", "/mpub?topic=p", b"\n".join(bodies))
    with endpoints(1) as (ep,):
        tool = _to_http(utils, broker, "g", "--get", ep.url + "/hit?msg=%s&x=1")
        wait_for(lambda: len(ep.requests) == 3, what="three GETs")
        assert tool.stop() == 0, tool.stderr()
        assert sorted(r[1] for r in ep.requests) == ["/hit?msg=a+b&x=1", "/hit?msg=c%26d%3De&x=1",
                                                     "/hit?msg=caf%C3%A9&x=1"]
        assert {r[3]["User-Agent"] for r in ep.requests} == {"nsq_to_http v1.3.0"}
        ep.requests.clear()
        tool = _to_http(utils, broker, "p", "--post", ep.url + "/in", "--content-type", "text/plain",
                        "--header", "X-Test: yes")
        wait_for(lambda: len(ep.requests) == 3, what="three POSTs")
        assert tool.stop() == 0, tool.stderr()
        assert sorted(r[2] for r in ep.requests) == sorted(bodies)
        assert {(r[0], r[1], r[3]["Content-Type"], r[3]["X-Test"]) for r in ep.requests} == \
            {("POST", "/in", "text/plain", "yes")}
    assert [c["depth"] + c["in_flight_count"] for t in broker.stats()["topics"] for c in t["channels"]] == [0, 0]


def test_round_robin_and_fan_out(broker, utils):
    broker.http("POST", "/mpub?topic=rr", b"\n".join(b"%d" % i for i in range(10)))
    broker.http("POST", "/mpub?topic=fan", b"\n".join(b"%d" % i for i in range(10)))
    with endpoints(2) as eps:
        tool = _to_http(utils, broker, "rr", "--mode", "round-robin", *[a for ep in eps for a in ("--post", ep.url)])
        wait_for(lambda: sum(len(ep.requests) for ep in eps) == 10, what="ten POSTs")
        assert tool.stop() == 0, tool.stderr()
        assert [len(ep.requests) for ep in eps] == [5, 5]
        for ep in eps:
            ep.requests.clear()
        tool = _to_http(utils, broker, "fan", "--mode", "fan-out", *[a for ep in eps for a in ("--post", ep.url)])
        wait_for(lambda: sum(len(ep.requests) for ep in eps) == 20, what="every message to both")
        assert tool.stop() == 0, tool.stderr()
        assert [sorted(r[2] for r in ep.requests) for ep in eps] == [sorted(b"%d" % i for i in range(10))] * 2


def test_a_failed_request_requeues_the_message(broker, utils):
    broker.http("POST", "/mpub?topic=flaky", b"one\ntwo")
    with endpoints(1, flaky=True) as (ep,):
        tool = _to_http(utils, broker, "flaky", "--post", ep.url, "--consumer-opt", "default_requeue_delay,0")
        # each body: a 500 (REQ), then delivered again and a 200 (FIN)
        wait_for(lambda: len(ep.requests) == 4, what="both messages tried twice")
        wait_for(lambda: broker.stats()["topics"][0]["channels"][0]["depth"] == 0
                 and broker.stats()["topics"][0]["channels"][0]["in_flight_count"] == 0, what="both FINished")
        assert tool.stop() == 0, tool.stderr()
        channel = broker.stats()["topics"][0]["channels"][0]
        assert channel["requeue_count"] == 2 and channel["message_count"] == 2
        assert sorted(r[2] for r in ep.requests) == [b"one", b"one", b"two", b"two"]
