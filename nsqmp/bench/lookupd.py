"""/lookup latency with many brokers registered: ``python -m nsqmp.bench.lookupd``.

1. Start our nsqlookupd on 127.0.0.1 port 0 (or use --tcp-address/--http-address of one
   already running).
2. Register --producers fake brokers over TCP protocol V1, each its own connection
   (IDENTIFY, then pipelined REGISTERs): --topics topics, each on --replicas brokers, with
   --channels channels each. The connections stay open (closing one unregisters it).
3. GET /lookup?topic=<random topic> --requests times over one keep-alive connection,
   one request at a time, after --warmup unmeasured ones; every answer is checked.
4. Print one JSON object: the set-up, registration time, latency percentiles (ms), rate.
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import socket
import statistics
import struct
import sys
import time

import orjson

from nsqmp.bench.commands import ShowDefaults
from nsqmp.lookupd.launcher import Lookupd

_SIZE = struct.Struct(">i")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("lookupd closed the connection")
        data += chunk
    return bytes(data)


def _read_v1(sock: socket.socket) -> bytes:
    (size,) = _SIZE.unpack(_recv_exactly(sock, 4))
    return _recv_exactly(sock, size)


def register(tcp: tuple[str, int], producers: int, topics: int, replicas: int, channels: int) -> list[socket.socket]:
    """One connection per fake broker, IDENTIFYed, its topics and channels REGISTERed."""
    plan: list[list[int]] = [[] for _ in range(producers)]
    for t in range(topics):
        for r in range(replicas):
            plan[(t * replicas + r) % producers].append(t)
    conns = []
    for i, mine in enumerate(plan):
        sock = socket.create_connection(tcp, timeout=30)
        body = orjson.dumps({"broadcast_address": f"10.{i // 250}.{i % 250}.1", "hostname": f"broker-{i}",
                             "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"})
        lines = [f"REGISTER topic-{t} ch-{c}".encode() for t in mine for c in range(channels)]
        lines += [f"REGISTER topic-{t}".encode() for t in mine if not channels]
        sock.sendall(b"  V1IDENTIFY\n" + _SIZE.pack(len(body)) + body + b"".join(line + b"\n" for line in lines))
        reply = _read_v1(sock)
        if not reply.startswith(b"{"):
            raise RuntimeError(f"IDENTIFY failed: {reply!r}")
        for _ in lines:
            reply = _read_v1(sock)
            if reply != b"OK":
                raise RuntimeError(f"REGISTER failed: {reply!r}")
        conns.append(sock)
    return conns


class KeepAliveClient:
    """The smallest HTTP/1.1 client that can time a request: one socket, Content-Length."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def get(self, path: str) -> tuple[int, bytes]:
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: lookupd\r\nAccept: application/vnd.nsq; version=1.0\r\n\r\n"
                          .encode())
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("lookupd closed the connection")
            self.buf += chunk
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("lookupd closed the connection")
            rest += chunk
        body, self.buf = rest[:length], rest[length:]
        return status, body

    def close(self) -> None:
        self.sock.close()


def _percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def _raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))


def measure(http: tuple[str, int], topics: int, requests: int, warmup: int, replicas: int, channels: int,
            seed: int = 1) -> dict:
    rng = random.Random(seed)
    client = KeepAliveClient(http)
    times: list[float] = []
    sizes = 0
    try:
        for i in range(warmup + requests):
            path = f"/lookup?topic=topic-{rng.randrange(topics)}"
            start = time.perf_counter_ns()
            status, body = client.get(path)
            elapsed = time.perf_counter_ns() - start
            if status != 200:
                raise RuntimeError(f"{path}: {status} {body[:200]!r}")
            if i < warmup:
                continue
            times.append(elapsed / 1e6)
            sizes += len(body)
            if i % 500 == 0:  # spot-check the answers (outside the timing)
                answer = orjson.loads(body)
                if len(answer["producers"]) != replicas or len(answer["channels"]) != channels:
                    raise RuntimeError(f"{path}: unexpected answer {answer}")
    finally:
        client.close()
    ordered = sorted(times)
    total_s = sum(times) / 1e3
    return {
        "requests": requests,
        "p50_ms": round(_percentile(ordered, 0.50), 3),
        "p90_ms": round(_percentile(ordered, 0.90), 3),
        "p99_ms": round(_percentile(ordered, 0.99), 3),
        "max_ms": round(ordered[-1], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "requests_per_second": round(requests / total_s) if total_s else None,
        "response_bytes_mean": round(sizes / requests),
    }


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nsqmp bench lookupd", formatter_class=ShowDefaults,
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--producers", type=int, default=500, help="fake brokers (default 500)")
    parser.add_argument("--topics", type=int, default=1000, help="topics spread over them (default 1000)")
    parser.add_argument("--replicas", type=int, default=3, help="brokers per topic (default 3)")
    parser.add_argument("--channels", type=int, default=2, help="channels per topic (default 2)")
    parser.add_argument("--requests", type=int, default=5000, help="timed /lookup requests (default 5000)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed requests first (default 200)")
    parser.add_argument("--tcp-address", help="a running lookupd's TCP address (default: start one)")
    parser.add_argument("--http-address", help="a running lookupd's HTTP address")
    args = parser.parse_args(argv)
    if bool(args.tcp_address) != bool(args.http_address):
        parser.error("give both --tcp-address and --http-address, or neither")
    if args.replicas > args.producers or min(args.producers, args.topics, args.replicas, args.requests) < 1:
        parser.error("need 1 <= replicas <= producers, and at least one topic and one request")
    _raise_fd_limit(args.producers * 2 + 256)  # our sockets, and the lookupd we start inherits it

    daemon = None
    if args.tcp_address:
        tcp, http = _address(args.tcp_address), _address(args.http_address)
    else:
        daemon = Lookupd().start()
        tcp, http = ("127.0.0.1", daemon.tcp_port), ("127.0.0.1", daemon.http_port)
    conns: list[socket.socket] = []
    try:
        started = time.perf_counter()
        conns = register(tcp, args.producers, args.topics, args.replicas, args.channels)
        register_s = time.perf_counter() - started
        result = {
            "lookupd": "started" if daemon else "external",
            "producers": args.producers,
            "topics": args.topics,
            "replicas": args.replicas,
            "channels_per_topic": args.channels,
            "registrations": args.topics * args.replicas * (1 + args.channels),
            "register_seconds": round(register_s, 3),
            **measure(http, args.topics, args.requests, args.warmup, args.replicas, args.channels),
        }
    finally:
        for sock in conns:
            sock.close()
        if daemon is not None:
            code = daemon.stop()
            if code != 0:
                print(f"lookupd exited {code}:\n{daemon.log_text()[-2000:]}", file=sys.stderr)
            daemon.log_path.unlink(missing_ok=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
