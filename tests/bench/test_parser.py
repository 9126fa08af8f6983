"""`nsqmp bench parser` runs end to end (the figures themselves are not asserted)."""
from __future__ import annotations

import subprocess
import sys

import orjson


def test_bench_parser_reports_both_implementations_on_every_workload():
    out = subprocess.run([sys.executable, "-m", "nsqmp", "bench", "parser", "--seconds", "0.01", "--json"],
                         check=True, capture_output=True, timeout=120).stdout
    result = orjson.loads(out)
    assert set(result["workloads"]) == {"mpub", "pub", "fin_rdy"}
    mpub = result["workloads"]["mpub"]
    assert (mpub["commands"], mpub["messages"]) == (1, 200)
    for row in result["workloads"].values():
        for impl in ("native", "python"):
            assert row[impl]["buffers_per_s"] > 0 and row[impl]["commands_per_s"] > 0
        assert row["speedup"] > 0


def test_bench_parser_table():
    out = subprocess.run([sys.executable, "-m", "nsqmp", "bench", "parser", "--seconds", "0.01",
                          "--size", "64", "--batch", "10"], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["workload", "impl"]
    assert sum(line.startswith(("mpub", "pub", "fin_rdy")) for line in lines) == 6
    assert sum("native/python:" in line for line in lines) == 3
