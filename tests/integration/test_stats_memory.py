"""/stats include_mem: nsqd's "memory" block (JSON and text), from nsqmp.memstats."""
from __future__ import annotations

import re

from nsqmp.client import Connection
from nsqmp.memstats import FIELDS

NSQD_FIELDS = ("heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
               "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes", "gc_total_runs")


def test_memory_in_json_by_default(broker):
    with Connection.connect(broker.tcp_address, timeout=5) as c:
        c.identify()
        c.mpub("memtopic", [b"x" * 100] * 500)
    stats = broker.stats()
    memory = stats["memory"]
    assert tuple(memory) == NSQD_FIELDS == FIELDS
    assert all(isinstance(v, int) and v >= 0 for v in memory.values()), memory
    # every broker process holds anonymous memory, and the answering Python processes have
    # live objects and have collected at least once since they started
    assert memory["heap_in_use_bytes"] > 10 * 1024 * 1024
    assert memory["heap_objects"] > 1000
    assert memory["gc_total_runs"] > 0
    assert memory["gc_pause_usec_100"] >= memory["gc_pause_usec_99"] >= memory["gc_pause_usec_95"]
    assert list(stats)[:5] == ["version", "health", "start_time", "topics", "memory"]


def test_include_mem_false_omits_memory(broker):
    for value in ("false", "0"):
        stats = broker.stats(include_mem=value)
        assert "memory" not in stats
        assert stats["health"] == "OK" and "producers" in stats
    assert "memory" in broker.stats(include_mem="yes")  # anything else keeps the default, as nsqd


def test_text_format_memory_block(broker):
    status, body, _ = broker.http("GET", "/stats")
    assert status == 200
    text = body.decode()
    lines = text.splitlines()
    i = lines.index("Memory:")
    assert lines[i - 1] == "" and lines[i - 2].startswith("Health: ")
    for name, line in zip(NSQD_FIELDS, lines[i + 1:i + 10]):
        assert re.fullmatch(r"   " + name + r" *\t\d+", line), line
        assert len(line.split("\t")[0]) == 3 + 25  # nsqd's "   %-25s\t%d"
    status, body, _ = broker.http("GET", "/stats?include_mem=false")
    assert "Memory:" not in body.decode()
