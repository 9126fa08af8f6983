"""The routers' fire-lateness histogram (nsqmp.lateness): buckets, merge, summary."""
from __future__ import annotations

from nsqmp.lateness import FireLateness, summary


def test_percentiles_are_bucket_bounds_never_below_the_value():
    h = FireLateness()
    for ms in range(1, 101):  # 1..100 ms, once each
        h.add(ms * 1_000_000)
    out = summary([h.snapshot()])
    assert out["count"] == 100 and out["max"] == 100.0
    for name, true in (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 100)):
        assert true <= out[name] <= min(true * 1.19, 100.0), (name, out)


def test_routers_snapshots_add_up_and_weights_count():
    a, b = FireLateness(), FireLateness()
    a.add(2_000_000, 2500)  # a flight of 2,500 messages, 2 ms late
    b.add(0)  # on time (and early, clamped to the first bucket)
    b.add(-5_000)
    out = summary([a.snapshot(), b.snapshot()])
    assert out["count"] == 2502 and out["max"] == 2.0
    assert 2.0 <= out["p50"] <= 2.0 * 1.19 and out["p50"] <= out["max"]


def test_nothing_fired_is_a_count_of_zero():
    assert summary([]) == {"count": 0}
    assert summary([FireLateness().snapshot()]) == {"count": 0}
