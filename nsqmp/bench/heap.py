"""Benchmark of the timer's deadline heap, native and pure Python.

Throughput (CPU seconds per million entries, ``time.process_time``), with the entries a
busy broker holds: ``--inflight`` in-flight deadlines (about 60 s ahead) and ``--deferred``
deferred ones (spread over the next hour), two owners (routers), in batches of ``--batch``
entries packed exactly like ARM / DISARM record payloads:

  arm       every entry (deferred first, then in-flight), into a heap growing from 0
  rearm     ``--inflight`` TOUCHes of random in-flight entries (deadline moves ~1 s later)
  disarm    ``--inflight`` FINs: every in-flight entry, in random order
  pop_due   the deferred entries, popped by ``pop_due(now, 65536)`` as the timer does

plus the heap's resident memory (RSS growth while arming, per entry) and the process's
peak RSS. Each implementation runs in its own child process so that its peak RSS is its
own.

Precision: ``--precision`` entries due over the next ``--span`` seconds are armed through
the timer role itself (``nsqmp.timer.role.Timer.on_record``, ARM records of ``--batch``
entries, fed over the first tenth of the span while the loop runs) on a uvloop loop; a
fake endpoint notes when each FIRE record is sent. Lateness = send time - deadline,
reported as p50/p90/p99/max in ms, with the loop wake-ups and the CPU time used.

Prints one JSON line: ``nsqmp bench heap`` (or ``python -m nsqmp.bench.heap``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from array import array
from itertools import zip_longest
from types import SimpleNamespace
from typing import Any

from nsqmp.bench.commands import ShowDefaults
from nsqmp.ipc import records
from nsqmp.timer.heap import NativeDeadlineHeap, PyDeadlineHeap

SEC = 1_000_000_000
POP_BATCH = 65536


def _impl(name: str) -> Any:
    if name == "native":
        if NativeDeadlineHeap is None:
            raise SystemExit("nsqmp._native.DeadlineHeap is not built")
        return NativeDeadlineHeap
    return PyDeadlineHeap


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _pairs(tokens: array, deadlines: array) -> bytes:
    """(token u64, deadline i64) pairs, little-endian: an ARM payload."""
    buf = array("q", bytes(16 * len(tokens)))
    buf[0::2] = array("q", tokens.tobytes())  # reinterpret u64 as i64 bits
    buf[1::2] = deadlines
    if sys.byteorder != "little":  # pragma: no cover
        buf.byteswap()
    return buf.tobytes()


def _tokens(tokens: array) -> bytes:
    if sys.byteorder != "little":  # pragma: no cover
        tokens = array("Q", tokens)
        tokens.byteswap()
    return tokens.tobytes()


def _batches(blob: bytes, entry: int, batch: int) -> list[memoryview]:
    view = memoryview(blob)
    step = entry * batch
    return [view[i : i + step] for i in range(0, len(blob), step)]


def throughput(
    impl: str, inflight: int, deferred: int, batch: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    now = time.monotonic_ns()
    owners = (2, 3)
    # deferred tokens 0..deferred-1, in-flight tokens deferred..deferred+inflight-1
    d_tok = array("Q", range(deferred))
    d_dl = array("q", (now + rng.randrange(3600 * SEC) for _ in range(deferred)))
    f_tok = array("Q", range(deferred, deferred + inflight))
    # in-flight: deadlines 60 s after their delivery tick, ticks 1 ms apart, 512 per tick
    f_dl = array(
        "q", (now + 60 * SEC + (i // 512) * 1_000_000 for i in range(inflight))
    )
    arm_batches = _batches(_pairs(d_tok, d_dl), 16, batch) + _batches(
        _pairs(f_tok, f_dl), 16, batch
    )
    del d_tok, d_dl
    touch = array("Q", (f_tok[rng.randrange(inflight)] for _ in range(inflight)))
    touch_dl = array("q", (f_dl[t - deferred] + SEC for t in touch))
    fin = array("Q", f_tok)
    rng.shuffle(fin)  # type: ignore[arg-type]

    def owner_of(k: int) -> int:
        return owners[k & 1]

    # in-flight entry i goes out in ARM batch first_f + i // batch; re-arm and disarm
    # must name the owner that armed each token, so they are split per owner
    first_f = -(-deferred // batch)
    t_owner = [owner_of(first_f + (t - deferred) // batch) for t in touch]
    rearm_by_owner = _split_by_owner(touch, touch_dl, t_owner, batch)
    fin_owner = [owner_of(first_f + (t - deferred) // batch) for t in fin]
    disarm_by_owner = _split_by_owner(fin, None, fin_owner, batch)
    del t_owner, fin_owner, touch, touch_dl, fin

    # every payload is built: from here on the RSS grows by what the heap holds
    heap = _impl(impl)()
    rss0 = _rss()
    out: dict[str, Any] = {}

    t = time.process_time()
    for k, b in enumerate(arm_batches):
        heap.arm_many(owner_of(k), b)
    out["arm_cpu_s_per_m"] = (time.process_time() - t) / ((inflight + deferred) / 1e6)
    assert len(heap) == inflight + deferred
    heap_bytes = _rss() - rss0
    out["heap_rss_mib"] = round(heap_bytes / 2**20, 1)
    out["heap_bytes_per_entry"] = round(heap_bytes / (inflight + deferred), 1)

    t = time.process_time()
    for owner, b in rearm_by_owner:
        heap.arm_many(owner, b)
    out["rearm_cpu_s_per_m"] = (time.process_time() - t) / (inflight / 1e6)
    assert len(heap) == inflight + deferred

    t = time.process_time()
    removed = 0
    for owner, b in disarm_by_owner:
        removed += heap.disarm_many(owner, b)
    out["disarm_cpu_s_per_m"] = (time.process_time() - t) / (inflight / 1e6)
    assert removed == inflight and len(heap) == deferred
    out["heap_rss_after_disarm_mib"] = round((_rss() - rss0) / 2**20, 1)

    t = time.process_time()
    popped = 0
    far = now + 7200 * SEC
    while len(heap):
        for _, blob in heap.pop_due(far, POP_BATCH):
            popped += len(blob) // 8
    out["pop_due_cpu_s_per_m"] = (time.process_time() - t) / (deferred / 1e6)
    assert popped == deferred
    out["heap_rss_after_drain_mib"] = round((_rss() - rss0) / 2**20, 1)
    out["peak_rss_mib"] = round(_peak_rss() / 2**20, 1)
    for key in list(out):
        if key.endswith("_per_m"):
            out[key] = round(out[key], 4)
    return out


def _split_by_owner(
    tokens: array, deadlines: array | None, owners: list[int], batch: int
):
    """[(owner, payload)] of up to `batch` entries, owners taking turns, order kept per owner."""
    per: dict[int, tuple[array, array]] = {}
    for i, owner in enumerate(owners):
        toks, dls = per.setdefault(owner, (array("Q"), array("q")))
        toks.append(tokens[i])
        if deadlines is not None:
            dls.append(deadlines[i])
    queues = []
    for owner, (toks, dls) in per.items():
        if deadlines is None:
            views = _batches(_tokens(toks), 8, batch)
        else:
            views = _batches(_pairs(toks, dls), 16, batch)
        queues.append([(owner, v) for v in views])
    return [ov for turn in zip_longest(*queues) for ov in turn if ov is not None]


class _Endpoint:
    def __init__(self, on_fire) -> None:
        self.on_fire = on_fire

    def send(self, dst: int, record: bytes) -> None:
        self.on_fire(time.monotonic_ns(), record)


def precision(
    impl: str, count: int, span_s: float, batch: int, seed: int
) -> dict[str, Any]:
    import uvloop

    from nsqmp.timer import role

    rng = random.Random(seed)
    plan = SimpleNamespace(
        timer_slot=9, ring_capacity=8 << 20, routers=1, router_slot=lambda j: 2 + j
    )
    wakeups = [0]

    class CountingTimer(role.Timer):
        def _fire(self) -> None:
            wakeups[0] += 1
            super()._fire()

    timer = CountingTimer(None, plan, 0, [], "")
    timer.heap = _impl(impl)()
    loop = uvloop.new_event_loop()
    timer.loop = loop
    deadlines = array("q", bytes(8 * count))
    late = array("q")

    def on_fire(at: int, rec: bytes) -> None:
        for tok in records.parse_fire(rec):
            late.append(at - deadlines[tok])
        if len(late) >= count:
            loop.stop()

    timer.endpoint = _Endpoint(on_fire)  # type: ignore[assignment]
    span = int(span_s * SEC)
    feed_ticks = 100
    per_tick = -(-count // feed_ticks)
    next_token = [0]

    def feed() -> None:
        # one tick of a router: ARM records of `batch` entries, deadlines from now
        now = time.monotonic_ns()
        first = next_token[0]
        last = min(count, first + per_tick)
        for start in range(first, last, batch):
            toks = array("Q", range(start, min(last, start + batch)))
            dls = array("q", (now + 10_000_000 + rng.randrange(span) for _ in toks))
            for t, d in zip(toks, dls):
                deadlines[t] = d
            timer.on_record(2, records.arm_packed(_pairs(toks, dls)))
        next_token[0] = last
        if last < count:
            loop.call_later(span_s / 10 / feed_ticks, feed)

    cpu = time.process_time()
    wall = time.monotonic()
    loop.call_soon(feed)
    loop.call_later(span_s * 3 + 30, loop.stop)  # safety net
    try:
        loop.run_forever()
    finally:
        timer.close_wake()
        loop.close()
    cpu = time.process_time() - cpu
    wall = time.monotonic() - wall
    assert len(late) == count, (len(late), count)
    ms = sorted(v / 1e6 for v in late)

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, int(p / 100 * len(ms)))], 3)

    return {
        "entries": count,
        "span_s": span_s,
        "late_ms_p50": pct(50),
        "late_ms_p90": pct(90),
        "late_ms_p99": pct(99),
        "late_ms_max": round(ms[-1], 3),
        "early": sum(1 for v in late if v < 0),
        "wakeups": wakeups[0],
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
    }


def run_one(args) -> dict[str, Any]:
    out = {"impl": args.impl}
    out.update(
        throughput(args.impl, args.inflight, args.deferred, args.batch, args.seed)
    )
    if args.precision:
        out["precision"] = precision(
            args.impl, args.precision, args.span, args.batch, args.seed
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nsqmp bench heap", formatter_class=ShowDefaults,
                                description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=("native", "python", "both"), default="both")
    p.add_argument("--inflight", type=int, default=1_000_000)
    p.add_argument("--deferred", type=int, default=1_000_000)
    p.add_argument(
        "--batch", type=int, default=512, help="entries per ARM/DISARM record"
    )
    p.add_argument(
        "--precision",
        type=int,
        default=200_000,
        help="entries of the precision run (0: skip)",
    )
    p.add_argument(
        "--span", type=float, default=5.0, help="seconds over which they fall due"
    )
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.impl != "both":
        print(json.dumps(run_one(args)), flush=True)
        return 0
    result: dict[str, Any] = {
        "bench": "heap",
        "inflight": args.inflight,
        "deferred": args.deferred,
        "batch": args.batch,
    }
    for impl in ("native", "python"):
        child = [a for a in (argv if argv is not None else sys.argv[1:])]
        child += ["--impl", impl]
        code = "import sys; from nsqmp.bench.heap import main; sys.exit(main(sys.argv[1:]))"
        proc = subprocess.run(
            [sys.executable, "-c", code, *child],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            result[impl] = {"error": proc.stderr.strip().splitlines()[-1:]}
            continue
        result[impl] = json.loads(proc.stdout.strip().splitlines()[-1])
        result[impl].pop("impl", None)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
