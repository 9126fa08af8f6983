"""`nsqmp tail --peek`: the next messages of a channel printed, nothing consumed."""
from __future__ import annotations

from tests.beyond.test_peek import channel_stats, make_channel, publish
from tests.utils.helpers import run


def test_tail_peek_prints_the_next_n_and_consumes_nothing(broker):
    make_channel(broker)
    publish(broker, "t", [b"line-%d" % i for i in range(15)])
    before = channel_stats(broker)
    r = run("tail", "--peek", "--topic", "t", "--channel", "c", "--nsqd-http-address", broker.http_address)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == [f"line-{i}" for i in range(10)]  # -n 10 by default
    r = run("tail", "--peek", "-n", "3", "--print-topic", "--topic", "t", "--channel", "c",
            "--nsqd-http-address", broker.http_address)
    assert r.stdout.decode().splitlines() == ["t | line-0", "t | line-1", "t | line-2"]
    assert channel_stats(broker) == before
    # a topic with no channel: what it keeps for its first one; a topic nowhere: nothing
    publish(broker, "bare", [b"kept"])
    r = run("tail", "--peek", "--topic", "bare", "--topic", "nowhere", "--nsqd-http-address", broker.http_address)
    assert (r.returncode, r.stdout) == (0, b"kept\n"), r.stderr


def test_tail_peek_needs_an_http_address(broker):
    r = run("tail", "--peek", "--topic", "t", "--nsqd-tcp-address", broker.tcp_address)
    assert r.returncode == 1
    assert b"--peek needs --nsqd-http-address or --lookupd-http-address" in r.stderr


def test_tail_peek_says_when_a_broker_has_no_peek():
    """A server without the endpoint (nsqd answers 404 NOT_FOUND) is an error, not silence."""
    import http.server
    import threading

    class NoPeek(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = b'{"message":"NOT_FOUND"}'
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NoPeek)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        r = run("tail", "--peek", "--topic", "t", "--nsqd-http-address", f"127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == 1 and b"NOT_FOUND" in r.stderr, r.stderr
