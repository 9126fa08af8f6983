"""`nsqmp bench latency`: publish-to-delivery latency at a steady publish rate.

Starts its own broker (temporary data dir, port 0, default flags plus --flag ones)
unless --nsqd-tcp-address names one. A consumer process subscribes first (--conns
connections, RDY 2500 each, a FIN for every message); then a publisher process sends
an MPUB of rate/1000 messages every millisecond for --runfor seconds, waiting for each
OK. Every body starts with the wall-clock time (ns) its MPUB was sent; latency =
arrival at the consumer - that time, so it counts the publisher's socket, the
acceptor, the segment write, the router, the acceptor again and the consumer's socket.
The first second is warm-up and not counted. Prints a JSON line: the rate reached and
the latency distribution in ms. A benchmark, never a test.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import selectors
import socket
import struct
import tempfile
import time
from array import array
from pathlib import Path

import orjson

from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.percentiles import percentiles
from nsqmp.client import wire

_TS = struct.Struct(">q")
_WARMUP = 1.0


def _connect(addr: str) -> socket.socket:
    host, _, port = addr.rpartition(":")
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(wire.MAGIC)
    return s


def _consume(addr: str, topic: str, conns: int, expect: int, until: float, ready, out) -> None:
    sel = selectors.DefaultSelector()
    readers = {}
    for _ in range(conns):
        s = _connect(addr)
        s.sendall(wire.identify({"feature_negotiation": True, "heartbeat_interval": 60000})
                  + wire.sub(topic, "latency") + wire.rdy(2500))
        readers[s] = wire.FrameReader()
        sel.register(s, selectors.EVENT_READ)
    ready.send(True)
    late = array("d")
    got = 0
    while got < expect and time.time() < until:
        for key, _ in sel.select(0.2):
            s = key.fileobj
            data = s.recv(1 << 20)
            if not data:
                sel.unregister(s)
                continue
            now = time.time_ns()
            fins = []
            for ftype, payload in readers[s].feed(data):
                if ftype == wire.FRAME_RESPONSE and payload == b"_heartbeat_":
                    fins.append(wire.NOP)
                if ftype != wire.FRAME_MESSAGE:
                    continue
                got += 1
                fins.append(b"FIN " + payload[10:26] + b"\n")
                sent, warm = _TS.unpack_from(payload, 26)[0], payload[34]
                if not warm:
                    late.append((now - sent) / 1e6)
            if fins:
                s.sendall(b"".join(fins))
    out.send((got, late.tobytes()))
    for s in readers:
        s.close()


def _publish(addr: str, topic: str, rate: int, size: int, runfor: float, out) -> None:
    s = _connect(addr)
    reader = wire.FrameReader()
    batch = max(1, rate // 1000)
    pad = b"x" * max(0, size - 9)
    sent = 0
    start = time.monotonic()
    for tick in range(int(runfor * 1000)):
        due = start + tick / 1000
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        stamp = _TS.pack(time.time_ns()) + (b"\1" if time.monotonic() - start < _WARMUP else b"\0")
        s.sendall(wire.mpub(topic, [stamp + pad] * batch))
        while True:
            frames = reader.feed(s.recv(1 << 16))
            if frames:
                break
        for ftype, data in frames:
            if ftype != wire.FRAME_RESPONSE or data != b"OK":
                raise SystemExit(f"MPUB failed: {data!r}")
        sent += batch
    out.send((sent, time.monotonic() - start))
    s.close()


def run(addr: str, topic: str, rate: int, size: int, runfor: float, conns: int) -> dict:
    ctx = mp.get_context("fork")
    expect = max(1, rate // 1000) * int(runfor * 1000)
    c_recv, c_send = ctx.Pipe(duplex=False)
    r_recv, r_send = ctx.Pipe(duplex=False)
    consumer = ctx.Process(target=_consume, args=(addr, topic, conns, expect, time.time() + runfor + 30,
                                                  r_send, c_send), daemon=True)
    consumer.start()
    if not r_recv.poll(30):
        raise SystemExit("the consumer did not subscribe")
    r_recv.recv()
    time.sleep(0.2)  # its SUBs reach the router before the first message
    p_recv, p_send = ctx.Pipe(duplex=False)
    publisher = ctx.Process(target=_publish, args=(addr, topic, rate, size, runfor, p_send), daemon=True)
    publisher.start()
    sent, took = p_recv.recv() if p_recv.poll(runfor + 30) else (0, runfor)
    got, late = c_recv.recv() if c_recv.poll(60) else (0, b"")
    for proc in (publisher, consumer):
        proc.join(10)
    values = array("d")
    values.frombytes(late)
    return {"rate_target": rate, "rate_sent": round(sent / took), "sent": sent, "received": got,
            "latency_ms": percentiles(values)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nsqmp bench latency", formatter_class=ShowDefaults,
                                description=__doc__.split("\n")[0])
    p.add_argument("--nsqd-tcp-address", default="", help="a running broker (default: start one)")
    p.add_argument("--topic", default="latency_bench")
    p.add_argument("--rate", type=int, default=50_000, help="messages per second")
    p.add_argument("--size", type=int, default=200, help="message size (bytes, at least 9)")
    p.add_argument("--runfor", type=float, default=10.0, help="seconds")
    p.add_argument("--conns", type=int, default=2, help="consumer connections")
    p.add_argument("--flag", action="append", default=[], help="extra broker flag (own broker only)")
    args = p.parse_args(argv)
    if args.nsqd_tcp_address:
        result = run(args.nsqd_tcp_address, args.topic, args.rate, args.size, args.runfor, args.conns)
    else:
        from nsqmp.launcher import Broker

        with tempfile.TemporaryDirectory(prefix="nsqmp-latency-") as tmp:
            broker = Broker(Path(tmp) / "data", *args.flag, log_path=Path(tmp) / "broker.log").start()
            try:
                result = run(broker.tcp_address, args.topic, args.rate, args.size, args.runfor, args.conns)
            finally:
                broker.stop()
    print(orjson.dumps(result).decode())
    return 0 if result["received"] >= result["sent"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
