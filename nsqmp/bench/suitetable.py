"""The table `make bench` prints (nsqmp/bench/suite.py): one row per figure, a column per
broker (medians of its runs), the ratios (of the medians, and in brackets their range
round by round), each broker's runs in repetition order; the floor's distances below it.

A row's figures come from the runs of one workload: ``msgs_per_sec``, the mixed rows' "out"
(``msgs_out_per_sec``) and, after the reader, the broker's memory (RSS and PSS of all its
processes summed, MiB).
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Callable

from nsqmp.bench.proc import STEAL_MAX

_PSS = "broker memory after the reader, PSS (MiB, all processes)"
_RSS = "broker memory after the reader, RSS (MiB, all processes)"


def _mem(key: str) -> Callable[[dict], float]:
    return lambda r: sum(m.get(key, 0) for m in r["memory_kib"].values()) / 1024


def _figures(w: dict) -> list[tuple[str, Callable[[dict], float], bool]]:
    """(row name, how a run gives its figure, is a rate) of each row of workload w."""
    rate = (w["name"], lambda r: r["msgs_per_sec"], True)
    if w["kind"] == "mixed" or w.get("readers"):  # a mixed floor too
        return [rate, (w["name"].replace("(in)", "(out)"), lambda r: r["msgs_out_per_sec"], True)]
    if w["kind"] == "reader":
        return [rate, (_RSS, _mem("rss"), False), (_PSS, _mem("pss"), False)]
    return [rate]


def short(x: float, rate: bool = True) -> str:
    """1.83M, 23.7k, 512; memory in whole MiB."""
    if not rate:
        return f"{x:,.0f}"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    return f"{x / 1e3:.1f}k" if x >= 1e4 else f"{x:,.0f}"


def _ratios(labels: list[str]) -> list[tuple[str, str]]:
    """(numerator, denominator) of the ratio columns."""
    pairs = [("nsqmp", "nsqd")] if "nsqd" in labels else []
    if "baseline" in labels:
        pairs.append(("nsqmp", "baseline"))
    return pairs


def _header(meta: dict) -> list[str]:
    labels = meta["targets"]
    head = [f"nsqmp bench suite, {meta['date']}, {meta['reps']} runs of {meta['runfor']:g} s per workload "
            f"and broker, 200-byte messages, a fresh broker per run; client: {meta['client']}", ""]
    if "nsqd" in labels:
        head += [f"Side by side: {', '.join(labels)}, alternated run by run (the order turns by one "
                 f"each repetition: {labels[0]} first on the first). nsqd: {meta['nsqd']} "
                 f"{' '.join(meta['nsqd_flags'])} (nsqmp's defaults).", ""]
    else:
        head += ["No side-by-side ran: no nsqd was given (make bench NSQD=/path/to/nsqd, built by "
                 "../shared/tools/build-nsq.sh). The figures are nsqmp's alone; no ratio to nsqd.", ""]
    if meta.get("baseline"):
        head += [f"baseline: the nsqmp checkout {meta['baseline']}.", ""]
    if meta.get("autogroup"):
        head += ["The kernel's autogroup is on: every broker runs in a session of its own, so on a "
                 "full machine its processes together get half the CPUs and the tools the other "
                 "half (docs/performance.md, \"Mixed load\").", ""]
    return head


def render(meta: dict, chosen: list[dict], runs: list[dict]) -> tuple[list[str], dict]:
    """The Markdown lines and the medians ({row: {label: median}})."""
    labels, pairs = meta["targets"], _ratios(meta["targets"])
    cols = labels + [f"{a} / {b}" for a, b in pairs]
    lines = _header(meta) + ["| workload | " + " | ".join(cols) + " | runs |",
                             "|---" * (len(cols) + 2) + "|"]
    summary: dict[str, dict[str, float]] = {}
    for w in chosen:
        mine = [r for r in runs if r["workload"] == w["name"] and "error" not in r]
        if w["kind"] == "floor":
            lines += [_floor_row(row, figure, mine, len(labels), len(pairs), summary)
                      for row, figure, _ in _figures(w)]
            continue
        for row, figure, rate in _figures(w):
            by = {lb: [figure(r) for r in mine if r["target"] == lb] for lb in labels}
            med = {lb: statistics.median(v) for lb, v in by.items() if v}
            summary[row] = med
            cells = [short(med[lb], rate) if lb in med else "failed (see below)" for lb in labels]
            cells += [_ratio(mine, figure, a, b, med) for a, b in pairs]
            spread = "; ".join(f"{lb} {', '.join(short(x, rate) for x in v)}" for lb, v in by.items() if v)
            lines.append(f"| {row} | " + " | ".join(cells) + f" | {spread} |")
    lines += _distances(chosen, summary, labels)
    lines += _cpu(chosen, runs, labels)
    lines += _held_back(chosen, runs, labels)
    lines += _cores(chosen, runs, labels)
    again = [(r, s) for r in runs for s in r.get("stolen_runs", ())]
    if again:
        lines += ["", f"Runs set aside because the hypervisor stole more than {STEAL_MAX:.0%} of the machine "
                      "from them (each run again at once; in the JSON as stolen_runs):", ""]
        lines += [f"- rep {r['rep']}, {r['workload']}, {r['target']}: {short(s['msgs_per_sec'])} msgs/s, "
                  f"steal {s['sched']['steal']:.0%}" for r, s in again]
    failed = [r for r in runs if "error" in r]
    if failed:
        lines += ["", "Failed runs:", ""] + [f"- rep {r['rep']}, {r['workload']}: {r['error']} ({r['target']})"
                                           for r in failed]
    return lines, summary


def _ratio(runs: list[dict], figure: Callable[[dict], float], a: str, b: str, med: dict) -> str:
    """a's median over b's, and the range of the ratios round by round (a repetition's two
    runs, next to each other in time): "2.26x (1.90-2.60)"."""
    if a not in med or b not in med or not med[b]:
        return ""
    by_rep: dict[int, dict[str, float]] = {}
    for r in runs:
        by_rep.setdefault(r["rep"], {})[r["target"]] = figure(r)
    rounds = [f[a] / f[b] for f in by_rep.values() if a in f and f.get(b)]
    spread = f" ({min(rounds):.2f}-{max(rounds):.2f})" if len(rounds) > 1 else ""
    return f"{med[a] / med[b]:.2f}x{spread}"


def _floor_row(name: str, figure: Callable[[dict], float], runs: list[dict], nlabels: int, nratios: int,
               summary: dict) -> str:
    """The floor's median in every broker column: the same server bounds each of them."""
    if not runs:
        return f"| {name} | failed (see below) |" + " |" * (nlabels + nratios)
    rates = [figure(r) for r in runs]
    med = statistics.median(rates)
    summary[name] = {"floor": med}
    server = runs[0].get("server", "C")
    return (f"| {name} | " + " | ".join([short(med)] * nlabels + [""] * nratios) +
            f" | floor ({server} server) {', '.join(short(x) for x in rates)} |")


def _distances(chosen: list[dict], summary: dict, labels: list[str]) -> list[str]:
    """Each broker's rate as a fraction of the floor of its row (the PUB rows, the mixed ones)."""
    out = []
    floors = [name for w in chosen if w["kind"] == "floor" for name, _, _ in _figures(w) if name in summary]
    for name in floors:
        row, _, server = name.partition(", answer-only server")
        server = server.split(" (")[0].strip() or "blocking"  # "polling 50 us", or the blocking one
        med = summary[name]["floor"]
        if row in summary and med:
            parts = [f"{lb} {summary[row][lb] / med:.2f}" for lb in labels if lb in summary[row]]
            out.append(f"- {row}: the answer-only floor ({server}) {med:,.0f} msgs/s; of it: {', '.join(parts)}")
    return ["", "Distance to the floor (a broker's rate as a fraction of the floor's, same client):", ""] + out \
        if out else []


def _per_run_table(chosen: list[dict], runs: list[dict], labels: list[str], key: str,
                   cell: Callable[[list[dict]], str], heading: str) -> list[str]:
    """A table of one cell per workload and broker, made by cell() from the runs' `key`
    entries (the floor's one server's runs in every column, as in the rates table); no
    lines if no run has the key."""
    rows = []
    for w in chosen:
        mine = [r for r in runs if r["workload"] == w["name"] and key in r]
        cells = []
        for lb in labels:
            per = [r[key] for r in mine if r["target"] == lb or w["kind"] == "floor"]
            cells.append(cell(per) if per else "")
        if any(cells):
            rows.append(f"| {w['name']} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["", heading, "", "| workload | " + " | ".join(labels) + " |",
            "|---" * (len(labels) + 1) + "|"] + rows


def _cpu(chosen: list[dict], runs: list[dict], labels: list[str]) -> list[str]:
    """CPU per message moved, broker and client (medians), and the rate they allow on this
    machine's cores: where the client and the broker share the cores, no broker passes
    cores / (its CPU + its client's) per message, whatever its code."""
    cores = os.cpu_count() or 1

    def cell(per: list[dict]) -> str:
        b = statistics.median(p["broker"] for p in per)
        c = statistics.median(p["client"] for p in per)
        return f"{b:.2f} / {c:.2f} ({short(cores * 1e6 / (b + c))})" if b + c > 0 else ""

    return _per_run_table(
        chosen, runs, labels, "cpu_us_per_msg", cell,
        f"CPU per message moved (published + delivered), microseconds, medians: broker (all its "
        f"processes) / client (the bench tools), and in brackets the rate both together allow on "
        f"this machine's {cores} cores, cores / (broker + client):")


def _cores(chosen: list[dict], runs: list[dict], labels: list[str]) -> list[str]:
    """The cores each of the broker's processes and the bench tools used over a run
    (medians; a process under 0.01 left out): on a full machine, where the CPUs went."""

    def cell(per: list[dict]) -> str:
        titles = list(dict.fromkeys(t for p in per for t in p))
        medians = {t: statistics.median(p.get(t, 0.0) for p in per) for t in titles}
        shown = [f"{t.removeprefix('nsqmp ')} {c:.2f}" for t, c in medians.items()
                 if t != "tools" and c >= 0.01]
        return ", ".join(shown) + f"; tools {medians.get('tools', 0.0):.2f}"

    return _per_run_table(
        chosen, runs, labels, "cores", cell,
        "Cores used over the run (medians): each of the broker's processes (/proc/<pid>/stat), "
        "and the bench tools together (their rusage once they exit). With the kernel's "
        "autogroup on, a full machine gives the broker's processes and the tools about half "
        "the cores each.")


def _held_back(chosen: list[dict], runs: list[dict], labels: list[str]) -> list[str]:
    """What held each run back (proc._sched, medians): the machine's idle share, and the
    server's thread that was runnable longest, with the shares of the run it ran and it
    waited for a CPU. That thread is named as most runs found it."""

    def cell(per: list[dict]) -> str:
        idle = statistics.median(p["idle"] for p in per)
        # runs from before steal was read (their JSON re-rendered) have none
        steals = [p["steal"] for p in per if "steal" in p]
        machine = f"idle {idle:.0%}" + (f", steal {max(steals):.0%}" if steals and max(steals) >= 0.005 else "")
        names = [p["thread"] for p in per if "thread" in p]
        if not names:
            return machine
        name = statistics.mode(names)
        ran = statistics.median(p["ran"] for p in per if p.get("thread") == name)
        waited = statistics.median(p["waited"] for p in per if p.get("thread") == name)
        return f"{machine}; {name.removeprefix('nsqmp ')} ran {ran:.0%}, waited {waited:.0%}"

    return _per_run_table(
        chosen, runs, labels, "sched", cell,
        "What held the runs back (medians): the share of the run the machine's CPUs sat idle "
        "(and the most the hypervisor stole from it in one run, when any: /proc/stat's steal), "
        "and the server's thread that was runnable longest, with the shares of the run it "
        "ran and it waited for a CPU (/proc/<pid>/task/<tid>/schedstat). A thread runnable "
        "nearly throughout while CPUs sat idle is the limit; a machine with no idle time is.")
