"""`nsqmp bench writer` and `nsqmp bench reader` against a real broker: the counts add up
(the rates are never checked)."""
from __future__ import annotations

from types import SimpleNamespace

from nsqmp.bench.tool import run
from nsqmp.client import Connection


def test_writer_then_reader_drains_exactly_what_was_written(broker):
    addr = broker.tcp_address
    with Connection.connect(addr) as c:  # the channel exists before the writes
        c.identify()
        c.sub("tool_bench", "ch")
    wrote = run("writer", SimpleNamespace(nsqd_tcp_address=addr, topic="tool_bench", runfor=1.0, size=100,
                                          conns=2, batch_size=50))
    assert wrote["messages"] > 0 and wrote["messages"] % 50 == 0
    read = run("reader", SimpleNamespace(nsqd_tcp_address=addr, topic="tool_bench", channel="ch", runfor=3.0,
                                         size=100, conns=2, rdy=2500, max_messages=0))
    assert read["messages"] == wrote["messages"]  # every message, each FIN'd once
    channel = broker.stats(topic="tool_bench")["topics"][0]["channels"][0]
    assert channel["depth"] == 0
