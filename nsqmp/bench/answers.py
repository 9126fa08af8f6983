"""`nsqmp bench answers`: the broker's CPU per million FIN, TOUCH and REQ.

For each kind of answer a fresh broker (temporary data dir, port 0) holds --messages
messages of 200 bytes on one channel. --consumer-procs processes of --conns connections
each (RDY 2500) take them all and answer every delivery:

  fin    FIN
  touch  TOUCH, then FIN. The TOUCH gives the message a flight of its own: an ARM at the
         timer, and a DISARM at its FIN.
  req    REQ 0 on the first delivery (back in the queue at once), FIN on the second.

The CPU (user + system, from /proc) of the timer, the routers and the acceptors is read
from the first RDY to the moment /stats shows nothing queued or in flight, and reported
in seconds per million messages. What one TOUCH costs is the touch run's figure less the
fin run's; one REQ likewise, and that includes the message's second delivery. The
consumers run at --client-nice. --reps runs of each kind, alternated; medians. Prints a
table, or one JSON line with --json. A benchmark, never a test.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import selectors
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.proc import cpu_seconds, readable_frames, send_all
from nsqmp.bench.report import emit
from nsqmp.client import wire
from nsqmp.launcher import Broker

KINDS = ("fin", "touch", "req")
ROLES = ("timer", "routers", "acceptors")
_TOPIC, _CHANNEL, _RDY = "answers", "ch", 2500


def _answer(kind: str, attempts: int, msg_id: bytes) -> bytes:
    if kind == "touch":
        return wire.touch(msg_id) + wire.fin(msg_id)
    if kind == "req" and attempts == 1:
        return wire.req(msg_id, 0)
    return wire.fin(msg_id)


def _consume(addr: str, kind: str, conns: int, nice: int, ready, go, stop) -> None:
    """One process, `conns` subscribed connections: RDY when `go` is set, then every
    delivery answered (see the module's docstring) until `stop`."""
    import os

    if nice:
        os.nice(nice)
    host, _, port = addr.rpartition(":")
    sel = selectors.DefaultSelector()
    readers = {}
    for _ in range(conns):
        s = socket.create_connection((host, int(port)))
        s.sendall(wire.MAGIC + wire.identify({"feature_negotiation": True, "heartbeat_interval": 60000})
                  + wire.sub(_TOPIC, _CHANNEL))
        readers[s] = wire.FrameReader()
    ready.set()
    go.wait()
    for s in readers:
        s.sendall(wire.rdy(_RDY))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    while not stop.is_set():
        for s, frames, _ in readable_frames(sel, readers, 0.1):
            replies = []
            for ftype, payload in frames:
                if ftype == wire.FRAME_MESSAGE:
                    attempts = int.from_bytes(payload[8:10], "big")
                    replies.append(_answer(kind, attempts, bytes(payload[10:26])))
                elif ftype == wire.FRAME_RESPONSE and payload == b"_heartbeat_":
                    replies.append(wire.NOP)
            if replies:
                send_all(s, b"".join(replies))
    for s in readers:
        s.close()


def _channel(broker: Broker) -> dict:
    for t in broker.stats(topic=_TOPIC)["topics"]:
        for ch in t["channels"]:
            if ch["channel_name"] == _CHANNEL:
                return ch
    return {}


def _role_cpu(pids: dict[str, list[int]]) -> dict[str, float]:
    return {role: sum(cpu_seconds(pid) for pid in group) for role, group in pids.items()}


def run_one(kind: str, messages: int, procs: int, conns: int, nice: int, timeout: float) -> dict:
    """One kind on a fresh broker: CPU seconds per million messages, per role."""
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="nsqmp-answersbench-") as tmp:
        broker = Broker(Path(tmp) / "data", log_path=Path(tmp) / "broker.log").start()
        workers = []
        stop = ctx.Event()
        try:
            children = broker.children()
            pids = {"timer": [children["nsqmp timer"]],
                    "routers": [p for n, p in children.items() if n.startswith("nsqmp router")],
                    "acceptors": [p for n, p in children.items() if n.startswith("nsqmp acceptor")]}
            go = ctx.Event()
            for _ in range(procs):
                ready = ctx.Event()
                w = ctx.Process(target=_consume, args=(broker.tcp_address, kind, conns, nice, ready, go, stop),
                                daemon=True)
                w.start()
                workers.append(w)
                if not ready.wait(30):
                    raise SystemExit("a consumer process did not subscribe")
            host, _, port = broker.tcp_address.rpartition(":")
            with socket.create_connection((host, int(port))) as s:
                s.sendall(wire.MAGIC)
                reader = wire.FrameReader()
                body = b"x" * 200
                for start in range(0, messages, 200):
                    s.sendall(wire.mpub(_TOPIC, [body] * min(200, messages - start)))
                    while not reader.feed(s.recv(64)):
                        pass
            deadline = time.monotonic() + timeout
            while _channel(broker).get("depth") != messages:
                if time.monotonic() > deadline:
                    raise SystemExit("the messages never showed in /stats")
                time.sleep(0.02)
            cpu0 = _role_cpu(pids)
            started = time.monotonic()
            go.set()
            while True:
                ch = _channel(broker)
                if ch["depth"] == 0 and ch["in_flight_count"] == 0:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"{kind}: not done in {timeout} s: {ch}")
                time.sleep(0.02)
            elapsed = time.monotonic() - started
            cpu1 = _role_cpu(pids)
            finished = sum(c["finish_count"] for c in ch["clients"])
            if finished != messages:
                raise SystemExit(f"{kind}: {finished} of {messages} finished")
        finally:
            stop.set()
            for w in workers:
                w.join(10)
            broker.stop()
    per_m = 1e6 / messages
    out = {role: round((cpu1[role] - cpu0[role]) * per_m, 3) for role in ROLES}
    out["broker"] = round(sum(out[role] for role in ROLES), 3)
    out["seconds"] = round(elapsed, 2)
    out["requeue_count"] = ch["requeue_count"]
    return out


def run(messages: int, reps: int, procs: int, conns: int, nice: int, timeout: float) -> dict:
    runs: dict[str, list[dict]] = {k: [] for k in KINDS}
    for _ in range(reps):
        for kind in KINDS:
            runs[kind].append(run_one(kind, messages, procs, conns, nice, timeout))
    medians = {k: {f: statistics.median(r[f] for r in rs) for f in (*ROLES, "broker", "seconds")}
               for k, rs in runs.items()}
    extra = {"touch": {f: round(medians["touch"][f] - medians["fin"][f], 3) for f in (*ROLES, "broker")},
             "req": {f: round(medians["req"][f] - medians["fin"][f], 3) for f in (*ROLES, "broker")}}
    return {"messages": messages, "reps": reps, "cpu_seconds_per_million": medians,
            "per_million_touch_or_req": extra, "runs": runs}


def render(result: dict) -> str:
    cols = (*ROLES, "broker")
    lines = [f"{result['messages']:,} messages, {result['reps']} runs of each: CPU seconds per million "
             "messages (medians)", f"{'answer':22}" + "".join(f"{c:>11}" for c in (*cols, "seconds"))]
    for kind, row in result["cpu_seconds_per_million"].items():
        label = {"fin": "FIN", "touch": "TOUCH + FIN", "req": "REQ 0 + FIN"}[kind]
        lines.append(f"{label:22}" + "".join(f"{row[c]:>11.3f}" for c in cols) + f"{row['seconds']:>11.2f}")
    for kind, row in result["per_million_touch_or_req"].items():
        label = {"touch": "one TOUCH (less FIN)", "req": "one REQ 0 (less FIN)"}[kind]
        lines.append(f"{label:22}" + "".join(f"{row[c]:>11.3f}" for c in cols))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nsqmp bench answers", formatter_class=ShowDefaults,
                                description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=500_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--consumer-procs", type=int, default=2)
    p.add_argument("--conns", type=int, default=2, help="connections per consumer process")
    p.add_argument("--client-nice", type=int, default=10,
                   help="niceness added to the consumer processes (0: none)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one run may take")
    p.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    args = p.parse_args(argv)
    if args.messages < 1 or args.reps < 1 or args.consumer_procs < 1 or args.conns < 1:
        p.error("--messages, --reps, --consumer-procs and --conns must be at least 1")
    result = run(args.messages, args.reps, args.consumer_procs, args.conns, args.client_nice, args.timeout)
    emit(result, args.json, render)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
