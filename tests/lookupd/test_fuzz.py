"""Bad input on both protocols gets NSQ's errors and never takes the daemon down."""
from __future__ import annotations

import random
import socket
import struct
from urllib.parse import quote

import orjson

from tests.lookupd.helpers import V1, broker

TOKENS = [b"IDENTIFY", b"REGISTER", b"UNREGISTER", b"PING", b"SUB", b"", b" ", b"t", b"t#ephemeral", b"c",
          b"*", b"\xff\xfe", b"a" * 70, b"\x00", b"\r", b"\t"]


def _drain(sock: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return out


def _frames(data: bytes) -> list[bytes]:
    """Split what the daemon sent into V1 responses; it must be nothing but whole frames."""
    frames = []
    while data:
        assert len(data) >= 4, data
        (size,) = struct.unpack(">i", data[:4])
        assert 0 <= size <= len(data) - 4, data
        frames.append(data[4:4 + size])
        data = data[4 + size:]
    return frames


def _random_session(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:  # pure noise
        return rng.randbytes(rng.randrange(1, 300))
    data = b"  V1"
    for _ in range(rng.randrange(1, 8)):
        if kind == 1:  # noise after the magic
            data += rng.randbytes(rng.randrange(0, 100))
        elif kind == 2:  # command-shaped lines
            data += b" ".join(rng.choice(TOKENS) for _ in range(rng.randrange(1, 4))) + b"\n"
        else:  # IDENTIFY with a random size and body, then commands
            body = rng.choice([rng.randbytes(rng.randrange(0, 50)), orjson.dumps(
                {"broadcast_address": "x", "tcp_port": rng.choice([1, 0, "1", None, 1.5]),
                 "http_port": rng.randrange(-5, 5), "version": rng.choice(["v", "", 3])})])
            size = rng.choice([len(body), len(body) + 3, -1, 1 << 30, 0])
            data += b"IDENTIFY\n" + struct.pack(">i", size) + body
            data += b"REGISTER " + rng.choice(TOKENS) + b"\n"
    return data


def test_tcp_noise(lookupd):
    rng = random.Random(1234)
    for _ in range(300):
        with socket.create_connection(("127.0.0.1", lookupd.tcp_port), timeout=2) as s:
            try:
                s.sendall(_random_session(rng))
            except (BrokenPipeError, ConnectionResetError):
                continue  # it already closed on us: fine
            s.shutdown(socket.SHUT_WR)
            for frame in _frames(_drain(s)):
                assert frame == b"OK" or frame.startswith((b"E_", b"{")), frame
    # still serving, and nothing fake is left behind
    with broker(lookupd.tcp_port, registrations=("after c",)) as b:
        assert b.cmd("PING") == b"OK"
        assert len(lookupd.get("/lookup?topic=after")["producers"]) == 1
        assert len(lookupd.get("/nodes")["producers"]) == 1


def test_tcp_many_idle_and_half_open_connections(lookupd):
    socks = []
    for i in range(200):
        s = socket.create_connection(("127.0.0.1", lookupd.tcp_port), timeout=2)
        s.sendall([b"", b"  V", b"  V1IDENT", b"  V1IDENTIFY\n\x00\x00"][i % 4])
        socks.append(s)
    with V1(lookupd.tcp_port) as c:
        assert c.cmd("PING") == b"OK"
    for s in socks:
        s.close()


PATHS = ["/lookup", "/topics", "/channels", "/nodes", "/ping", "/info", "/debug", "/topic/create", "/topic/delete",
         "/channel/create", "/channel/delete", "/topic/tombstone", "/", "/%", "/%zz", "/lookup/", "//..//lookup",
         "/LOOKUP", "/debug/pprof", "/a" * 40, "/\u00e9", "*"]
KEYS = ["topic", "channel", "node", "", "x", "%", "t;p", "topic%00"]
VALUES = ["t", "", "*", "%zz", "a+b", "%C3%A9", "x" * 70, "c#ephemeral", "127.0.0.1:1", "\u00e9", ";"]
METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "TRACE", "FOO"]


def _random_request(rng: random.Random) -> bytes:
    path = rng.choice(PATHS)
    query = "&".join(f"{rng.choice(KEYS)}={rng.choice(VALUES)}" for _ in range(rng.randrange(0, 4)))
    target = (path + ("?" + query if query else "")).encode()
    if rng.random() < 0.5:
        target = quote(target, safe="/?&=%;*+#:").encode()
    method = rng.choice(METHODS).encode()
    return method + b" " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n"


def test_http_random_requests(lookupd):
    rng = random.Random(99)
    statuses: set[int] = set()
    for _ in range(100):
        batch = b"".join(_random_request(rng) for _ in range(rng.randrange(1, 6)))
        if rng.random() < 0.2:
            batch += rng.randbytes(rng.randrange(1, 200))  # then noise
        with socket.create_connection(("127.0.0.1", lookupd.http_port), timeout=5) as s:
            s.sendall(batch)
            s.shutdown(socket.SHUT_WR)
            out = _drain(s)
        for line in out.split(b"\r\n"):
            if line.startswith(b"HTTP/1.1 "):
                statuses.add(int(line.split()[1]))
    assert statuses <= {200, 301, 307, 400, 404, 405}, statuses  # never a 500
    assert {200, 400, 404, 405} <= statuses
    assert lookupd.http("GET", "/ping")[:2] == (200, b"OK")


def test_http_noise(lookupd):
    rng = random.Random(7)
    for _ in range(100):
        with socket.create_connection(("127.0.0.1", lookupd.http_port), timeout=5) as s:
            try:
                s.sendall(rng.randbytes(rng.randrange(1, 2000)))
                s.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                continue
            out = _drain(s)
            assert out == b"" or out.startswith(b"HTTP/1.1 400 Bad Request"), out[:100]
    assert lookupd.http("GET", "/ping")[:2] == (200, b"OK")
