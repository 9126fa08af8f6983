"""Choosing among several destinations (nsq_to_http's endpoints, nsq_to_nsq's brokers):
the --mode values, go-hostpool's pool and the --status-every timing lines."""
from __future__ import annotations

import itertools
import logging
import threading
import time

from nsqmp.utils.common import Fatal

log = logging.getLogger("nsqmp.utils")

ROUND_ROBIN, HOSTPOOL, FAN_OUT = "round-robin", "hostpool", "fan-out"
#: --mode value -> the mode it selects (epsilon-greedy is served by the plain host pool)
MODES = {"round-robin": ROUND_ROBIN, "hostpool": HOSTPOOL, "epsilon-greedy": HOSTPOOL, "fan-out": FAN_OUT}


def parse_mode(text: str) -> str:
    """The mode a --mode value names; Fatal for any other."""
    try:
        return MODES[text]
    except KeyError:
        raise Fatal(f"--mode {text!r} is invalid (round-robin, hostpool, epsilon-greedy or fan-out)") from None


class HostPool:
    """go-hostpool's standard pool: hosts in turn, skipping one that failed until its retry
    time (30 s, doubling up to 900 s after each failure of a retry); if every host is
    down, all are tried again."""

    def __init__(self, hosts: list[str], initial_retry: float = 30.0, max_retry: float = 900.0) -> None:
        self.hosts = list(hosts)
        self.initial_retry = initial_retry
        self.max_retry = max_retry
        self._next = 0
        self._dead: dict[str, tuple[float, float]] = {}  # host -> (retry at, current delay)
        self._lock = threading.Lock()

    def get(self) -> str:
        """The next host to use."""
        with self._lock:
            now = time.monotonic()
            for _ in range(len(self.hosts)):
                host = self.hosts[self._next % len(self.hosts)]
                self._next += 1
                dead = self._dead.get(host)
                if dead is None or now >= dead[0]:
                    return host
            self._dead.clear()  # all down: try them all again
            host = self.hosts[self._next % len(self.hosts)]
            self._next += 1
            return host

    def mark(self, host: str, ok: bool) -> None:
        """The outcome of a request to host."""
        with self._lock:
            if ok:
                self._dead.pop(host, None)
                return
            _, delay = self._dead.get(host, (0.0, self.initial_retry / 2))
            delay = min(delay * 2, self.max_retry)
            self._dead[host] = (time.monotonic() + delay, delay)


class RoundRobin:
    """Each destination in turn (nsq's counter modulo the number of destinations)."""

    def __init__(self, hosts: list[str]) -> None:
        self._cycle = itertools.cycle(hosts[1:] + hosts[:1])  # nsq adds 1 before it picks
        self._lock = threading.Lock()

    def get(self) -> str:
        """The next destination."""
        with self._lock:
            return next(self._cycle)

    def mark(self, host: str, ok: bool) -> None:
        """Outcomes change nothing in round-robin."""


class TimerMetrics:
    """bitly/timer_metrics: every `every` requests, one line with their 99th and 95th
    percentile and average durations (0 disables)."""

    def __init__(self, every: int, prefix: str) -> None:
        self.every = every
        self.prefix = prefix
        self.times: list[float] = []
        self._lock = threading.Lock()

    def status(self, start: float) -> None:
        """A request that started at `start` (time.monotonic()) just ended."""
        if self.every <= 0:
            return
        with self._lock:
            self.times.append(time.monotonic() - start)
            if len(self.times) < self.every:
                return
            times, self.times = sorted(self.times), []
        avg = sum(times) / len(times) * 1000
        p95 = times[min(len(times) - 1, int(len(times) * 0.95))] * 1000
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))] * 1000
        log.info("%s finished %d requests - 99th: %.02fms - 95th: %.02fms - avg: %.02fms",
                 self.prefix, len(times), p99, p95, avg)


def per_address_metrics(addresses: list[str], every: int) -> dict[str, TimerMetrics]:
    """One TimerMetrics per destination; disabled when there is only one (as nsq)."""
    if len(addresses) == 1:
        return {addresses[0]: TimerMetrics(0, "")}
    return {a: TimerMetrics(every, f"[{a}]:") for a in addresses}
