"""`nsqmp bench parser`: parse throughput of the native command parser against its Python twin.

Three read buffers a busy acceptor sees, built once:

  mpub      one MPUB of ``--batch`` messages of ``--size`` bytes: scan, then mpub_spans
            (what cmd_mpub does before the publisher)
  pub       64 KiB of pipelined PUBs of ``--size`` bytes: scan until the buffer is done
  fin_rdy   64 KiB of a consumer's FINs with an RDY every 100: scan until the buffer is done

Both implementations first parse every buffer and must agree; then each workload runs for
``--seconds`` (best of three rounds, ``time.perf_counter``) and the rates are printed as a
table, or as one JSON line with ``--json``. CPU-bound and single-threaded: a quick run.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.report import emit
from nsqmp.client import wire
from nsqmp.protocol import pyparser
from nsqmp.protocol.parser import SCAN_MORE, NativeParser, native_mpub_spans

MAX_MSG = 1024 * 1024
MAX_BODY = 5 * 1024 * 1024
FILL = 64 * 1024


def buffers(size: int, batch: int) -> dict[str, tuple[bytes, int, int]]:
    """name -> (buffer, commands in it, messages in it)."""
    body = b"m" * size
    mpub = wire.mpub("bench", [body] * batch)
    one_pub = wire.pub("bench", body)
    pubs = one_pub * max(1, FILL // len(one_pub))
    ids = [b"%016x" % (0x5F3A000000000000 + i) for i in range(FILL // 22)]
    fin_rdy = b"".join(wire.fin(i) + (wire.rdy(2500) if k % 100 == 99 else b"") for k, i in enumerate(ids))
    n_rdy = len(ids) // 100
    return {
        "mpub": (mpub, 1, batch),
        "pub": (pubs, len(pubs) // len(one_pub), len(pubs) // len(one_pub)),
        "fin_rdy": (fin_rdy, len(ids) + n_rdy, 0),
    }


def _work(impl: str, name: str, buf: bytes) -> Callable[[], Any]:
    """A closure doing the parser's share of the acceptor's work on buf once."""
    if impl == "native":
        scan = NativeParser(MAX_MSG, MAX_BODY).scan
        split = native_mpub_spans
    else:
        scan = pyparser.PyParser(MAX_MSG, MAX_BODY).scan
        split = pyparser.mpub_spans
    if name == "mpub":
        def mpub() -> Any:
            commands, _end, _status, _err = scan(buf, 0)
            _params, off, size, _next = commands[0]
            return commands, split(buf, off, size, MAX_MSG, MAX_BODY)
        return mpub

    def stream() -> Any:
        pos, out = 0, []
        while True:
            commands, pos, status, _err = scan(buf, pos)
            out.append(commands)
            if status != SCAN_MORE:
                return out
    return stream


def _rate(fn: Callable[[], Any], seconds: float) -> float:
    """Calls of fn per second, best of three rounds of about `seconds` each."""
    best = 0.0
    for _ in range(3):
        n, start = 0, time.perf_counter()
        deadline = start + seconds
        while True:
            fn()
            n += 1
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, n / (now - start))
    return best


def run(size: int, batch: int, seconds: float) -> dict[str, Any]:
    if NativeParser is None:
        raise SystemExit("nsqmp._native.Parser is not built")
    result: dict[str, Any] = {"size": size, "batch": batch, "seconds": seconds, "workloads": {}}
    for name, (buf, commands, messages) in buffers(size, batch).items():
        if _work("native", name, buf)() != _work("python", name, buf)():
            raise SystemExit(f"{name}: the native parser and its twin disagree")
        row: dict[str, Any] = {"bytes": len(buf), "commands": commands, "messages": messages}
        for impl in ("native", "python"):
            per_s = _rate(_work(impl, name, buf), seconds)
            row[impl] = {
                "buffers_per_s": round(per_s, 1),
                "commands_per_s": round(per_s * commands),
                "messages_per_s": round(per_s * messages),
                "mb_per_s": round(per_s * len(buf) / 1e6, 1),
            }
        row["speedup"] = round(row["native"]["buffers_per_s"] / row["python"]["buffers_per_s"], 1)
        result["workloads"][name] = row
    return result


def render(result: dict[str, Any]) -> str:
    lines = [f"{'workload':<9} {'impl':<7} {'commands/s':>12} {'messages/s':>12} {'MB/s':>8}  buffer"]
    for name, row in result["workloads"].items():
        for impl in ("native", "python"):
            r = row[impl]
            lines.append(f"{name:<9} {impl:<7} {r['commands_per_s']:>12,} {r['messages_per_s']:>12,} "
                         f"{r['mb_per_s']:>8}  {row['bytes']} B, {row['commands']} commands")
        lines.append(f"{'':<9} native/python: {row['speedup']}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nsqmp bench parser", formatter_class=ShowDefaults,
                                description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=200, help="message size (bytes)")
    p.add_argument("--batch", type=int, default=200, help="messages per MPUB")
    p.add_argument("--seconds", type=float, default=0.3, help="per round; three rounds per figure")
    p.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    args = p.parse_args(argv)
    result = run(args.size, args.batch, args.seconds)
    emit(result, args.json, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
