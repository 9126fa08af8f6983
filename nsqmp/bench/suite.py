"""`make bench`: the standard workloads, each repeated, reported as medians and ranges.

Every repetition starts a fresh broker (own data dir, port 0) so runs don't inherit each
other's backlog. The reader workload drains the backlog the MPUB writer just left on the
same broker. After the writer, the resident and proportional set sizes of every broker
process are read from /proc.

    python -m nsqmp.bench.suite [--reps 3] [--runfor 10] [--only NAME ...] [--out DIR]
"""
from __future__ import annotations

import argparse
import shlex
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import orjson

from nsqmp.bench import floor
from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.tool import BenchFailed, run
from nsqmp.launcher import Broker

# name, kind, conns, batch size, broker flags, nsqd 1.3.0 on this machine kind (msgs/s), topic
WORKLOADS = [
    ("writer MPUB 200, 1 conn", "writer", 1, 200, (), 129_600, "sub_bench"),
    ("writer MPUB 200, 4 conns", "writer", 4, 200, (), 142_100, "sub_bench"),
    ("writer PUB, 1 conn", "writer", 1, 1, (), 16_700, "sub_bench"),
    # no broker: the same client against a server that only answers OK (nsqmp/bench/floor.py),
    # the machine's round trip that day, for the row above
    ("writer PUB, 1 conn, answer-only server (the round-trip floor, no broker)", "floor", 1, 1, (),
     16_700, ""),
    ("writer PUB, 4 conns", "writer", 4, 1, (), 24_800, "sub_bench"),
    ("reader, 2 conns, draining", "reader", 2, 0, (), 130_200, "sub_bench"),
    ("4 MPUB writers + 2 readers at once (in)", "mixed", 4, 200, (), 177_600, "sub_bench"),
    ("writer MPUB 200, 4 conns, mem-queue-size 0 (everything on disk)", "writer", 4, 200,
     ("--mem-queue-size", "0"), 142_400, "sub_bench"),
    # nsqd's everything-in-memory run (mem-queue-size 1,000,000): the same flags, on a
    # durable topic (files in the page cache, at most 10,000 objects per queue) ...
    ("writer MPUB 200, 4 conns, mem-queue-size 1,000,000 (nsqd's all-in-memory flags)", "writer", 4, 200,
     ("--mem-queue-size", "1000000"), 333_500, "sub_bench"),
    # ... and an #ephemeral topic, nsqmp's memory-only path (1,000,000 held, more dropped)
    ("writer MPUB 200, 4 conns, #ephemeral (memory only)", "writer", 4, 200,
     ("--mem-queue-size", "1000000"), 333_500, "sub_bench#ephemeral"),
]


def memory(broker: Broker) -> dict[str, dict[str, int]]:
    """RSS and PSS (KiB) of the supervisor and each child, by process title."""
    procs = {"nsqmp supervisor": broker.proc.pid, **broker.children()}
    out = {}
    for title, pid in procs.items():
        fields = {}
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss"):
                    fields[key.lower()] = int(rest.split()[0])
        except FileNotFoundError:
            continue
        out[title] = fields
    return out


def _mixed(addr: str, conns: int, batch: int, runfor: float) -> dict:
    """Writers and readers on one topic at the same time; returns the writers' result
    with the readers' rate as msgs_out_per_sec."""
    import threading

    from nsqmp.client.sync import Connection

    with Connection.connect(addr) as c:
        c.identify()
        c.sub("sub_bench", "ch")
    results: dict = {}
    w = SimpleNamespace(nsqd_tcp_address=addr, topic="sub_bench", runfor=runfor, size=200,
                        conns=conns, batch_size=batch)
    r = SimpleNamespace(nsqd_tcp_address=addr, topic="sub_bench", channel="ch", runfor=runfor,
                        size=200, conns=2, rdy=2500, max_messages=0)
    def read() -> None:
        try:
            results["reader"] = run("reader", r)
        except BenchFailed as exc:  # the writers' result says it, after the join
            results["reader_error"] = exc

    t = threading.Thread(target=read)
    t.start()
    results["writer"] = run("writer", w)
    t.join()
    if "reader_error" in results:
        raise results["reader_error"]
    out = results["writer"]
    out["msgs_out_per_sec"] = results["reader"]["msgs_per_sec"]
    return out


def one(name: str, kind: str, conns: int, batch: int, flags, runfor: float, workdir: Path,
        topic: str = "sub_bench") -> dict:
    broker = Broker(workdir / "data", *flags, log_path=workdir / "broker.log").start()
    try:
        addr = broker.tcp_address
        if kind == "mixed":
            result = _mixed(addr, conns, batch, runfor)
            result["memory_kib"] = memory(broker)
            result["name"] = name
            return result
        if kind == "reader":
            # fill a backlog first: as many messages as the reader could take in runfor
            fill = SimpleNamespace(nsqd_tcp_address=addr, topic="sub_bench", runfor=runfor / 2,
                                   size=200, conns=4, batch_size=200)
            # the channel must exist before the writes so it receives them
            from nsqmp.client.sync import Connection

            with Connection.connect(addr) as c:
                c.identify()
                c.sub("sub_bench", "ch")
            run("writer", fill)
            args = SimpleNamespace(nsqd_tcp_address=addr, topic="sub_bench", channel="ch", runfor=runfor,
                                   size=200, conns=conns, rdy=2500, max_messages=0)
        else:
            args = SimpleNamespace(nsqd_tcp_address=addr, topic=topic, runfor=runfor, size=200,
                                   conns=conns, batch_size=batch)
        result = run(kind, args)
        result["memory_kib"] = memory(broker)
        result["name"] = name
        return result
    finally:
        code = broker.stop()
        if code != 0:
            raise BenchFailed(f"broker exited with {code}; log in {workdir / 'broker.log'}")


def parser() -> argparse.ArgumentParser:
    """`nsqmp bench suite`'s options."""
    p = argparse.ArgumentParser(prog="nsqmp bench suite", formatter_class=ShowDefaults,
                                description="The standard workloads (make bench), each on a fresh broker, "
                                            "repeated; a Markdown table of medians and ranges.")
    p.add_argument("--reps", type=int, default=3, help="runs of each workload")
    p.add_argument("--runfor", type=float, default=10.0, help="seconds each run publishes or reads")
    p.add_argument("--only", action="append", default=[], help="substring of workload names to run")
    p.add_argument("--out", default="bench-results", help="folder for the table and the raw figures")
    p.add_argument("--broker-args", default="", metavar="ARGS",
                   help="more options for every broker started, e.g. '--acceptor-nice 5' (tuning)")
    return p


def run_workload(name: str, kind: str, conns: int, batch: int, flags, runfor: float, topic: str) -> dict:
    """One run of one workload; a failure (a connection's error, the broker's exit code)
    comes back as {"name", "error"} so the suite goes on with the next."""
    try:
        if kind == "floor":
            return {**floor.measure(runfor), "memory_kib": {}, "name": name}
        with tempfile.TemporaryDirectory(prefix="nsqmp-bench-") as tmp:
            return one(name, kind, conns, batch, flags, runfor, Path(tmp), topic)
    except (BenchFailed, SystemExit, Exception) as exc:  # noqa: BLE001 - reported by name, then on
        return {"name": name, "error": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    """Run the chosen workloads --reps times; 1 if any run failed (the table says which)."""
    args = parser().parse_args(argv)
    extra = shlex.split(args.broker_args)
    chosen = [w for w in WORKLOADS if not args.only or any(s in w[0] for s in args.only)]
    results: dict[str, list[dict]] = {w[0]: [] for w in chosen}
    failed: list[tuple[int, str, str]] = []  # (rep, workload, error)
    for rep in range(args.reps):
        for name, kind, conns, batch, flags, _, topic in chosen:
            r = run_workload(name, kind, conns, batch, [*flags, *extra], args.runfor, topic)
            if "error" in r:
                failed.append((rep + 1, name, r["error"]))
                print(f"rep {rep + 1}/{args.reps} {name}: FAILED: {r['error']}", flush=True)
                continue
            results[name].append(r)
            slowest = r.get("slowest_answer_ms")
            wait = "" if slowest is None else f" (slowest answer {slowest:,.1f} ms)"
            print(f"rep {rep + 1}/{args.reps} {name}: {r['msgs_per_sec']:,.0f} msgs/s{wait}", flush=True)
    lines = [
        f"nsqmp bench suite, {time.strftime('%Y-%m-%d %H:%M')}, {args.reps} runs of {args.runfor:g} s, 200-byte messages",
        "",
        "| workload | nsqmp msgs/s (median) | range | nsqd 1.3.0 | ratio | broker PSS after (MiB, median) |",
        "|---|---|---|---|---|---|",
    ]
    for name, kind, conns, batch, flags, nsqd, _ in chosen:
        lines += _rows(name, kind, nsqd, results[name])
    if failed:
        lines += ["", "Failed runs:", ""] + [f"- rep {rep}, {name}: {error}" for rep, name, error in failed]
    runs = results[chosen[0][0]] if chosen else []
    if runs:
        last = runs[-1]["memory_kib"]
        lines += ["", f"Memory after '{chosen[0][0]}' (last run), KiB:", "",
                  "| process | RSS | PSS |", "|---|---|---|"]
        for title, m in sorted(last.items()):
            lines.append(f"| {title} | {m.get('rss', 0):,} | {m.get('pss', 0):,} |")
    write_results(args.out, "", lines, {**results, "failed": [list(f) for f in failed]})
    return 1 if failed else 0


def _rows(name: str, kind: str, nsqd: int, runs: list[dict]) -> list[str]:
    """The table's row(s) of one workload: medians and ranges of its runs that worked."""
    if not runs:
        return [f"| {name} | failed (see below) | | {nsqd:,} | | |"]
    rates = [r["msgs_per_sec"] for r in runs]
    med = statistics.median(rates)
    pss = statistics.median(sum(m.get("pss", 0) for m in r["memory_kib"].values()) for r in runs)
    mib = "" if kind == "floor" else f"{pss / 1024:,.0f}"
    rows = [f"| {name} | {med:,.0f} | {min(rates):,.0f} - {max(rates):,.0f} | {nsqd:,} | "
            f"{med / nsqd:.2f}x | {mib} |"]
    if kind == "mixed":
        outs = [r["msgs_out_per_sec"] for r in runs]
        med_out = statistics.median(outs)
        rows.append(f"| {name.replace('(in)', '(out)')} | {med_out:,.0f} | {min(outs):,.0f} - "
                    f"{max(outs):,.0f} | 176,300 | {med_out / 176_300:.2f}x | |")
    return rows


def write_results(out_dir: str, prefix: str, lines: list[str], raw: dict) -> None:
    """Print the Markdown table and keep it, with the raw figures, under out_dir."""
    table = "\n".join(lines) + "\n"
    print()
    print(table)
    out = Path(out_dir)
    out.mkdir(exist_ok=True)
    stamp = prefix + time.strftime("%Y%m%d-%H%M%S")
    (out / f"{stamp}.md").write_text(table)
    (out / f"{stamp}.json").write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    raise SystemExit(main())
