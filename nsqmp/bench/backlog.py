"""`nsqmp bench backlog`: what a queued backlog costs the broker in memory, and recovering it.

Starts a fresh broker (temporary data dir, default flags plus --flag ...), reads the
summed PSS of every broker process, publishes --messages messages of --size bytes by
MPUB (to a topic with a channel, then to a topic without one), waits until /stats shows
them all queued, and reads the PSS again. Then it kills every router with SIGKILL and
times their recovery of the queued messages. Prints one JSON object per case.

    python -m nsqmp.bench.backlog [--messages 1000000] [--size 200] [--flag=--mem-queue-size=100]
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import orjson

from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.suite import memory
from nsqmp.client import wire
from nsqmp.client.sync import Connection
from nsqmp.launcher import Broker


def _pss_kib(broker: Broker) -> int:
    return sum(m.get("pss", 0) for m in memory(broker).values())


def _depth(broker: Broker, topic: str, channel: bool) -> int:
    for t in broker.stats(topic=topic)["topics"]:
        return t["channels"][0]["depth"] if channel and t["channels"] else t["depth"]
    return 0


def _wait_depth(broker: Broker, topic: str, channel: bool, n: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    depth = 0
    while time.monotonic() < deadline:
        try:
            depth = _depth(broker, topic, channel)
        except OSError:
            depth = 0  # the routers are restarting
        if depth >= n:
            break
        time.sleep(0.1)
    return depth


def one(messages: int, size: int, channel: bool, flags: list[str], workdir: Path) -> dict:
    broker = Broker(workdir / "data", *flags, log_path=workdir / "broker.log").start()
    try:
        time.sleep(0.5)
        idle = _pss_kib(broker)
        topic = "backlog"
        if channel:
            with Connection.connect(broker.tcp_address) as c:
                c.identify()
                c.sub(topic, "ch")
        batch = 200
        cmd = wire.mpub(topic, [b"a" * size] * batch)
        sent = 0
        with Connection.connect(broker.tcp_address, timeout=60) as p:
            while sent < messages:
                if messages - sent < batch:
                    cmd = wire.mpub(topic, [b"a" * size] * (messages - sent))
                p.sock.sendall(cmd)
                p.expect_ok()
                sent += min(batch, messages - sent)
        depth = _wait_depth(broker, topic, channel, messages, 120)
        time.sleep(0.5)
        queued = _pss_kib(broker)
        routers = {t: pid for t, pid in broker.children().items() if t.startswith("nsqmp router")}
        router_pss = {t: m.get("pss", 0) for t, m in memory(broker).items() if t in routers}
        started = time.monotonic()
        for pid in routers.values():
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        recovered = _wait_depth(broker, topic, channel, messages, 300)
        took = time.monotonic() - started
        return {
            "channel": channel, "messages": messages, "size": size, "flags": flags,
            "depth": depth, "pss_idle_kib": idle, "pss_queued_kib": queued,
            "growth_bytes_per_message": round((queued - idle) * 1024 / max(1, messages), 1),
            "payload_kib": messages * size // 1024, "router_pss_kib": router_pss,
            "recovered_depth": recovered, "recovery_s": round(took, 2),
            "pss_after_recovery_kib": _pss_kib(broker),
        }
    finally:
        code = broker.stop()
        if code != 0:
            raise SystemExit(f"broker exited with {code}; log in {workdir / 'broker.log'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(formatter_class=ShowDefaults, prog="nsqmp bench backlog")
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=200)
    p.add_argument("--flag", action="append", default=[], help="a broker flag (repeat), e.g. --flag=--mem-queue-size=100")
    args = p.parse_args(argv)
    for channel in (True, False):
        with tempfile.TemporaryDirectory(prefix="nsqmp-backlog-") as tmp:
            result = one(args.messages, args.size, channel, args.flag, Path(tmp))
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
