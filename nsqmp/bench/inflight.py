"""`nsqmp bench inflight`: the router's per-message work on the consume path, native
against the pure-Python twin, at ``--inflight`` messages in flight.

What a channel does with each message it delivers, in the router's own calls:

  read      ``read_messages`` of a MiB of 200-byte records (the file read-back)
  fly       ``InFlightMap.fly``: a delivery pass of ``--batch`` messages for one consumer
  pack      ``pack_frames``: those messages as one DELIVER record's frames
  finish    ``InFlightMap.finish``: a FIN record's ids, in delivery order
  land      ``InFlightMap.land``: a flight that timed out, back to the ready queue, each
            message looked up (some left the flight before)
  expire    ``InFlightMap.expire``: the same for a flight all of whose messages are still
            in it (their slots are left stale, for the next ``fly`` to take over)

The map is first filled to ``--inflight`` messages in flights of ``--batch``, in random
order (as the timer's bursts find them); then ``--rounds`` rounds each take the oldest
flight, finish it, land it or expire it (in turn), and fly ``--batch`` messages again, so
the map stays at its size. Each map holds its own kind of Message (from the module's
``read_messages``) and Flight, as the router pairs them. Garbage collection is set as in the router (young
generations only, what was built before frozen). Reported in ns per message (wall time,
``time.perf_counter``); CPU-bound and single-threaded. Prints a table, or one JSON line
with ``--json``.
"""
from __future__ import annotations

import argparse
import gc
import random
import struct
import sys
import time
from collections import deque
from typing import Any

from nsqmp.bench.commands import ShowDefaults
from nsqmp.bench.report import emit
from nsqmp.diskqueue.segment import encode
from nsqmp.router import pyinflight, pyreadback

SIZE = 200


def _impls() -> dict[str, tuple[Any, Any, Any]]:
    """name -> (InFlightMap class, module with read_messages and pack_frames, Flight class):
    the native map holds only the native Message and Flight."""
    impls: dict[str, tuple[Any, Any, Any]] = {}
    try:
        from nsqmp import _native
        impls["native"] = (_native.InFlightMap, _native, _native.Flight)
    except ImportError:
        pass
    impls["python"] = (pyinflight.InFlightMap, pyreadback, pyinflight.Flight)
    return impls


def run_one(map_cls: Any, mod: Any, flight_cls: Any, inflight: int, batch: int, rounds: int,
            seed: int = 1) -> dict:
    """One implementation's figures (ns per message per operation), and the map's size after."""
    rng = random.Random(seed)
    ids = [b"%016x" % rng.getrandbits(64) for _ in range(inflight)]
    blob = encode([struct.pack(">QH16s", 1, 0, i) + bytes(SIZE) for i in ids])
    # read: a MiB at a time, as the router's read-back
    chunk = 1 << 20
    started = time.perf_counter()
    entries: list = []
    pos = 0
    while pos < len(blob):
        got, used, _ = mod.read_messages(memoryview(blob)[pos:pos + chunk], pos, inflight, None)
        entries.extend(got)
        pos += used
    read_s = time.perf_counter() - started
    rng.shuffle(entries)
    consumer = object()
    held = map_cls()
    ready: deque = deque(entries)
    flights: deque = deque()
    del entries
    while ready:
        f = flight_cls(0, consumer, 0, 0)
        f.live = held.fly(ready, batch, f, f.members, [])
        flights.append(f)
    gc.collect()
    gc.freeze()
    old = gc.get_threshold()
    gc.set_threshold(5_000, 2, 2**31 - 1)
    t = {"fly": 0.0, "pack": 0.0, "finish": 0.0, "land": 0.0, "expire": 0.0}
    n = {"fly": 0, "pack": 0, "finish": 0, "land": 0, "expire": 0}
    head = bytes(9)
    try:
        for r in range(rounds):
            f = flights.popleft()
            if r % 3 == 0:
                fins = b"".join([m.id for m in f.members[::2]])
                started = time.perf_counter()
                done = held.finish(fins, 0, consumer, [], [])[0]
                t["finish"] += time.perf_counter() - started
                n["finish"] += len(done)
                ready.extend([(m, 0) for m in done])
            else:
                how = "land" if r % 3 == 1 else "expire"
                started = time.perf_counter()
                n[how] += getattr(held, how)(f.members, f, ready)
                t[how] += time.perf_counter() - started
            g = flight_cls(r + 1, consumer, 0, 0)
            out: list = []
            started = time.perf_counter()
            g.live = held.fly(ready, batch, g, g.members, out)
            t["fly"] += time.perf_counter() - started
            n["fly"] += g.live
            started = time.perf_counter()
            i = 0
            while i < len(out):
                _, i = mod.pack_frames(head, out, i, 1 << 20)
            t["pack"] += time.perf_counter() - started
            n["pack"] += len(out)
            flights.append(g)
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
    result: dict[str, Any] = {"read": round(1e9 * read_s / inflight, 1)}
    result.update({k: round(1e9 * t[k] / n[k], 1) if n[k] else None for k in t})
    result["held_after"] = len(held)  # the map stays at its size: nothing lost or doubled
    result["stale_after"] = held.stale  # slots of expired flights not taken over yet
    return result


def run(inflight: int, batch: int, rounds: int) -> dict:
    out: dict[str, Any] = {"inflight": inflight, "batch": batch, "rounds": rounds, "size": SIZE,
                           "ns_per_message": {}}
    for name, (map_cls, mod, flight_cls) in _impls().items():
        out["ns_per_message"][name] = run_one(map_cls, mod, flight_cls, inflight, batch, rounds)
        gc.collect()
    return out


def render(result: dict) -> str:
    ops = ["read", "fly", "pack", "finish", "land", "expire"]
    lines = [f"{result['inflight']:,} in flight, flights of {result['batch']}, {result['size']}-byte "
             f"messages: ns per message", "impl    " + "".join(f"{op:>9}" for op in ops)]
    for name, row in result["ns_per_message"].items():  # (held_after, stale_after: for the tests)
        lines.append(f"{name:8}" + "".join(f"{row[op]:>9}" for op in ops))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nsqmp bench inflight", formatter_class=ShowDefaults,
                                description=__doc__.splitlines()[0])
    p.add_argument("--inflight", type=int, default=1_000_000, help="messages held in flight")
    p.add_argument("--batch", type=int, default=2500, help="messages per flight (a consumer's RDY)")
    p.add_argument("--rounds", type=int, default=200, help="flights finished or landed, and flown again")
    p.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    args = p.parse_args(argv)
    if args.inflight < args.batch or args.batch < 1 or args.rounds < 3:
        p.error("need --inflight >= --batch >= 1 and --rounds >= 3")
    result = run(args.inflight, args.batch, args.rounds)
    emit(result, args.json, render)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
