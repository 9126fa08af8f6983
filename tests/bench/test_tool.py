"""`nsqmp bench writer` and `nsqmp bench reader` against a real broker: the counts add up
(the rates are never checked)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from nsqmp.bench.tool import run
from nsqmp.client import Connection
from tests.bench.conftest import bench_client
from tests.harness import wait_for


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


@pytest.mark.parametrize("impl", ["native", "twin"])
def test_publish_loop_stops_at_an_error_response(broker, impl):
    import socket
    import time

    from nsqmp.bench import tool
    from nsqmp.client import wire

    host, _, port = broker.tcp_address.rpartition(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(wire.MAGIC)
        until = time.monotonic() + 10
        cmd = wire.pub("bad!", b"x")
        if impl == "native":
            oks, error, slowest = bench_client("publish_loop").publish_loop(s.fileno(), cmd, until)
        else:
            oks, error, slowest = tool.py_publish_loop(s, cmd, until)
    assert oks == 0
    assert error == (wire.FRAME_ERROR, b"E_BAD_TOPIC PUB topic name \"bad!\" is not valid")
    ok_cmd = wire.pub("fine", b"y")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(wire.MAGIC)
        if impl == "native":
            oks, error, slowest = bench_client("publish_loop").publish_loop(s.fileno(), ok_cmd,
                                                                           time.monotonic() + 0.3)
        else:
            oks, error, slowest = tool.py_publish_loop(s, ok_cmd, time.monotonic() + 0.3)
    assert oks > 0 and error is None
    assert 0 < slowest < 0.3 + 5  # the longest wait for an OK
    wait_for(lambda: broker.stats(topic="fine")["topics"][0]["message_count"] == oks, what="all counted")


def test_the_round_trip_floor_answers_every_pub():
    """The suite's answer-only server (nsqmp.bench.floor): the writer gets an OK for each PUB."""
    from nsqmp.bench import floor

    r = floor.measure(0.5, size=20)
    assert r["messages"] > 0 and r["batch_size"] == 1 and r["conns"] == 1
