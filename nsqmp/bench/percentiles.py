"""The distribution summary the latency benchmarks print (values in ms)."""
from __future__ import annotations


def percentiles(values) -> dict:
    if not len(values):
        return {"count": 0}
    v = sorted(values)

    def q(p: float) -> float:
        return round(v[min(len(v) - 1, int(p * len(v)))], 3)

    return {"count": len(v), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p99.9": q(0.999),
            "max": round(v[-1], 3), "min": round(v[0], 3)}
