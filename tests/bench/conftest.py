"""Fixtures of the benchmarks' tests: the lookupd ones come from tests/lookupd."""
from __future__ import annotations

from tests.harness import built_module
from tests.lookupd.conftest import lookupd, make_lookupd  # noqa: F401  (fixtures)


def bench_client(name: str):
    """nsqmp.bench._client for a test of its `name` (tests.harness.built_module)."""
    return built_module("nsqmp.bench._client", name)
