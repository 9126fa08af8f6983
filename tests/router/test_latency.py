"""The e2e latency window: two halves, the older cleared as time moves on."""
from __future__ import annotations

from nsqmp.router.latency import RESERVOIR, E2eLatency, aggregate


def test_quantiles_over_what_was_recorded():
    q = E2eLatency(600.0, (0.5, 0.99, 1.0))
    for v in range(1, 101):
        q.insert(v * 1000)
    assert q.result() == {"count": 100, "percentiles": [
        {"quantile": 0.5, "value": 50_000}, {"quantile": 0.99, "value": 99_000}, {"quantile": 1.0, "value": 100_000}]}


def test_a_window_forgets_after_two_halves():
    q = E2eLatency(0.2, (0.5,))  # halves of 100 ms
    q.insert(5)
    # two halves over: the window ages by time.monotonic() against last_move, so moving
    # last_move 0.25 s back is 0.25 s passing (the real clock, without waiting for it)
    q.last_move -= 0.25
    assert q.result() == {"count": 0, "percentiles": [{"quantile": 0.5, "value": 0}]}
    q.insert(7)
    assert q.samples[q.current] == [7] and q.samples[q.current ^ 1] == []


def test_memory_is_bounded_and_the_count_is_not():
    q = E2eLatency(600.0, (0.5,))
    for v in range(RESERVOIR * 3):
        q.insert(v)
    assert q.result()["count"] == RESERVOIR * 3
    assert len(q.samples[0]) + len(q.samples[1]) == RESERVOIR


def test_topic_aggregate():
    a, b = E2eLatency(600.0, (1.0,)), E2eLatency(600.0, (1.0,))
    a.insert(10)
    b.insert(30)
    assert aggregate((1.0,), [a, b]) == {"count": 2, "percentiles": [{"quantile": 1.0, "value": 30}]}
    assert aggregate((1.0,), []) == {"count": 0, "percentiles": None}
