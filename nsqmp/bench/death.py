"""`nsqmp bench death`: how long a SIGKILLed broker still answers the outside.

Per try: start the broker (`nsqmp serve`, or the nsqd binary given with --nsqd) on port 0,
registered with one lookupd started once for the run; start three probes, each its own
process in a tight loop: a TCP connect to the TCP port, an HTTP `GET /ping` on the HTTP
port, a `GET /nodes` on the lookupd that looks for the broker. Once every probe has
succeeded, SIGKILL the supervisor (nsqd's one process) and record, per probe, the time
from the kill to its last success (0 if none came after the kill); also when the
supervisor and the last process of the broker's session were gone (pidfd), to show
where the time goes. --load N runs N busy-loop processes meanwhile. Prints the
distribution per probe in ms (p50/p90/p99/max) and, with --json, one JSON line.
Every try also checks that no process of the broker's session outlived it (an orphan).
A benchmark, never a test.
"""
from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import select
import shutil
import signal
import socket
import struct
import tempfile
import time
from pathlib import Path

import orjson

from nsqmp.bench.percentiles import percentiles
from nsqmp.launcher import Broker, Nsqd
from nsqmp.lookupd.launcher import Lookupd

PROBES = ("tcp", "http", "lookupd")
# how long the probes go on after the kill: far beyond any death time worth reporting
WINDOW = 0.3
_LINGER0 = struct.pack("ii", 1, 0)  # close with RST: no TIME_WAIT left per connect


def _connect(port: int, timeout: float) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER0)
    s.settimeout(timeout)
    try:
        s.connect(("127.0.0.1", port))
    except BaseException:
        s.close()
        raise
    return s


def _try_tcp(port: int) -> bool:
    """A TCP handshake completed with the port."""
    _connect(port, 0.5).close()
    return True


def _try_http(port: int) -> bool:
    """GET /ping answered 200."""
    with _connect(port, 0.5) as s:
        s.sendall(b"GET /ping HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        return s.recv(64).startswith(b"HTTP/1.1 200")


def _try_lookupd(lookupd_port: int, tcp_port: int) -> bool:
    """The lookupd still lists a producer on the broker's TCP port."""
    with _connect(lookupd_port, 0.5) as s:
        s.sendall(b"GET /nodes HTTP/1.0\r\nHost: bench\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    body = orjson.loads(data.partition(b"\r\n\r\n")[2])
    return any(p.get("tcp_port") == tcp_port for p in body.get("producers") or [])


def _probe(kind: str, ports: tuple[int, int, int], killed, warm, out) -> None:
    """Loop until WINDOW after the kill; send (begun, ended) of the last success, in ms
    after the kill (0 if before it). The broker was alive at some instant between the
    two: on loopback the handshake happens inside connect(). Under load the probe itself
    may wait for a core before or after that instant; "begun" is the report's figure
    (a lower bound), "ended" the upper one."""
    tcp_port, http_port, lookupd_port = ports
    attempt = {"tcp": lambda: _try_tcp(tcp_port), "http": lambda: _try_http(http_port),
               "lookupd": lambda: _try_lookupd(lookupd_port, tcp_port)}[kind]
    begun = ended = 0.0
    while True:
        start = time.monotonic()
        try:
            ok = attempt()
        except (OSError, ValueError):
            ok = False
        now = time.monotonic()
        if ok:
            begun, ended = start, now
            warm.set()
        t = killed.value
        if t and now > t + WINDOW:
            break
    out.send((max(0.0, begun - t) * 1e3, max(0.0, ended - t) * 1e3))


def _busy() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        pass


def session_pids(sid: int) -> list[int]:
    """Live (not zombie) processes of session sid."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def _exits(pids: list[int], deadline: float) -> dict[int, float]:
    """pid -> monotonic time its exit was seen (pidfd readable), until deadline."""
    fds = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            pass
    seen: dict[int, float] = {}
    try:
        while fds and time.monotonic() < deadline:
            ready, _, _ = select.select(list(fds), [], [], max(0.0, deadline - time.monotonic()))
            now = time.monotonic()
            for fd in ready:
                seen[fds.pop(fd)] = now
                os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)
    return seen


def one_try(make, lookupd: Lookupd, ctx) -> dict:
    """Start a broker, probe it, SIGKILL its supervisor; the death times in ms."""
    broker = make().start()
    try:
        _wait_registered(lookupd, broker.tcp_port)
        killed = ctx.Value("d", 0.0, lock=False)
        probes = []
        for kind in PROBES:
            warm = ctx.Event()
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_probe, args=(kind, (broker.tcp_port, broker.http_port, lookupd.http_port),
                                                 killed, warm, send), daemon=True)
            p.start()
            probes.append((kind, p, warm, recv))
        for kind, _p, warm, _r in probes:
            if not warm.wait(10):
                raise RuntimeError(f"the {kind} probe never succeeded")
        pids = session_pids(broker.proc.pid)
        t = time.monotonic()
        killed.value = t
        os.kill(broker.proc.pid, signal.SIGKILL)
        exits = _exits(pids, t + 2.0)
        result = {}
        for kind, _p, _w, recv in probes:
            result[kind], result[kind + "_ended"] = recv.recv()
        for _k, p, _w, _r in probes:
            p.join(5)
        broker.proc.wait(5)
        result["supervisor_gone"] = (exits.get(broker.proc.pid, t + 2.0) - t) * 1e3
        result["all_gone"] = (max(exits.values(), default=t) - t) * 1e3 if len(exits) == len(pids) else 2000.0
        orphans = session_pids(broker.proc.pid)
        result["orphans"] = len(orphans)
        for pid in orphans:
            os.kill(pid, signal.SIGKILL)
        return result
    finally:
        if broker.proc.poll() is None:
            broker.kill()
        broker._log.close()


def _wait_registered(lookupd: Lookupd, tcp_port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not _try_lookupd(lookupd.http_port, tcp_port):
        if time.monotonic() > deadline:
            raise RuntimeError("the broker did not register with the lookupd")
        time.sleep(0.01)


def run(args) -> dict:
    """Every try against one target; the distributions (ms) and orphans found."""
    ctx = mp.get_context("fork")
    work = Path(tempfile.mkdtemp(prefix="bench-death-"))
    lookupd = Lookupd(log_path=work / "lookupd.log").start()
    busy = [ctx.Process(target=_busy, daemon=True) for _ in range(args.load)]
    for b in busy:
        b.start()
    flags = ["--lookupd-tcp-address", lookupd.tcp_address, *args.flag]
    tries: list[dict] = []
    try:
        for i in range(args.tries):
            data = work / f"data-{i}"
            if args.nsqd:
                make = functools.partial(Nsqd, args.nsqd, data, *flags, log_path=work / "broker.log")
            else:
                make = functools.partial(Broker, data, *flags, log_path=work / "broker.log")
            tries.append(one_try(make, lookupd, ctx))
            shutil.rmtree(data, ignore_errors=True)
    finally:
        for b in busy:
            b.terminate()
            b.join(5)
        lookupd.stop()
        shutil.rmtree(work, ignore_errors=True)
    keys = PROBES + tuple(k + "_ended" for k in PROBES) + ("supervisor_gone", "all_gone")
    return {"target": args.nsqd or f"nsqmp {args.nsqmp_path or ''}".strip(), "load": args.load, "tries": len(tries),
            "orphans": sum(t["orphans"] for t in tries),
            **{k: percentiles([t[k] for t in tries]) for k in keys}}


def _report(r: dict) -> str:
    lines = [f"{r['target']}, {r['tries']} tries, {r['load']} busy processes, orphans: {r['orphans']}",
             f"  {'ms after SIGKILL':<26}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}"]
    names = {"tcp": "last TCP handshake", "tcp_ended": "  (its connect returned)",
             "http": "last /ping answered", "http_ended": "  (its answer read)",
             "lookupd": "last listed by lookupd", "lookupd_ended": "  (its answer read)",
             "supervisor_gone": "supervisor gone", "all_gone": "every process gone"}
    for key, name in names.items():
        d = r[key]
        lines.append(f"  {name:<26}{d['p50']:>8.2f}{d['p90']:>8.2f}{d['p99']:>8.2f}{d['max']:>8.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nsqmp bench death", description=__doc__.split("\n\n")[0])
    p.add_argument("--tries", type=int, default=30)
    p.add_argument("--load", type=int, default=0, help="busy-loop processes running meanwhile")
    p.add_argument("--nsqd", help="path of an nsqd binary to measure instead of nsqmp")
    p.add_argument("--flag", action="append", default=[], help="one more broker flag (repeatable)")
    p.add_argument("--nsqmp-path", help="run the broker from this source tree (PYTHONPATH), e.g. an "
                                        "older checkout to compare with")
    p.add_argument("--json", action="store_true", help="one JSON line instead of the table")
    args = p.parse_args(argv)
    if args.nsqmp_path:
        # the brokers' (this process has imported its own); `python -m` puts the working
        # directory first on the path, so it must be that tree too
        os.environ["PYTHONPATH"] = args.nsqmp_path
        os.chdir(args.nsqmp_path)
    r = run(args)
    print(orjson.dumps(r).decode() if args.json else _report(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
