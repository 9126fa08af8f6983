"""`nsqmp bench admin` runs end to end on a tiny cluster and reports its figures."""
from __future__ import annotations

import subprocess
import sys

import orjson


def test_bench_admin_small():
    done = subprocess.run([sys.executable, "-m", "nsqmp", "bench", "admin", "--brokers", "2", "--topics", "5",
                           "--channels", "2", "--reps", "1", "--history-interval", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = orjson.loads(done.stdout)
    assert (got["brokers"], got["real_brokers"], got["topics"], got["channels_per_topic"]) == (2, 1, 5, 2)
    assert got["api_stats_topics"]["bytes"] > 5 * 100  # five topics listed
    assert 0 < got["admin_rss_mib"] <= got["admin_peak_rss_mib"]
