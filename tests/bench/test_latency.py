"""`nsqmp bench latency` with tiny parameters: every message arrives, and each is timed
(the figures themselves are never checked)."""
from __future__ import annotations

import json

from nsqmp.bench import latency


def test_latency_bench_counts_every_message(capsys):
    assert latency.main(["--rate", "2000", "--runfor", "1.5", "--conns", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sent"] == result["received"] == 2 * 1500
    # what was sent in the first second is warm-up (about 2,000 messages): the rest is timed
    assert 0 < result["latency_ms"]["count"] <= result["sent"] - 1000
    assert 0 < result["latency_ms"]["min"] <= result["latency_ms"]["p50"] <= result["latency_ms"]["max"]
