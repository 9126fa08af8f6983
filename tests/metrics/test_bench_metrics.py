"""`nsqmp bench metrics` runs (tiny parameters; not a timed test)."""
from __future__ import annotations

import json

from nsqmp.bench import metrics as bench


def test_bench_smoke(capsys):
    assert bench.main(["--topics", "4", "--channels", "2", "--scrapes", "2", "--pushes", "2", "--idle", "0.2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["topics"], result["channels_per_topic"]) == (4, 2)
    scrape = result["metrics"]
    # 6 series per topic and 9 per channel at least, and each role's CPU is there
    assert scrape["series"] > 4 * 6 + 8 * 9 and scrape["body_bytes"] > 0
    assert set(scrape["cpu_ms_per_scrape_by_role"]) == {"supervisor", "acceptor 0", "acceptor 1", "router 0",
                                                        "router 1", "timer"}
    assert scrape["pub_round_trip_during_scrapes"]["pubs"] > 0
    push = result["statsd"]
    # 4 topic lines per topic, 8 per channel, 9 mem lines: every push arrived whole
    assert push["lines_per_push"] == 4 * 4 + 8 * 8 + 9
    assert push["packets_per_push"] >= push["bytes_per_push"] // 508
