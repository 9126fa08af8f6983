"""The round-trip floor of `writer PUB, 1 conn`: the same client against a server that
only answers.

One PUB on one connection waits for its OK, so that row measures a round trip over
loopback between two processes more than it measures a broker. This server is the least
a uvloop server in Python can do per PUB: frame the command, answer OK, nothing else (no
file, no ID, no router). Measured in the same run as the broker, it shows how much of
the round trip is the machine's and how much is nsqmp's.

    nsqmp bench floor [--runfor 10] [--size 200]
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import signal
from types import SimpleNamespace

from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.tool import run

_MAGIC = 4
_OK = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"  # size 6, FRAME_RESPONSE, "OK"


class _AnswerOnly(asyncio.Protocol):
    """Answers OK to every complete command that has a body (PUB): line, size, body."""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.buf = bytearray()
        self.magic = False

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
            if nl < 0 or len(buf) < nl + 5:
                break
            end = nl + 5 + int.from_bytes(buf[nl + 1:nl + 5], "big")
            if len(buf) < end:
                break
            pos, oks = end, oks + 1
        del buf[:pos]
        if oks:
            self.transport.write(_OK * oks)


def _serve(ready) -> None:
    import uvloop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_AnswerOnly, "127.0.0.1", 0)
        ready.send(server.sockets[0].getsockname()[1])
        ready.close()
        await asyncio.Event().wait()

    uvloop.run(main())


def measure(runfor: float, size: int = 200) -> dict:
    """`writer PUB, 1 conn` for runfor seconds against the answer-only server."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    server = ctx.Process(target=_serve, args=(send,), daemon=True)
    server.start()
    try:
        if not recv.poll(30):
            raise SystemExit("the answer-only server did not start")
        port = recv.recv()
        return run("writer", SimpleNamespace(nsqd_tcp_address=f"127.0.0.1:{port}", topic="floor",
                                             runfor=runfor, size=size, conns=1, batch_size=1))
    finally:
        if server.pid is not None and server.exitcode is None:
            os.kill(server.pid, signal.SIGTERM)
        server.join(10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(formatter_class=ShowDefaults, prog="nsqmp bench floor")
    p.add_argument("--runfor", type=float, default=10.0)
    p.add_argument("--size", type=int, default=200)
    args = p.parse_args(argv)
    r = measure(args.runfor, args.size)
    print(f"answer-only server, PUB, 1 conn: {r['msgs_per_sec']:,.0f} msgs/s "
          f"({1e6 / max(r['msgs_per_sec'], 1):.1f} us per round trip)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
