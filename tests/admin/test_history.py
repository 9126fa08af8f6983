"""The history sampler's arithmetic on recorded /stats (no cluster needed): rates from
per-broker deltas, a broker restart, a series unseen, the window bound, the uint16 codes."""
from __future__ import annotations

import math

from nsqmp.admin.history import Sampler, decode, encode


def _stats(topic_count: int, depth: int, chan: tuple[int, int, int]) -> dict:
    """A broker's /stats with topic t (message_count, depth) and its channel c
    (message_count, depth, in flight)."""
    mc, cdepth, inflight = chan
    return {"topics": [{"topic_name": "t", "message_count": topic_count, "depth": depth, "channels": [
        {"channel_name": "c", "message_count": mc, "depth": cdepth, "in_flight_count": inflight,
         "deferred_count": 0}]}]}


def _close(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        (g is None and w is None) or (g is not None and w is not None and math.isclose(g, w, rel_tol=1e-3))
        for g, w in zip(got, want))


def test_codes_keep_a_charts_precision():
    for v in (0, 1, 2, 7, 123, 99_999, 12_345_678, 1e11):
        assert math.isclose(decode(encode(v)), v, rel_tol=5e-4, abs_tol=1e-3)
        assert decode(encode(v), integer=True) == round(v) or v > 1e4
    assert decode(encode(math.nan)) is None


def test_rates_sum_brokers_and_a_restart_adds_nothing():
    s = Sampler(interval=10, window=40)
    s.record(100.0, [("a", _stats(100, 5, (100, 5, 5))), ("b", _stats(50, 0, (50, 0, 0)))])
    s.record(110.0, [("a", _stats(200, 5, (200, 5, 5))), ("b", _stats(150, 0, (150, 0, 0)))])
    h = s.history("t")
    assert h["ts"] == [100.0, 110.0] and h["depth"] == [5.0, 5.0] and h["channels_depth"] == [5.0, 5.0]
    assert _close(h["publish_rate"], [None, 20.0]) and _close(h["delivery_rate"], [None, 20.0])
    assert _close(list(s.rates("t")), [20.0, 20.0])
    s.record(120.0, [("a", _stats(300, 5, (300, 5, 5))), ("b", _stats(10, 0, (10, 0, 0)))])  # b restarted
    assert math.isclose(s.history("t")["publish_rate"][-1], 10.0, rel_tol=1e-3)
    assert math.isclose(s.history("t", "c")["delivery_rate"][-1], 10.0, rel_tol=1e-3)


def test_unseen_slots_are_null_and_series_expire_after_the_window():
    s = Sampler(interval=10, window=30)
    assert s.slots == 3
    s.record(0.0, [("a", _stats(1, 1, (1, 1, 0)))])
    s.record(10.0, [("a", {"topics": []})])
    assert s.history("t")["depth"] == [1.0, None]
    for t in (20.0, 30.0):
        s.record(t, [("a", {"topics": []})])
    assert s.history("t")["ts"] == [10.0, 20.0, 30.0]  # the ring keeps `slots` samples
    assert s.history("t")["depth"] == [None, None, None]
    s.record(40.0, [("a", {"topics": []})])
    assert "t" not in s.series and ("t", "c") not in s.series  # unseen longer than the window
    assert s.history("t")["ts"] == []
    s.record(50.0, [("a", _stats(5, 0, (5, 0, 0)))])  # back: numbers reused, no stale counters
    s.record(60.0, [("a", _stats(9, 0, (9, 0, 0)))])
    assert _close(s.history("t")["publish_rate"], [None, 0.0, 0.4])  # 40: absent
