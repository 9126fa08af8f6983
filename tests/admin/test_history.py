"""The history sampler's arithmetic on recorded samples (no cluster needed): rates from
per-broker deltas, a broker restart, a series unseen, the window bound."""
from __future__ import annotations

from nsqmp.admin.history import Sampler


def _part(node: str, topic_count: int, depth: int, chan: tuple[int, int, int]) -> tuple[str, dict]:
    return node, {"t": (topic_count, depth, {"c": chan})}


def test_rates_sum_brokers_and_a_restart_adds_nothing():
    s = Sampler(interval=10, window=40)
    s.record(100.0, [_part("a", 100, 5, (100, 5, 90)), _part("b", 50, 0, (50, 0, 50))])
    s.record(110.0, [_part("a", 200, 5, (200, 5, 190)), _part("b", 150, 0, (150, 0, 150))])
    h = s.history("t")
    assert h["ts"] == [100.0, 110.0] and h["depth"] == [5.0, 5.0]
    assert h["publish_rate"] == [None, 20.0] and h["delivery_rate"] == [None, 20.0]
    assert s.rates("t") == (20.0, 20.0)
    s.record(120.0, [_part("a", 300, 5, (300, 5, 290)), _part("b", 10, 0, (10, 0, 10))])  # b restarted
    assert s.history("t")["publish_rate"][-1] == 10.0
    assert s.history("t", "c")["delivery_rate"][-1] == 10.0


def test_unseen_slots_are_null_and_series_expire_after_the_window():
    s = Sampler(interval=10, window=30)
    assert s.slots == 3
    s.record(0.0, [_part("a", 1, 1, (1, 1, 0))])
    s.record(10.0, [("a", {})])
    assert s.history("t")["depth"] == [1.0, None]
    for t in (20.0, 30.0):
        s.record(t, [("a", {})])
    assert s.history("t")["ts"] == [10.0, 20.0, 30.0]  # the ring keeps `slots` samples
    assert s.history("t")["depth"] == [None, None, None]
    s.record(40.0, [("a", {})])
    assert "t" not in s.topics and ("t", "c") not in s.channels  # unseen longer than the window
    assert s.history("t")["ts"] == []
