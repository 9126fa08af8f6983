"""Fixtures of the benchmarks' tests: the lookupd ones come from tests/lookupd."""
from __future__ import annotations

import pytest

from tests.lookupd.conftest import lookupd, make_lookupd  # noqa: F401  (fixtures)


def bench_client(name: str):
    """nsqmp.bench._client for a test of its `name`: the test fails (never skips) if the
    extension did not build or lacks it."""
    try:
        from nsqmp.bench import _client
    except ImportError as exc:
        pytest.fail(f"nsqmp.bench._client did not build: {exc!r}")
    if not hasattr(_client, name):
        pytest.fail(f"nsqmp.bench._client.{name} is missing")
    return _client
