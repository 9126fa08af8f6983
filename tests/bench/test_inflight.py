"""`nsqmp bench inflight` runs end to end (the figures themselves are not asserted)."""
from __future__ import annotations

import subprocess
import sys

import orjson

from nsqmp.bench import inflight as inflightbench


def test_bench_inflight_reports_every_operation_for_both_implementations():
    out = subprocess.run([sys.executable, "-m", "nsqmp", "bench", "inflight", "--inflight", "3000",
                          "--batch", "100", "--rounds", "6", "--json"],
                         check=True, capture_output=True, timeout=120).stdout
    result = orjson.loads(out)
    assert (result["inflight"], result["batch"], result["rounds"]) == (3000, 100, 6)
    rows = result["ns_per_message"]
    assert set(rows) >= {"python"}
    for row in rows.values():
        assert set(row) == {"read", "fly", "pack", "finish", "land", "expire", "held_after", "stale_after"}
        assert all(row[op] > 0 for op in ("read", "fly", "pack", "finish", "land", "expire"))
        assert row["held_after"] == 3000
        assert row["stale_after"] == 0  # every expired flight's messages flew again


def test_bench_inflight_keeps_the_map_at_its_size():
    """Each round finishes, lands or expires one flight and flies as many again: every
    message of the run is accounted for (a map that lost or duplicated entries would show
    here)."""
    for map_cls, mod, flight_cls in inflightbench._impls().values():
        row = inflightbench.run_one(map_cls, mod, flight_cls, inflight=500, batch=50, rounds=4)
        assert row["held_after"] == 500 and row["stale_after"] == 0
        assert None not in (row["finish"], row["land"], row["expire"])


def test_bench_inflight_table_and_bad_arguments():
    out = subprocess.run([sys.executable, "-m", "nsqmp", "bench", "inflight", "--inflight", "600",
                          "--batch", "100", "--rounds", "3"], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    lines = out.splitlines()
    assert lines[1].split() == ["impl", "read", "fly", "pack", "finish", "land", "expire"]
    assert any(line.startswith("python") for line in lines)
    bad = subprocess.run([sys.executable, "-m", "nsqmp", "bench", "inflight", "--inflight", "10", "--batch", "100"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--inflight >= --batch" in bad.stderr
