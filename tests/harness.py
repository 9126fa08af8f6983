"""Test helpers: the real broker as a subprocess (nsqmp.launcher) and polling."""
from __future__ import annotations

import time

from nsqmp.launcher import Broker

__all__ = ["Broker", "wait_for"]


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(interval)
