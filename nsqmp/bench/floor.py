"""The floor of the PUB rows: the same client against a server that only answers.

One PUB (or bench_writer's one-message MPUB) on a connection waits for its OK, so the PUB
rows measure round trips over loopback between processes that share the machine's cores
more than they measure a broker. The answer-only server is the least a server can do
per publish: native/bench/floor.c, a C program (compiled here with ``cc`` on first use,
into build/bench-floor/), one thread per connection that frames the commands and writes OK
for each one with a body; no file, no ID, no event loop. Whatever a broker does on top
shows as its distance to this floor (its rate as a fraction of the floor's).

For the mixed row it feeds readers too: a connection that subscribes (SUB, answered OK)
gets messages while fewer than its RDY are in flight, one more for each FIN, with the
same body every time and IDs counting up; nothing is kept or delivered again. The
writers and readers then meet no broker, only each other on the same cores: what the
readers reach there is the most any broker could hand them while those writers publish
unthrottled.

It runs two ways. Its threads block in read at once (``poll_us`` 0), or first look for
the next command without blocking for up to ``poll_us`` (POLL_US, nsqmp's --busy-poll
default): a blocked thread pays a wake-up on every round trip, which nsqmp's acceptors and
Go's runtime both avoid, so on one connection only the polling server is a floor; on more
connections than cores its threads take the CPUs from the client and the blocking one is.

If no C compiler is found the server is a uvloop one in Python (``_AnswerOnly``), which
is slower than the C one and does not poll: the result says which server ran (``server``).

    nsqmp bench floor [--runfor 10] [--conns 1] [--poll-us 0] [--batch-size 1]
                      [--readers 0] [--bench-writer PATH --bench-reader PATH]
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.nsqtools import Client, NsqTools, OwnClient
from nsqmp.bench.proc import with_cpu
from nsqmp.config.options import OPTIONS_BY_NAME, parse_duration
from nsqmp.protocol.frames import message_frame

_ROOT = Path(__file__).resolve().parents[2]
_SOURCE = _ROOT / "native" / "bench" / "floor.c"
_MAGIC = 4
_OK = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"  # size 6, FRAME_RESPONSE, "OK"
_FEED_MAX = 64  # messages in one write at most (as the C server)
# the polling server's look before it blocks: nsqmp's --busy-poll default
POLL_US = round(parse_duration(OPTIONS_BY_NAME["busy-poll"].default) * 1e6)


def program() -> Path | None:
    """The compiled answer-only server (built once per version of its source), or None
    without a compiler or the source."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not _SOURCE.exists():
        return None
    digest = hashlib.sha256(_SOURCE.read_bytes()).hexdigest()[:12]
    exe = _ROOT / "build" / "bench-floor" / f"floor-{digest}"
    if not exe.exists():
        exe.parent.mkdir(parents=True, exist_ok=True)
        tmp = exe.with_suffix(f".{os.getpid()}")
        subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-pthread", "-o", str(tmp), str(_SOURCE)],
                       check=True)
        tmp.replace(exe)
    return exe


class _AnswerOnly(asyncio.Protocol):
    """The Python fallback: answers OK to every complete command that has a body and to
    SUB, and feeds a subscriber up to its RDY (one more message per FIN)."""

    size = 200  # body bytes of the messages fed

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.buf = bytearray()
        self.magic = False
        self.subscribed = False
        self.rdy = self.inflight = self.next_id = 0

    def _feed(self) -> None:
        body, ts = b"m" * self.size, time.time_ns()
        while self.subscribed and self.inflight < self.rdy:
            k = min(self.rdy - self.inflight, _FEED_MAX)
            # first attempt, the ID the number in 16 hex digits (as the C server)
            self.transport.write(b"".join(message_frame(ts, 1, b"%016x" % (self.next_id + i), body)
                                          for i in range(k)))
            self.next_id += k
            self.inflight += k

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.magic:
            if len(buf) < _MAGIC:
                return
            del buf[:_MAGIC]
            self.magic = True
        pos, oks = 0, 0
        while True:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            if buf.startswith(b"FIN ", pos):
                self.inflight = max(0, self.inflight - 1)
            elif buf.startswith(b"RDY ", pos) and buf[pos + 4:nl].isdigit():
                self.rdy = int(buf[pos + 4:nl])
            elif buf.startswith(b"SUB ", pos):
                self.subscribed = True
                oks += 1
            if buf.startswith((b"NOP", b"RDY", b"FIN", b"CLS", b"SUB"), pos):  # no body
                pos = nl + 1
                continue
            if len(buf) < nl + 5:
                break
            end = nl + 5 + int.from_bytes(buf[nl + 1:nl + 5], "big")
            if len(buf) < end:
                break
            pos, oks = end, oks + 1
        del buf[:pos]
        if oks:
            self.transport.write(_OK * oks)
        self._feed()


def _serve_python(ready, size: int) -> None:
    import uvloop

    _AnswerOnly.size = size

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_AnswerOnly, "127.0.0.1", 0)
        ready.send(server.sockets[0].getsockname()[1])
        ready.close()
        await asyncio.Event().wait()

    uvloop.run(main())


class Server:
    """The answer-only server, running: ``port``, ``kind`` ("C", "C, polling N us" or
    "Python"); stop()."""

    def __init__(self, native: bool = True, poll_us: int = 0, size: int = 200) -> None:
        exe = program() if native else None
        self.proc: subprocess.Popen | None = None
        self.py: mp.Process | None = None
        if exe is not None:
            self.kind = f"C, polling {poll_us} us" if poll_us else "C"
            self.proc = subprocess.Popen([str(exe), "0", str(poll_us), str(size)], stdout=subprocess.PIPE,
                                         text=True)
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            if not line.startswith("port "):
                self.stop()
                raise SystemExit(f"the answer-only server did not start: {line!r}")
            self.port = int(line.split()[1])
            return
        self.kind = "Python"
        ctx = mp.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        self.py = ctx.Process(target=_serve_python, args=(send, size), daemon=True)
        self.py.start()
        if not recv.poll(30):
            self.stop()
            raise SystemExit("the answer-only server did not start")
        self.port = recv.recv()

    def stop(self) -> None:
        """End the server this object started, by its PID."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(10)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        if self.py is not None and self.py.pid is not None and self.py.exitcode is None:
            os.kill(self.py.pid, signal.SIGTERM)
            self.py.join(10)


def measure(runfor: float, conns: int = 1, client: Client | None = None, size: int = 200,
            poll_us: int = 0, batch: int = 1, readers: int = 0) -> dict:
    """Publishes of batch messages (one: PUB) on conns connections for runfor seconds
    against the answer-only server (polling poll_us before it blocks), with client
    (nsqmp's bench client, size-byte messages, by default); with readers, that many
    reading connections at the same time (client.mixed: their rate is msgs_out_per_sec)."""
    client = client or OwnClient(size)
    server = Server(poll_us=poll_us, size=client.size)
    addr = f"127.0.0.1:{server.port}"
    try:
        procs = {"floor": server.proc.pid} if server.proc is not None else {}  # the C server's
        if readers:
            result = with_cpu(procs, lambda: client.mixed(addr, "floor", "floor", conns, batch, readers, runfor))
        else:
            result = with_cpu(procs, lambda: client.writer(addr, "floor", conns, batch, runfor))
    finally:
        server.stop()
    return {**result, "server": server.kind, "memory_kib": {}}


def main(argv: list[str] | None = None) -> int:
    """`nsqmp bench floor`: one run, its rate and the time per round trip."""
    p = argparse.ArgumentParser(formatter_class=ShowDefaults, prog="nsqmp bench floor")
    p.add_argument("--runfor", type=float, default=10.0)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--size", type=int, default=200)
    p.add_argument("--poll-us", type=int, default=0,
                   help=f"the server's threads look for the next command this long before they block "
                        f"(the suite's polling floor: {POLL_US})")
    p.add_argument("--batch-size", type=int, default=1, help="messages per publish (1: PUB, more: MPUB)")
    p.add_argument("--readers", type=int, default=0,
                   help="reading connections at the same time, fed by the server (the mixed row's floor)")
    p.add_argument("--bench-writer", metavar="PATH",
                   help="nsq's bench_writer as the client (default: nsqmp bench writer)")
    p.add_argument("--bench-reader", metavar="PATH", default="",
                   help="nsq's bench_reader, for --readers with --bench-writer")
    args = p.parse_args(argv)
    if args.readers and args.bench_writer and not args.bench_reader:
        p.error("--readers with --bench-writer needs --bench-reader")
    client: Client = (NsqTools(args.bench_writer, args.bench_reader, args.size) if args.bench_writer
                      else OwnClient(args.size))
    r = measure(args.runfor, args.conns, client, args.size, args.poll_us, args.batch_size, args.readers)
    what = "one-message publishes" if args.batch_size == 1 else f"publishes of {args.batch_size}"
    line = (f"answer-only server ({r['server']}), {what}, {args.conns} conn(s), {client.name}: "
            f"{r['msgs_per_sec']:,.0f} msgs/s")
    if args.readers:
        line += f" in, {r['msgs_out_per_sec']:,.0f} msgs/s out to {args.readers} reader(s)"
    elif args.batch_size == 1:
        line += f" ({1e6 * args.conns / max(r['msgs_per_sec'], 1):.1f} us per round trip)"
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
