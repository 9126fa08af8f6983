"""What /metrics and the statsd push cost on a broker with many topics and channels:
``nsqmp bench metrics [--topics 1000 --channels 10 --scrapes 20 --pushes 10]``.

1. Start a broker (no statsd), create --topics topics with --channels channels each and
   publish one message to each topic.
2. /metrics: --scrapes GETs one after another (after one unmeasured). Per scrape: the
   wall time the client waited, and the CPU seconds every broker process spent (from
   /proc: supervisor, acceptors, routers, timer), split by role; the body's size and series.
   Meanwhile four publishers (one connection each, so both acceptors have some) time
   each PUB's round trip; the same publishers are timed as long again with no scrape.
3. Idle: the same broker's CPU over a few seconds with nothing asked of it.
4. statsd: a second broker, set up the same way, pushing every second to a UDP socket of
   this process (--statsd-interval 1s: no spreading, every packet at once); its CPU over
   --pushes seconds less the idle rate of step 3 is the cost of the pushes. The packets,
   lines and bytes of one push are counted from what arrived.
5. Print one JSON object.
"""
from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from nsqmp.bench.proc import cpu_seconds
from nsqmp.client import Connection
from nsqmp.launcher import Broker


def _roles(broker: Broker) -> dict[str, int]:
    """Role label ("acceptor 0", "supervisor", ...) -> pid of every broker process."""
    assert broker.proc is not None
    pids = {"supervisor": broker.proc.pid}
    pids.update({title.removeprefix("nsqmp "): pid for title, pid in broker.children().items()})
    return pids


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    return {role: cpu_seconds(pid) for role, pid in pids.items()}


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {role: after[role] - before[role] for role in before}


def populate(broker: Broker, topics: int, channels: int) -> float:
    """Create the topics and channels over one keep-alive connection; one message each."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", broker.http_port, timeout=60)
    for t in range(topics):
        paths = [f"/topic/create?topic=bench-{t:04d}"]
        paths += [f"/channel/create?topic=bench-{t:04d}&channel=ch-{c:02d}" for c in range(channels)]
        for path in paths:
            conn.request("POST", path)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"POST {path} answered {resp.status}")
    conn.close()
    with Connection.connect(broker.tcp_address) as c:
        for t in range(topics):
            c.pub(f"bench-{t:04d}", b"m")
    return time.perf_counter() - started


class Publishers:
    """Four connections publishing in turn on a thread, each PUB's round trip timed."""

    def __init__(self, broker: Broker) -> None:
        self.conns = [Connection.connect(broker.tcp_address) for _ in range(4)]
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            t0 = time.perf_counter()
            self.conns[i % 4].pub("bench-latency", b"x")
            self.times.append(time.perf_counter() - t0)
            i += 1
            time.sleep(0.002)

    def __enter__(self) -> "Publishers":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for c in self.conns:
            c.close()

    def summary(self) -> dict:
        t = sorted(self.times)
        return {"pubs": len(t), "p50_ms": round(t[len(t) // 2] * 1e3, 2),
                "p99_ms": round(t[int(len(t) * 0.99)] * 1e3, 2), "max_ms": round(t[-1] * 1e3, 2)}


def scrape_cost(broker: Broker, scrapes: int) -> dict:
    """Wall and CPU per GET /metrics, by role; PUB round trips during the scrapes and without."""
    pids = _roles(broker)
    conn = http.client.HTTPConnection("127.0.0.1", broker.http_port, timeout=60)

    def get() -> bytes:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"/metrics answered {resp.status}")
        return body

    body = get()  # unmeasured: the first attaches the ring views
    walls = []
    with Publishers(broker) as during:
        started = time.perf_counter()
        before = _cpu(pids)
        for _ in range(scrapes):
            t0 = time.perf_counter()
            body = get()
            walls.append(time.perf_counter() - t0)
        spent = _delta(before, _cpu(pids))
        window = time.perf_counter() - started
    conn.close()
    with Publishers(broker) as quiet:
        time.sleep(window)
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return {
        "scrapes": scrapes,
        "wall_ms_median": round(statistics.median(walls) * 1e3, 1),
        "wall_ms_max": round(max(walls) * 1e3, 1),
        "cpu_ms_per_scrape": round(sum(spent.values()) / scrapes * 1e3, 1),
        "cpu_ms_per_scrape_by_role": {r: round(v / scrapes * 1e3, 1) for r, v in sorted(spent.items())},
        "body_bytes": len(body),
        "series": series,
        "pub_round_trip_during_scrapes": during.summary(),
        "pub_round_trip_without": quiet.summary(),
    }


def idle_rate(broker: Broker, seconds: float) -> float:
    """CPU seconds per second the whole broker spends with nothing asked of it."""
    pids = _roles(broker)
    before = _cpu(pids)
    time.sleep(seconds)
    return sum(_delta(before, _cpu(pids)).values()) / seconds


def push_cost(data: Path, topics: int, channels: int, pushes: int, idle: float) -> dict:
    """A broker pushing to our UDP socket every second: CPU per push over the idle rate."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    broker = Broker(data, "--statsd-address", f"127.0.0.1:{rx.getsockname()[1]}", "--statsd-interval", "1s",
                    "--statsd-prefix", "nsq.%s").start()
    try:
        populate(broker, topics, channels)
        pids = _roles(broker)
        rx.settimeout(0.2)
        _drain(rx)
        before = _cpu(pids)
        started = time.monotonic()
        packets = size = lines = 0
        while time.monotonic() - started < pushes:
            got = _drain(rx, started + pushes)
            packets += len(got)
            size += sum(map(len, got))
            lines += sum(p.count(b"\n") for p in got)
        elapsed = time.monotonic() - started
        spent = _delta(before, _cpu(pids))
    finally:
        broker.stop()
        rx.close()
    per_push_cpu = (sum(spent.values()) - idle * elapsed) / pushes
    return {
        "pushes": pushes,
        "cpu_ms_per_push": round(per_push_cpu * 1e3, 1),
        "cpu_ms_per_push_by_role": {r: round(v / pushes * 1e3, 1) for r, v in sorted(spent.items())},
        "packets_per_push": round(packets / pushes),
        "lines_per_push": round(lines / pushes),
        "bytes_per_push": round(size / pushes),
    }


def _drain(rx: socket.socket, until: float | None = None) -> list[bytes]:
    """What has arrived (up to `until` on the monotonic clock, else until a 0.2 s lull)."""
    got = []
    while until is None or time.monotonic() < until:
        try:
            got.append(rx.recv(65536))
        except socket.timeout:
            if until is None:
                break
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nsqmp bench metrics", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--topics", type=int, default=1000, help="topics to create")
    parser.add_argument("--channels", type=int, default=10, help="channels per topic")
    parser.add_argument("--scrapes", type=int, default=20, help="measured GET /metrics")
    parser.add_argument("--pushes", type=int, default=10, help="seconds (one push each) measured")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle CPU measured")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nsqmp-bench-metrics-") as tmp:
        broker = Broker(Path(tmp) / "scrape").start()
        try:
            setup = populate(broker, args.topics, args.channels)
            scrape = scrape_cost(broker, args.scrapes)
            idle = idle_rate(broker, args.idle)
        finally:
            broker.stop()
        push = push_cost(Path(tmp) / "push", args.topics, args.channels, args.pushes, idle)
    json.dump({"topics": args.topics, "channels_per_topic": args.channels, "setup_s": round(setup, 1),
               "idle_cpu_ms_per_s": round(idle * 1e3, 1), "metrics": scrape, "statsd": push},
              sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
