"""`nsqmp bench tuning`: the effect of each knob, one at a time, on the standard workloads.

For each setting of each knob a fresh broker runs two workloads from the bench suite
(MPUB of 200 on 4 connections, then 2 readers draining what they left) and the row
records both rates and the proportional set size summed over the broker's processes.
Everything else stays at its default. Writes a Markdown table per knob (docs/tuning.md
quotes them) and a JSON file under --out.

    python -m nsqmp.bench.tuning [--runfor 5] [--reps 1] [--only KNOB ...]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.suite import one, write_results

KNOBS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "acceptors": [("1", ("--acceptors", "1")), ("2 (default here)", ("--acceptors", "2")),
                  ("4", ("--acceptors", "4"))],
    "routers": [("1", ("--routers", "1")), ("2 (default)", ("--routers", "2")), ("4", ("--routers", "4"))],
    "ring-size": [("4 MiB (max-msg-size 512 KiB)", ("--ring-size", "4194304", "--max-msg-size", "524288")),
                  ("8 MiB (default)", ("--ring-size", "8388608")),
                  ("32 MiB", ("--ring-size", "33554432"))],
    "max-bytes-per-file": [("8 MiB", ("--max-bytes-per-file", "8388608")),
                           ("100 MiB (default)", ("--max-bytes-per-file", "104857600")),
                           ("1 GiB", ("--max-bytes-per-file", "1073741824"))],
    "sync-every": [("1 (msync per append)", ("--sync-every", "1")),
                   ("100", ("--sync-every", "100")),
                   ("2500 (default)", ("--sync-every", "2500"))],
}


def _pss_mib(result: dict) -> float:
    return sum(m.get("pss", 0) for m in result["memory_kib"].values()) / 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(formatter_class=ShowDefaults, prog="nsqmp bench tuning")
    p.add_argument("--runfor", type=float, default=5.0)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--only", action="append", default=[])
    p.add_argument("--out", default="bench-results")
    args = p.parse_args(argv)
    knobs = {k: v for k, v in KNOBS.items() if not args.only or k in args.only}
    raw: dict = {}
    lines = [f"nsqmp bench tuning, {time.strftime('%Y-%m-%d %H:%M')}, {args.reps} run(s) of "
             f"{args.runfor:g} s per cell, 200-byte messages", ""]
    for knob, settings in knobs.items():
        lines += [f"### {knob}", "", "| setting | MPUB 200 x 4 conns, msgs/s | reader x 2, msgs/s | PSS after writing, MiB |",
                  "|---|---|---|---|"]
        for label, flags in settings:
            w_rates, r_rates, pss = [], [], []
            for _ in range(args.reps):
                with tempfile.TemporaryDirectory(prefix="nsqmp-tune-") as tmp:
                    w = one("writer", "writer", 4, 200, flags, args.runfor, Path(tmp))
                with tempfile.TemporaryDirectory(prefix="nsqmp-tune-") as tmp:
                    r = one("reader", "reader", 2, 0, flags, args.runfor, Path(tmp))
                w_rates.append(w["msgs_per_sec"])
                r_rates.append(r["msgs_per_sec"])
                pss.append(_pss_mib(w))
            raw.setdefault(knob, {})[label] = {"writer": w_rates, "reader": r_rates, "pss_mib": pss}
            lines.append(f"| {label} | {statistics.median(w_rates):,.0f} | {statistics.median(r_rates):,.0f} "
                         f"| {statistics.median(pss):,.0f} |")
            print(lines[-1], flush=True)
        lines.append("")
    write_results(args.out, "tuning-", lines, raw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
