"""How late deadlines fire: a histogram per kind a router keeps (timeouts, deferred).

A timed-out flight counts once per message it requeues, a deferred message once; the
lateness is how long after its deadline the router took the FIRE and put the message
back in its queue (timer, ring and router backlog included; the delivery pass that
follows in the same loop and the trip to the client are not). A deferred message's
deadline is the start of the millisecond it was due in, whose end its shared timer
entry fires at: up to 1 ms more than from its own due time, never less. Buckets are four per
doubling of microseconds, so a percentile read from them is the bucket's upper bound
(or the largest lateness seen, if lower): at most 19 % above the true value, never below. Routers' snapshots add up.
``/stats?format=json&include_timer=true`` shows the merged summary.
"""
from __future__ import annotations

import math

__all__ = ["STEPS", "FireLateness", "bound_seconds", "merged_counts", "summary"]

STEPS = _STEPS = 4  # buckets per doubling
_BUCKETS = 112  # the last holds everything from 2 ** (111 / 4) us (about 223 s) up
_QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999}


def _bound_ms(i: int) -> float:
    """Upper bound of bucket i in ms."""
    return 2 ** (i / _STEPS) / 1000


def bound_seconds(i: int) -> float:
    """Upper bound of bucket i in seconds (the last bucket has none: it holds the rest)."""
    return 2 ** (i / _STEPS) / 1e6


def merged_counts(snapshots: list[dict]) -> list[int]:
    """Bucket counts of several routers' snapshots added up ([] for none)."""
    return [sum(col) for col in zip(*(s["counts"] for s in snapshots))] if snapshots else []


class FireLateness:
    __slots__ = ("counts", "max_ns")

    def __init__(self) -> None:
        self.counts = [0] * _BUCKETS
        self.max_ns = 0

    def add(self, late_ns: int, n: int = 1) -> None:
        """n messages fired late_ns after their deadline."""
        us = late_ns / 1000
        i = 0 if us <= 1 else min(_BUCKETS - 1, math.ceil(_STEPS * math.log2(us)))
        self.counts[i] += n
        if late_ns > self.max_ns:
            self.max_ns = late_ns

    def snapshot(self) -> dict:
        return {"counts": self.counts, "max_ns": self.max_ns}


def summary(snapshots: list[dict]) -> dict:
    """The merged snapshots as count, percentiles and max, in ms."""
    counts = merged_counts(snapshots)
    total = sum(counts)
    out: dict = {"count": total}
    if not total:
        return out
    top = max(s["max_ns"] for s in snapshots) / 1e6
    for name, q in _QUANTILES.items():
        want, seen = math.ceil(q * total), 0
        for i, c in enumerate(counts):
            seen += c
            if seen >= want:  # the bucket's bound, or the largest value seen if lower
                out[name] = round(min(_bound_ms(i), top), 3)
                break
    out["max"] = round(top, 3)
    return out
