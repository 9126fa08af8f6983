"""/stats and /metrics of a broker whose routers' answers are bigger than one ring record
(ten thousand channels make megabytes of JSON): the answer comes in pieces (REPLY_PART,
nsqmp/ipc/records.py), whole and in time."""
from __future__ import annotations

import time


def test_stats_bigger_than_a_ring_record_comes_whole(make_broker):
    # a 256 KiB ring takes records of at most 64 KiB; 400 channels of one topic are ~150 KB
    # of /stats JSON from its router
    b = make_broker("--ring-size", "256KiB", "--max-msg-size", "16384", "--routers", "1")
    status, body, _ = b.http("POST", "/topic/create?topic=wide")
    assert status == 200, body
    names = [f"c{i:03d}" for i in range(400)]
    for name in names:
        status, body, _ = b.http("POST", f"/channel/create?topic=wide&channel={name}")
        assert status == 200, body
    started = time.monotonic()
    stats = b.stats()
    took = time.monotonic() - started
    [topic] = stats["topics"]
    assert sorted(c["channel_name"] for c in topic["channels"]) == names
    assert took < 4, f"/stats took {took:.1f}s: a router's answer was lost and waited out"
    assert "larger than the ring allows" not in b.log_text()
    status, body, _ = b.http("GET", "/metrics")
    assert status == 200
    assert body.count(b'nsqmp_channel_depth{channel="c') == 400
