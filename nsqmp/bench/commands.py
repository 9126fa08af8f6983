"""`nsqmp bench NAME [options]`: every benchmark, by name, with one line each for `--help`.

Each benchmark is a module of nsqmp.bench with a ``main(argv)``; `writer` and `reader`
share nsqmp.bench.tool, whose main takes the kind as its first argument. The modules
import only when chosen, so `nsqmp bench --help` loads none of them.
"""
from __future__ import annotations

import argparse
import importlib
import sys

#: name -> (module of nsqmp.bench, one-line description), in the order `--help` lists them
BENCHMARKS: dict[str, tuple[str, str]] = {
    "writer": ("tool", "publish as fast as answers come (nsq's bench_writer): PUB or MPUB, N connections"),
    "reader": ("tool", "consume and FIN a topic as fast as it comes (nsq's bench_reader), N connections"),
    "suite": ("suite", "make bench: the standard workloads on fresh brokers, repeated; medians vs nsqd"),
    "latency": ("latency", "publish-to-delivery latency percentiles at a steady publish rate"),
    "timer": ("timer", "how late in-flight timeouts and deferred (DPUB) deliveries fire, end to end"),
    "answers": ("answers", "the broker's CPU per million FIN, TOUCH and REQ"),
    "backlog": ("backlog", "the memory a queued backlog costs the broker, and the time to recover it"),
    "death": ("death", "how fast a SIGKILLed broker stops listening and leaves its lookupds; orphans (--nsqd: nsqd's)"),
    "floor": ("floor", "the round trip of writer PUB against a server that only answers OK (no broker)"),
    "tuning": ("tuning", "each tuning knob's effect on two suite workloads, one knob at a time"),
    "ring": ("ring", "the shared-memory ring between two processes: records/s, syscalls per record"),
    "heap": ("heap", "the timer's deadline heap, native and pure Python: CPU per million entries"),
    "parser": ("parser", "the command parser, native against its Python twin: commands/s"),
    "inflight": ("inflight", "the router's consume-path calls (in-flight map, frames), native and twin"),
    "lookupd": ("lookupd", "nsqlookupd's /lookup latency with many brokers registered"),
    "admin": ("admin", "the admin UI's topic list over many brokers, topics and channels: time and memory"),
    "metrics": ("metrics", "the cost of /metrics and of the statsd push on a broker with many topics and channels"),
    "peek": ("peek", "GET /channel/peek's time on a channel with a million messages queued (p50/p99)"),
    "spark": ("spark", "rows/s through the PySpark source, into the noop and Parquet sinks (spark extra)"),
    "rewind": ("rewind", "a rewind of a topic with millions of retained messages: time to its first delivery"),
}

class ShowDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in `--help`, those without a help text too (argparse's own
    formatter shows it only after a help text)."""

    def _format_action(self, action: argparse.Action) -> str:
        if (not action.help and action.option_strings and action.nargs != 0
                and action.default not in (None, argparse.SUPPRESS)):
            action.help = "(default: %(default)s)"
        return super()._format_action(action)


def usage() -> str:
    """`nsqmp bench --help`: every benchmark with its one line."""
    width = max(map(len, BENCHMARKS)) + 3
    lines = [f"usage: nsqmp bench {{{','.join(BENCHMARKS)}}} [options]", "",
             "Benchmarks and load generators; `nsqmp bench NAME --help` gives each one's options "
             "and their defaults.", ""]
    lines += [f"  {name:<{width}}{text}" for name, (_, text) in BENCHMARKS.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run the benchmark argv[0] with the rest of argv; usage on --help or a wrong name."""
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHMARKS:
        asked = bool(argv) and argv[0] in ("-h", "--help")
        print(usage(), file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    module = importlib.import_module(f"nsqmp.bench.{BENCHMARKS[argv[0]][0]}")
    if module.__name__ == "nsqmp.bench.tool":
        return module.main(argv) or 0
    return module.main(argv[1:]) or 0
