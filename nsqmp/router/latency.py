"""End-to-end processing latency of a channel (--e2e-processing-latency-percentile).

nsqd (internal/quantile) records, at every FIN, the time from the message's publish to
its FIN, in two streams that each cover half of --e2e-processing-latency-window-time:
when the current half is over the older stream is cleared and becomes the current one,
so /stats reports about the last window. nsqd's streams are approximate (CKMS targeted
quantiles); here each half keeps a uniform reservoir of at most RESERVOIR samples and the
quantiles are exact over what is kept. `count` is every FIN in the two halves.
"""
from __future__ import annotations

import math
import random
import time

RESERVOIR = 2048


class E2eLatency:
    def __init__(self, window_s: float, percentiles: tuple[float, ...]) -> None:
        self.percentiles = percentiles
        self.half = window_s / 2
        self.samples: list[list[int]] = [[], []]
        self.counts = [0, 0]
        self.current = 0
        self.last_move = time.monotonic()

    def _age(self) -> None:
        now = time.monotonic()
        while now > self.last_move + self.half:
            self.current ^= 1
            self.samples[self.current] = []
            self.counts[self.current] = 0
            self.last_move += self.half

    def insert(self, latency_ns: int) -> None:
        self._age()
        i = self.current
        self.counts[i] += 1
        kept = self.samples[i]
        if len(kept) < RESERVOIR:
            kept.append(latency_ns)
        else:
            j = random.randrange(self.counts[i])
            if j < RESERVOIR:
                kept[j] = latency_ns

    def _parts(self) -> tuple[int, list[int]]:
        self._age()
        return sum(self.counts), self.samples[0] + self.samples[1]

    def result(self) -> dict:
        count, samples = self._parts()
        return result_of(self.percentiles, count, samples)


def result_of(percentiles: tuple[float, ...], count: int, samples: list[int]) -> dict:
    """nsqd's quantile.Result: {"count", "percentiles": [{"quantile", "value" ns}]}; a value
    is 0 while there is no sample."""
    ordered = sorted(samples)
    out = []
    for p in percentiles:
        value = 0
        if ordered:
            rank = min(len(ordered), max(1, math.ceil(p * len(ordered))))
            value = ordered[rank - 1]
        out.append({"quantile": p, "value": value})
    return {"count": count, "percentiles": out}


def aggregate(percentiles: tuple[float, ...], streams: list[E2eLatency]) -> dict:
    """A topic's figure: its channels' streams merged (nsqd's AggregateChannelE2eProcessingLatency);
    without any, nsqd's empty Result."""
    if not streams:
        return {"count": 0, "percentiles": None}
    count, samples = 0, []
    for s in streams:
        c, kept = s._parts()
        count += c
        samples += kept
    return result_of(percentiles, count, samples)
