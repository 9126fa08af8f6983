"""`nsqmp bench peek`: the time of GET /channel/peek on a channel with a long queue.

Starts a fresh broker (temporary data dir, default flags plus --flag ...), creates a
channel, publishes --messages messages of --size bytes by MPUB, waits until /stats shows
them all queued, then times --requests peeks of each case over one keep-alive HTTP
connection (wall time, request written to answer read). Prints one JSON object per case:
percentiles in ms (p50, p99, ...), the answer's size, and whether it read the files.

    python -m nsqmp.bench.peek [--messages 1000000] [--size 200] [--requests 200] [--flag=--mem-queue-size=100]

Issue 23's figure: n=100 on a million queued messages answers in under 10 ms.
"""
from __future__ import annotations

import argparse
import http.client
import sys
import tempfile
import time
from pathlib import Path

import orjson

from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.percentiles import percentiles
from nsqmp.client import wire
from nsqmp.client.sync import Connection
from nsqmp.launcher import Broker

TOPIC, CHANNEL = "peekbench", "ch"
#: (n, format, state): the issue's case first, then a raw one, then one past the memory queue
CASES = ((100, "json", "all"), (100, "raw", "all"), (1000, "json", "queued"))


def _fill(broker: Broker, messages: int, size: int) -> None:
    """The channel, then `messages` bodies by MPUB, until /stats shows them queued."""
    assert broker.http("POST", f"/topic/create?topic={TOPIC}")[0] == 200
    assert broker.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")[0] == 200
    batch = 200
    body = b"p" * size
    with Connection.connect(broker.tcp_address, timeout=60) as p:
        sent = 0
        while sent < messages:
            k = min(batch, messages - sent)
            p.sock.sendall(wire.mpub(TOPIC, [body] * k))
            p.expect_ok()
            sent += k
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        (t,) = broker.stats(topic=TOPIC)["topics"]
        if t["channels"][0]["depth"] >= messages:
            return
        time.sleep(0.2)
    raise SystemExit(f"the channel did not show {messages} queued within 300 s")


def _time(broker: Broker, n: int, fmt: str, state: str, requests: int) -> dict:
    """Percentiles of `requests` peeks (one warm-up first) over one connection."""
    conn = http.client.HTTPConnection("127.0.0.1", broker.http_port, timeout=30)
    path = f"/channel/peek?topic={TOPIC}&channel={CHANNEL}&n={n}&format={fmt}&state={state}"
    took: list[float] = []
    size = 0
    try:
        for i in range(requests + 1):
            started = time.perf_counter()
            conn.request("GET", path)
            resp = conn.getresponse()
            data = resp.read()
            if i:
                took.append((time.perf_counter() - started) * 1000)
            if resp.status != 200:
                raise SystemExit(f"{path}: {resp.status} {data[:200]!r}")
            size = len(data)
    finally:
        conn.close()
    return {"n": n, "format": fmt, "state": state, "answer_bytes": size, "ms": percentiles(took)}


def main(argv: list[str] | None = None) -> int:
    """Fill a channel, time each case, print one JSON line per case."""
    p = argparse.ArgumentParser(formatter_class=ShowDefaults, prog="nsqmp bench peek")
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=200)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--flag", action="append", default=[], help="a broker flag (repeat), e.g. --flag=--mem-queue-size=100")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nsqmp-peek-") as tmp:
        work = Path(tmp)
        broker = Broker(work / "data", *args.flag, log_path=work / "broker.log").start()
        try:
            _fill(broker, args.messages, args.size)
            (t,) = broker.stats(topic=TOPIC)["topics"]
            ch = t["channels"][0]
            for n, fmt, state in CASES:
                result = _time(broker, n, fmt, state, args.requests)
                result.update(messages=args.messages, size=args.size, flags=args.flag, depth=ch["depth"],
                              in_memory=ch["depth"] - ch["backend_depth"], reads_files=n > ch["depth"] - ch["backend_depth"])
                sys.stdout.write(orjson.dumps(result).decode() + "\n")
                sys.stdout.flush()
        finally:
            code = broker.stop()
            if code != 0:
                raise SystemExit(f"broker exited with {code}; log in {work / 'broker.log'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
