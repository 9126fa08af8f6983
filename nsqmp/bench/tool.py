"""`nsqmp bench writer` and `nsqmp bench reader`, after nsq's bench_writer/bench_reader.

Each connection runs in its own process (a blocking socket, no event loop) so the client
is not what limits the broker on a small machine. The writer sends one pre-encoded MPUB
(or PUB when --batch-size is 1) and waits for its OK, like bench_writer; the reader sends
RDY 2500 and a FIN for every message, like bench_reader. Prints one line in nsq's format
and, with --json, a JSON object.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from typing import Any

import orjson

from nsqmp.bench.commands import ShowDefaults
from nsqmp.client import wire
from nsqmp.client.sync import Connection

# the bench client's loops in C (nsqmp.bench._client, native/bench/client.c), unless
# NSQMP_PURE_PYTHON=1 or the extension is not built: then their twins
publish_loop: Any = None
fin_replies: Any = wire.py_fin_replies
if os.environ.get("NSQMP_PURE_PYTHON", "") != "1":
    try:
        from nsqmp.bench._client import fin_replies, publish_loop
    except ImportError:
        pass


def _parser(kind: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(formatter_class=ShowDefaults, prog=f"nsqmp bench {kind}")
    p.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    p.add_argument("--topic", default="sub_bench")
    p.add_argument("--runfor", type=float, default=10.0, help="seconds")
    p.add_argument("--size", type=int, default=200, help="message size (bytes)")
    p.add_argument("--conns", type=int, default=1 if kind == "writer" else 2)
    p.add_argument("--json", action="store_true", help="print a JSON result line too")
    if kind == "writer":
        p.add_argument("--batch-size", type=int, default=200, help="messages per MPUB; 1 means PUB")
    else:
        p.add_argument("--channel", default="ch")
        p.add_argument("--rdy", type=int, default=2500)
        p.add_argument("--max-messages", type=int, default=0, help="stop after this many (0: run for --runfor)")
    return p


def py_publish_loop(sock, command: bytes, until: float) -> tuple[int, tuple[int, bytes] | None, float]:
    """Send command and wait for its response until time.monotonic() passes until: (OKs,
    None, slowest), or (OKs, (frame type, data), slowest) of a response that was not OK;
    slowest = the longest wait for an OK (seconds). A heartbeat that comes before the
    response is answered with NOP and skipped (nsqd sends one every interval, however busy
    the connection). Pure-Python twin of native/bench/client.c's publish_loop (which
    takes the socket's fd)."""
    reader = wire.FrameReader()
    frames: list = []
    oks, slowest = 0, 0.0
    now = time.monotonic()
    while now < until:
        sock.sendall(command)
        while True:
            while not frames:
                data = sock.recv(1 << 16)
                if not data:
                    raise ConnectionResetError("the broker closed the connection")
                frames = reader.feed(data)
            ftype, payload = frames.pop(0)
            if ftype == wire.FRAME_RESPONSE and payload == b"_heartbeat_":
                sock.sendall(wire.NOP)
                continue
            break
        if ftype != wire.FRAME_RESPONSE or payload != b"OK":
            return oks, (ftype, payload), slowest
        oks += 1
        after = time.monotonic()
        slowest = max(slowest, after - now)
        now = after
    return oks, None, slowest


def _writer(args, start_at: float, out) -> None:
    conn = Connection.connect(args.nsqd_tcp_address, timeout=30)
    body = b"a" * args.size
    if args.batch_size == 1:
        cmd = wire.pub(args.topic, body)
    else:
        cmd = wire.mpub(args.topic, [body] * args.batch_size)
    sock = conn.sock
    sock.settimeout(None)  # blocking: the loop runs in C with the GIL released
    while time.monotonic() < start_at:
        time.sleep(0.001)
    end = start_at + args.runfor
    if publish_loop is not None:
        oks, error, slowest = publish_loop(sock.fileno(), cmd, end)
    else:
        oks, error, slowest = py_publish_loop(sock, cmd, end)
    if error is not None:
        raise BenchFailed(f"publish failed: {error[1]!r} (after {oks} OKs; slowest answer {slowest * 1000:.1f} ms)")
    out.send(("ok", oks * args.batch_size, time.monotonic() - start_at, slowest))
    conn.close()


def _reader(args, start_at: float, out) -> None:
    conn = Connection.connect(args.nsqd_tcp_address, timeout=30)
    conn.identify(client_id=f"bench-{os.getpid()}")
    conn.send(wire.sub(args.topic, args.channel))
    conn.expect_ok()
    while time.monotonic() < start_at:
        time.sleep(0.001)
    conn.send(wire.rdy(args.rdy))
    sock = conn.sock
    sock.settimeout(1.0)
    buf = bytearray(conn.reader.buf)  # what came with the SUB's OK
    end = start_at + args.runfor
    count = 0
    limit = args.max_messages
    last = time.monotonic()
    while time.monotonic() < end and not (limit and count >= limit):
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not data:
            break
        buf += data
        # the frames in C (native/bench/client.c): a FIN per message, NOP per heartbeat
        replies, messages, consumed, error = fin_replies(buf)
        del buf[:consumed]
        if error is not None:
            raise BenchFailed(f"error frame: {error!r}")
        if replies:
            count += messages
            if messages:
                last = time.monotonic()
            sock.sendall(replies)
    out.send(("ok", count, (last if limit else time.monotonic()) - start_at, None))
    conn.close()


class BenchFailed(RuntimeError):
    """A connection of a writer or reader run failed: the text says how."""


def _connection(target, args, start_at: float, out) -> None:
    """One connection's process: its result, or ("error", what went wrong), through out."""
    try:
        target(args, start_at, out)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as text
        out.send(("error", str(exc) or type(exc).__name__))
        raise SystemExit(1) from None


def run(kind: str, args) -> dict:
    """Run `args.conns` writer or reader connections, each in its own process; raises
    BenchFailed with the first failed connection's error."""
    ctx = mp.get_context("fork")
    start_at = time.monotonic() + 0.5
    pipes, procs = [], []
    target = _writer if kind == "writer" else _reader
    for _ in range(args.conns):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_connection, args=(target, args, start_at, send), daemon=True)
        p.start()
        send.close()  # the child's copy only: its end shows at once as EOF here
        pipes.append(recv)
        procs.append(p)
    total, duration, slowest = 0, 0.0, None
    failures: list[str] = []
    for recv, p in zip(pipes, procs):
        try:
            answer = recv.recv() if recv.poll(args.runfor + 60) else ("error", "no result in time")
        except EOFError:
            answer = ("error", "ended without a result")
        p.join(10)
        if answer[0] == "ok":
            total += answer[1]
            duration = max(duration, answer[2])
            if answer[3] is not None:  # a writer's longest wait for an OK
                slowest = max(slowest or 0.0, answer[3])
        else:
            failures.append(f"{answer[1]} (exit code {p.exitcode})")
    if failures:
        raise BenchFailed(f"{len(failures)} of {args.conns} {kind} connections failed: {failures[0]}")
    duration = duration or args.runfor
    rate = total / duration
    return {
        "kind": kind, "conns": args.conns, "size": args.size,
        "batch_size": getattr(args, "batch_size", None),
        "messages": total, "seconds": round(duration, 3),
        "msgs_per_sec": round(rate, 1), "mb_per_sec": round(rate * args.size / 1e6, 3),
        # a writer's longest wait for an OK: a broker stall shows here (None for readers)
        "slowest_answer_ms": None if slowest is None else round(slowest * 1000, 3),
    }


def main(argv: list[str]) -> int:
    kind = argv[0]
    args = _parser(kind).parse_args(argv[1:])
    try:
        result = run(kind, args)
    except BenchFailed as exc:
        print(f"[bench_{kind}] {exc}", file=sys.stderr)
        return 1
    ops = result["msgs_per_sec"]
    print(f"[bench_{kind}] {time.strftime('%Y/%m/%d %H:%M:%S')} duration: {result['seconds']}s - "
          f"{result['mb_per_sec']:.3f}mb/s - {ops:.3f}ops/s - {1e6 / ops if ops else 0:.3f}us/op")
    if args.json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0
