"""`make bench`: the standard workloads, each repeated, side by side with nsqd when one is given.

Every repetition of every workload starts a fresh broker of each kind (own data dir, port
0; nsqmp/bench/sidebyside.py): nsqmp, nsqd (``--nsqd``) and another nsqmp checkout
(``--baseline``), their order turned by one each repetition (nsqd first on odd ones, nsqmp
first on even ones), so a ratio compares runs of the same hour. With nsq's own tools
(``--bench-writer``/``--bench-reader``) every broker is driven by them, else by nsqmp's
bench client (nsqmp/bench/nsqtools.py). The reader drains the backlog 4 MPUB writers left
on the same broker; broker memory is read from /proc after each run (every process of
the broker summed). The floor rows run the same client against an answer-only server
(nsqmp/bench/floor.py). Without --nsqd the table holds nsqmp's figures alone and says so.
A run from which the hypervisor stole more than STEAL_MAX of the machine is run again at
once, up to --steal-tries runs (every broker alike; the runs set aside are kept).

    python -m nsqmp.bench.suite [--reps 3] [--runfor 10] [--only NAME ...] [--out DIR]
        [--nsqd PATH [--bench-writer PATH --bench-reader PATH]] [--baseline DIR] [--steal-tries 3]
"""
from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import orjson

from nsqmp.bench import floor
from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.nsqtools import Client, NsqTools, OwnClient
from nsqmp.bench.proc import STEAL_MAX, autogroup
from nsqmp.bench.sidebyside import NSQD_FLAGS, Target, memory, order, run_one
from nsqmp.bench.suitetable import render

__all__ = ["WORKLOADS", "main", "memory", "one", "write_results"]

_FLOOR = "answer-only server (the round-trip floor, no broker)"
_POLLING_FLOOR = f"answer-only server polling {floor.POLL_US} us (the round-trip floor, no broker)"
_MIXED = "4 MPUB writers + 2 readers at once (in)"
_FLOOR_MIXED = "answer-only server (the floor, no broker)"
_POLLING_FLOOR_MIXED = f"answer-only server polling {floor.POLL_US} us (the floor, no broker)"


def _w(name: str, kind: str, conns: int, batch: int, flags: tuple[str, ...] = (),
       topic: str = "sub_bench", poll_us: int = 0, readers: int = 0) -> dict:
    return {"name": name, "kind": kind, "conns": conns, "batch": batch, "flags": flags, "topic": topic,
            "poll_us": poll_us, "readers": readers}


# the issue-24 table first (its order), then nsqmp's storage variants
WORKLOADS = [
    _w("writer MPUB 200, 4 conns", "writer", 4, 200),
    _w("writer MPUB 200, 1 conn", "writer", 1, 200),
    _w("writer PUB, 1 conn", "writer", 1, 1),
    # no broker: the same client against a server that only answers OK, for the row above,
    # its threads blocking in read, and polling first (floor.py: which bounds which row)
    _w(f"writer PUB, 1 conn, {_FLOOR}", "floor", 1, 1),
    _w(f"writer PUB, 1 conn, {_POLLING_FLOOR}", "floor", 1, 1, poll_us=floor.POLL_US),
    _w("writer PUB, 4 conns", "writer", 4, 1),
    _w(f"writer PUB, 4 conns, {_FLOOR}", "floor", 4, 1),
    _w(f"writer PUB, 4 conns, {_POLLING_FLOOR}", "floor", 4, 1, poll_us=floor.POLL_US),
    # its rows include the broker's memory after it
    _w("reader, 2 conns, draining", "reader", 2, 0),
    # two rows: in (the writers) and out (the readers)
    _w(_MIXED, "mixed", 4, 200),
    # the same tools against the answer-only server, which also feeds the readers: what
    # they reach with no broker while the writers publish unthrottled (two rows each)
    _w(f"{_MIXED}, {_FLOOR_MIXED}", "floor", 4, 200, readers=2),
    _w(f"{_MIXED}, {_POLLING_FLOOR_MIXED}", "floor", 4, 200, poll_us=floor.POLL_US, readers=2),
    _w("writer MPUB 200, 4 conns, mem-queue-size 0 (everything on disk)", "writer", 4, 200,
       ("--mem-queue-size", "0")),
    # nsqd's everything-in-memory flags; nsqmp keeps a durable topic in files (page cache) ...
    _w("writer MPUB 200, 4 conns, mem-queue-size 1,000,000 (nsqd's all-in-memory flags)", "writer", 4, 200,
       ("--mem-queue-size", "1000000")),
    # ... and an #ephemeral topic in memory only (1,000,000 held, more dropped)
    _w("writer MPUB 200, 4 conns, #ephemeral (memory only)", "writer", 4, 200,
       ("--mem-queue-size", "1000000"), "sub_bench#ephemeral"),
]


def one(name: str, kind: str, conns: int, batch: int, flags, runfor: float, workdir: Path,
        topic: str = "sub_bench") -> dict:
    """One run of a workload on a fresh nsqmp started with flags (nsqmp bench tuning's
    call; workdir is unused: each run has its own temporary one)."""
    result = run_one(Target("nsqmp"), OwnClient(), _w(name, kind, conns, batch, tuple(flags), topic), runfor)
    if "error" in result:
        from nsqmp.bench.tool import BenchFailed

        raise BenchFailed(result["error"])
    return {**result, "name": name}


def parser() -> argparse.ArgumentParser:
    """`nsqmp bench suite`'s options."""
    p = argparse.ArgumentParser(prog="nsqmp bench suite", formatter_class=ShowDefaults,
                                description="The standard workloads (make bench), each on fresh brokers, "
                                            "repeated; side by side with nsqd when --nsqd is given.")
    p.add_argument("--reps", type=int, default=3, help="runs of each workload on each broker")
    p.add_argument("--runfor", type=float, default=10.0, help="seconds each run publishes or reads")
    p.add_argument("--only", action="append", default=[], help="substring of workload names to run")
    p.add_argument("--out", default="bench-results", help="folder for the table and the raw figures")
    p.add_argument("--broker-args", default="", metavar="ARGS",
                   help="more options for every nsqmp started, e.g. '--acceptor-nice 5' (tuning)")
    p.add_argument("--nsqd", metavar="PATH", help="an nsqd binary to run side by side (nsqd 1.3.0: "
                   "../shared/tools/build-nsq.sh builds it)")
    p.add_argument("--bench-writer", metavar="PATH", help="nsq's bench_writer: drives every broker "
                   "(with --bench-reader)")
    p.add_argument("--bench-reader", metavar="PATH", help="nsq's bench_reader (with --bench-writer)")
    p.add_argument("--steal-tries", type=int, default=3, metavar="N",
                   help=f"runs of a workload on a broker at most while the hypervisor steals more than "
                        f"{STEAL_MAX * 100:.0f} %% of the machine from them (1: never run again)")
    p.add_argument("--baseline", metavar="DIR", help="another nsqmp checkout (built in place), run as a "
                   "third broker with PYTHONPATH=DIR: before / after / nsqd in one command")
    return p


def _targets(args) -> list[Target]:
    extra = shlex.split(args.broker_args)
    targets = [Target("nsqd", nsqd=args.nsqd)] if args.nsqd else []
    targets.append(Target("nsqmp", extra=extra))
    if args.baseline:
        targets.append(Target("baseline", checkout=args.baseline, extra=extra))
    return targets


def _say(rep: int, reps: int, name: str, label: str, r: dict) -> None:
    if "error" in r:
        print(f"rep {rep}/{reps} {name}: FAILED: {r['error']} [{label}]", flush=True)
        return
    out = f", out {r['msgs_out_per_sec']:,.0f}" if "msgs_out_per_sec" in r else ""
    slowest = r.get("slowest_answer_ms")
    wait = "" if slowest is None else f" (slowest answer {slowest:,.1f} ms)"
    steal = _stolen(r)
    stolen = f" (steal {steal:.0%}{': run again' if r.get('again') else ''})" if steal >= 0.005 else ""
    print(f"rep {rep}/{reps} {name}: {r['msgs_per_sec']:,.0f} msgs/s{out}{wait}{stolen} [{label}]", flush=True)


def _stolen(r: dict) -> float:
    return r.get("sched", {}).get("steal", 0.0)


def _unstolen(run: Callable[[], dict], say: Callable[[dict], None], tries: int) -> dict:
    """run() again, at once, while the hypervisor took more than STEAL_MAX of the machine
    from it (/proc/stat's steal; at most `tries` runs): on a shared host a run that lost a
    quarter of its CPU measures the neighbours. Every broker's runs get the same rule; the
    runs set aside stay in the result (``stolen_runs``), and the last one counts if none
    was clean."""
    set_aside: list[dict] = []
    while True:
        r = run()
        if "error" in r or _stolen(r) <= STEAL_MAX or len(set_aside) + 1 >= tries:
            return {**r, "stolen_runs": set_aside} if set_aside else r
        say({**r, "again": True})
        set_aside.append(r)


def measure(args, chosen: list[dict], targets: list[Target], client: Client) -> list[dict]:
    """Every run: for each repetition, each workload on each target in that repetition's
    order (the floor once per repetition), each run again while stolen (_unstolen). Each
    run's record carries its workload, rep, target and position in the order."""
    runs: list[dict] = []
    tries = max(1, args.steal_tries)

    def floor_run(w: dict) -> dict:
        try:
            return floor.measure(args.runfor, w["conns"], client, poll_us=w["poll_us"], batch=w["batch"],
                                 readers=w["readers"])
        except Exception as exc:  # noqa: BLE001 - reported with the run, then on
            return {"error": f"{type(exc).__name__}: {exc}"}

    for rep in range(args.reps):
        for w in chosen:
            if w["kind"] == "floor":
                plan = [("floor", partial(floor_run, w))]
            else:
                plan = [(t.label, partial(run_one, t, client, w, args.runfor)) for t in order(targets, rep)]
            for position, (label, run) in enumerate(plan):
                r = _unstolen(run, partial(_say, rep + 1, args.reps, w["name"], label), tries)
                _say(rep + 1, args.reps, w["name"], label, r)
                runs.append({"workload": w["name"], "rep": rep + 1, "target": label,
                             "position": position, **r})
    return runs


def main(argv: list[str] | None = None) -> int:
    """Run the chosen workloads --reps times on every broker; 1 if any run failed (the
    table says which)."""
    p = parser()
    args = p.parse_args(argv)
    if bool(args.bench_writer) != bool(args.bench_reader):
        p.error("--bench-writer and --bench-reader go together")
    targets = _targets(args)
    client: Client = (NsqTools(args.bench_writer, args.bench_reader) if args.bench_writer
                      else OwnClient())
    chosen = [w for w in WORKLOADS if not args.only or any(s in w["name"] for s in args.only)]
    runs = measure(args, chosen, targets, client)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "reps": args.reps, "runfor": args.runfor,
            "client": client.name, "targets": [t.label for t in targets], "nsqd": args.nsqd,
            "nsqd_flags": list(NSQD_FLAGS) if args.nsqd else None, "baseline": args.baseline,
            "broker_args": args.broker_args, "autogroup": autogroup()}
    lines, summary = render(meta, chosen, runs)
    failed = [[r["rep"], r["workload"], r["error"], r["target"]] for r in runs if "error" in r]
    # by workload name: nsqmp's runs (the floor's for a floor row), as before side by side
    own = {w["name"]: [r for r in runs if r["workload"] == w["name"] and "error" not in r
                       and r["target"] in ("nsqmp", "floor")] for w in chosen}
    write_results(args.out, "", lines, {**own, "failed": failed, "meta": meta, "runs": runs,
                                        "summary": summary})
    return 1 if failed else 0


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
