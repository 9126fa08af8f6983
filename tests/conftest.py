from __future__ import annotations

import pytest

from tests.harness import Broker


@pytest.fixture
def broker(tmp_path):
    """A running broker with the default process graph, stopped (or killed) after the test."""
    b = Broker(tmp_path / "data").start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        code = b.stop()
        assert code == 0, b.log_text()
