"""Fixtures of the integration tests: brokers with extra arguments, cleaned up after."""
from __future__ import annotations

import pytest

from tests.harness import Broker


@pytest.fixture
def make_broker(tmp_path):
    """Start a broker with extra flags: ``make_broker("--acceptors", "2")``.

    Every broker started here is stopped after the test (SIGTERM, must exit 0) unless the
    test already stopped or killed it.
    """
    started: list[Broker] = []

    def start(*args: str, name: str = "data") -> Broker:
        b = Broker(tmp_path / f"{name}{len(started)}", *args).start()
        started.append(b)
        return b

    yield start
    failures = []
    for b in started:
        if b.proc is not None and b.proc.poll() is None:
            code = b.stop()
            if code != 0:
                failures.append(f"broker {b.proc.pid} exited {code}:\n{b.log_text()[-4000:]}")
    assert not failures, "\n".join(failures)
