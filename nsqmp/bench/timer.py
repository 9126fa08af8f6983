"""`nsqmp bench timer`: how late timeouts and deferred deliveries fire, end to end.

Starts its own broker (temporary data dir, port 0), then, at the same time:

- deferred: --deferred DPUBs (pipelined, two publisher processes) due --defer-min to
  --defer-min + --defer-spread seconds after publishing; consumers FIN each on arrival.
  Lateness = arrival - (message timestamp + defer), both wall clock on this machine.
- in flight: --inflight messages delivered to --inflight / 2500 connections with
  msg_timeout --msg-timeout and never finished, so every one of them times out and is
  redelivered, again and again, for --hold seconds (longer if the last deferred message
  arrives later: the load is held until every one of them has come). Lateness = arrival - arrival of the
  previous delivery (attempts - 1, seen by the same consumer process) - msg_timeout.
  The deadline runs from the router's delivery pass, so this is the true lateness plus
  this delivery's transit minus the previous one's: exact when transit is steady, an
  underestimate by up to the previous transit when the previous delivery waited in a
  burst. The first deliveries come as fast as the MPUBs are taken, so the deadlines are
  spread over the publishing time, not all at once.

Both are measured at the client, end to end (timer, router, acceptor, socket, client).
fire_lateness_ms is the routers' own count (/stats?include_timer=true, see
nsqmp.lateness): how long after each deadline the message was back in its queue,
without the delivery and the client's share. "restarted" names any broker process the
supervisor had to restart during the run (a crash).

Reports the lateness distributions (p50/p90/p99/p99.9/max, ms), the timer's and the
routers' CPU over the run (from /proc), and their CPU per million client operations that
start or end a deadline: each DPUB, each delivery (first or again after a timeout) and
each FIN. (The timer sees fewer operations than that: the router arms one entry per
delivery pass and consumer, not one per message.) --py-spy OUT samples router 0
with py-spy meanwhile. Prints a JSON line.
A benchmark, never a test: numbers depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import selectors
import shlex
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

import orjson

from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.percentiles import percentiles
from nsqmp.bench.proc import cpu_seconds, readable_frames, send_all
from nsqmp.client import wire
from nsqmp.launcher import Broker
from nsqmp.layouts import MESSAGE_HEAD

_MAX_RDY = 2500


def _peak_rss_mib(pid: int) -> float | None:
    """Peak resident memory of a live process (VmHWM), MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except FileNotFoundError:
        pass
    return None


def _connect(addr: str, topic: str, channel: str, rdy: int, msg_timeout: int = 0) -> socket.socket:
    host, _, port = addr.rpartition(":")
    s = socket.create_connection((host, int(port)))
    s.sendall(wire.MAGIC)
    ident = {"feature_negotiation": True, "heartbeat_interval": 60000}
    if msg_timeout:
        ident["msg_timeout"] = msg_timeout
    s.sendall(wire.identify(ident) + wire.sub(topic, channel) + wire.rdy(rdy))
    return s


def _consume(addr: str, topic: str, conns: int, rdy: int, msg_timeout: int, fin: bool,
             until: float, expect: int, stop, out) -> None:
    """One process, several connections; sends back lateness samples in ms."""
    sel = selectors.DefaultSelector()
    readers = {}
    for _ in range(conns):
        s = _connect(addr, topic, "c", rdy, msg_timeout)
        s.setblocking(False)
        readers[s] = wire.FrameReader()
        sel.register(s, selectors.EVENT_READ)
    late: list[float] = []
    last_seen: dict[bytes, tuple[int, int]] = {}  # id -> (arrival ns, attempts)
    got = 0
    timeout_ns = msg_timeout * 1_000_000
    while time.time() < until and not stop.is_set() and not (fin and expect and got >= expect):
        for s, frames, now in readable_frames(sel, readers, 0.2):
            replies = []
            for ftype, payload in frames:
                if ftype == wire.FRAME_RESPONSE and payload == b"_heartbeat_":
                    replies.append(wire.NOP)
                if ftype != wire.FRAME_MESSAGE:
                    continue
                got += 1
                ts, attempts, msg_id = MESSAGE_HEAD.unpack_from(payload)
                if fin:
                    (defer_ms,) = struct.unpack_from(">q", payload, MESSAGE_HEAD.size)
                    late.append((now - ts - defer_ms * 1_000_000) / 1e6)
                    replies.append(b"FIN " + msg_id + b"\n")
                else:
                    prev = last_seen.get(msg_id)
                    # only consecutive deliveries: the one in between may have gone to
                    # another consumer process
                    if prev is not None and prev[1] == attempts - 1:
                        late.append((now - prev[0] - timeout_ns) / 1e6)
                    last_seen[msg_id] = (now, attempts)
            if replies:
                send_all(s, b"".join(replies))
    out.send((late, got, len(last_seen)))
    for s in readers:
        s.close()


def _dpub(addr: str, topic: str, count: int, defer_min: float, spread: float, seed: int, out) -> None:
    import random

    rng = random.Random(seed)
    host, _, port = addr.rpartition(":")
    s = socket.create_connection((host, int(port)))
    s.sendall(wire.MAGIC)
    reader = wire.FrameReader()
    sent = 0
    while sent < count:
        n = min(500, count - sent)
        cmds = []
        for _ in range(n):
            defer = int((defer_min + rng.random() * spread) * 1000)
            cmds.append(wire.dpub(topic, defer, struct.pack(">q", defer) + b"x" * 192))
        s.sendall(b"".join(cmds))
        oks = 0
        while oks < n:
            for ftype, payload in reader.feed(s.recv(1 << 16)):
                if ftype == wire.FRAME_ERROR:
                    raise SystemExit(f"DPUB failed: {payload!r}")
                if payload == b"OK":
                    oks += 1
        sent += n
    out.send(sent)
    s.close()


def _niced(nice: int, target, *a) -> None:
    """Run a client process at a lower priority than the broker (see --client-nice)."""
    if nice:
        os.nice(nice)
    target(*a)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nsqmp bench timer", formatter_class=ShowDefaults,
                                description=__doc__.split("\n")[0])
    p.add_argument("--deferred", type=int, default=1_000_000)
    p.add_argument("--inflight", type=int, default=1_000_000)
    p.add_argument("--defer-min", type=float, default=20.0, help="seconds")
    p.add_argument("--defer-spread", type=float, default=20.0, help="seconds")
    p.add_argument("--msg-timeout", type=int, default=10_000, help="ms, for the in-flight messages")
    p.add_argument("--hold", type=float, default=45.0, help="seconds the in-flight load is held")
    p.add_argument("--consumer-procs", type=int, default=2)
    p.add_argument("--inflight-topic", default="tinf")
    p.add_argument("--deferred-topic", default="tdef",
                   help="topics go to routers by crc32(name) %% routers: tinf and tdef share router 0 "
                        "of 2; tdef_b is on router 1")
    p.add_argument("--broker-args", default="", metavar="ARGS",
                   help="more options for the broker, e.g. '--acceptor-nice 5'")
    p.add_argument("--client-nice", type=int, default=10,
                   help="niceness added to the bench's publisher and consumer processes (0: none)")
    p.add_argument("--py-spy", metavar="OUT", help="profile router 0 with py-spy (on PATH, not a "
                   "dependency) for the whole run; collapsed stacks written to OUT")
    args = p.parse_args(argv)
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="nsqmp-timerbench-") as tmp:
        broker = Broker(Path(tmp) / "data", *shlex.split(args.broker_args),
                        log_path=Path(tmp) / "broker.log").start()
        spy = None
        try:
            addr = broker.tcp_address
            children = broker.children()
            timer_pid = children["nsqmp timer"]
            router_pids = [pid for name, pid in children.items() if name.startswith("nsqmp router")]
            cpu0 = cpu_seconds(timer_pid)
            router_cpu0 = sum(cpu_seconds(pid) for pid in router_pids)
            if args.py_spy:
                import shutil
                import subprocess

                exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
                spy = subprocess.Popen([exe, "record", "--pid", str(children["nsqmp router 0"]),
                                        "--format", "raw", "--rate", "200", "--nonblocking",
                                        "--output", args.py_spy], stdout=subprocess.DEVNULL)
            t0 = time.time()
            # every deferred message is waited for (however long publishing took), and the
            # in-flight load is held until then, or --hold, whichever is later
            until = t0 + args.hold + args.defer_min + args.defer_spread + 300  # a bound only
            stop = ctx.Event()
            procs, pipes = [], []

            def spawn(target, *a) -> None:
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_niced, args=(args.client_nice, target, *a, send), daemon=True)
                proc.start()
                procs.append(proc)
                pipes.append((target.__name__, recv))

            # consumers first, so the channels exist before anything is published
            inflight_conns = max(1, -(-args.inflight // _MAX_RDY)) if args.inflight else 0
            per = -(-inflight_conns // args.consumer_procs) if inflight_conns else 0
            for i in range(args.consumer_procs):
                n = min(per, inflight_conns - i * per)
                if n > 0:
                    spawn(_consume, addr, args.inflight_topic, n, _MAX_RDY, args.msg_timeout, False, until, 0, stop)
            n_inflight = len(pipes)
            if args.deferred:
                spawn(_consume, addr, args.deferred_topic, 4, _MAX_RDY, 0, True, until, args.deferred, stop)
            time.sleep(1.0)
            if args.deferred:
                half = args.deferred // 2
                spawn(_dpub, addr, args.deferred_topic, half, args.defer_min, args.defer_spread, 1)
                spawn(_dpub, addr, args.deferred_topic, args.deferred - half, args.defer_min, args.defer_spread, 2)
            if args.inflight:
                with socket.create_connection((addr.rpartition(":")[0], int(addr.rpartition(":")[2]))) as s:
                    s.sendall(wire.MAGIC)
                    reader = wire.FrameReader()
                    body = b"y" * 200
                    for start in range(0, args.inflight, 200):
                        s.sendall(wire.mpub(args.inflight_topic, [body] * min(200, args.inflight - start)))
                        while not reader.feed(s.recv(64)):
                            pass
            results: dict[str, list] = {}
            for name, recv in pipes[n_inflight:]:  # the deferred consumer and the publishers
                if recv.poll(max(0.0, until - time.time())):
                    results.setdefault(name, []).append(recv.recv())
            time.sleep(max(0.0, t0 + args.hold - time.time()))
            stop.set()
            for name, recv in pipes[:n_inflight]:
                if recv.poll(30):
                    results.setdefault(name, []).append(recv.recv())
            cpu = cpu_seconds(timer_pid) - cpu0
            router_cpu = sum(cpu_seconds(pid) for pid in router_pids) - router_cpu0
            elapsed = time.time() - t0
            stats = broker.stats(include_timer="true")
            peak_rss = {name: _peak_rss_mib(pid) for name, pid in children.items()
                        if name.startswith(("nsqmp router", "nsqmp timer"))}
            restarted = sorted(name for name, pid in broker.children().items() if children.get(name) != pid)
        finally:
            if spy is not None:
                spy.send_signal(2)
                spy.wait(60)
            broker.stop()
        for proc in procs:
            proc.join(10)
    inflight_late, deferred_late, fired, delivered_def = [], [], 0, 0
    for late, got, held in results.get("_consume", []):
        if held:  # in-flight consumers remember what they hold
            inflight_late += late
            fired += got - held
        else:
            deferred_late += late
            delivered_def += got
    client_ops = args.deferred + 2 * delivered_def + args.inflight + fired
    out = {
        "deferred": args.deferred, "inflight": args.inflight, "msg_timeout_ms": args.msg_timeout,
        "seconds": round(elapsed, 1),
        "deferred_delivered": delivered_def,
        "deferred_lateness_ms": percentiles(deferred_late),
        "timeout_lateness_ms": percentiles(inflight_late),
        "fire_lateness_ms": stats["nsqmp_fire_lateness"],
        "timeouts_fired": fired,
        "timer_cpu_seconds": round(cpu, 2),
        "timer_cpu_percent": round(100 * cpu / elapsed, 1),
        "router_cpu_seconds": round(router_cpu, 2),
        "router_cpu_percent": round(100 * router_cpu / elapsed, 1),
        "client_ops": client_ops,
        "timer_cpu_seconds_per_million_client_ops": round(cpu / client_ops * 1e6, 3) if client_ops else None,
        "router_cpu_seconds_per_million_client_ops":
            round(router_cpu / client_ops * 1e6, 3) if client_ops else None,
        "peak_rss_mib": peak_rss,
        "restarted": restarted,
        "channels": {t["topic_name"]: {c["channel_name"]: {k: c[k] for k in ("depth", "in_flight_count",
                                                                              "deferred_count", "timeout_count")}
                                       for c in t["channels"]} for t in stats["topics"]},
    }
    print(orjson.dumps(out).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
