"""The /lookup benchmark runs (tiny parameters; not a timed test)."""
from __future__ import annotations

import json

import pytest

from nsqmp.bench import lookupd as bench
from tests.harness import wait_for


def test_bench_smoke(capsys):
    assert bench.main(["--producers", "7", "--topics", "20", "--replicas", "2", "--channels", "1",
                       "--requests", "300", "--warmup", "10"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["lookupd"] == "started"
    assert (result["producers"], result["topics"], result["registrations"]) == (7, 20, 80)
    assert result["requests"] == 300
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]


def test_bench_against_a_running_lookupd(lookupd, capsys):
    assert bench.main(["--producers", "3", "--topics", "5", "--requests", "20", "--warmup", "0",
                       "--tcp-address", lookupd.tcp_address, "--http-address", lookupd.http_address]) == 0
    assert json.loads(capsys.readouterr().out)["lookupd"] == "external"
    # its brokers were disconnected at the end
    wait_for(lambda: lookupd.get("/nodes") == {"producers": []})


def test_bench_arguments():
    with pytest.raises(SystemExit):
        bench.main(["--tcp-address", "127.0.0.1:1"])
    with pytest.raises(SystemExit):
        bench.main(["--producers", "2", "--replicas", "3"])
