"""nsqd 1.3.0's statsd lines, built from /stats-shaped topics: names, types, counters as
differences, exclude-ephemeral, mem stats, the prefix and the UDP packet boundaries."""
from __future__ import annotations

import asyncio

from nsqmp.metrics.statsd import Pusher, host_prefix, packets


def _topic(name: str, count: int, channels: list[dict], e2e=None) -> dict:
    return {"topic_name": name, "message_count": count, "message_bytes": count * 10, "depth": 3,
            "backend_depth": 1, "channels": channels, "paused": False,
            "e2e_processing_latency": {"count": 0, "percentiles": e2e}}


def _channel(name: str, count: int, requeues: int = 0, timeouts: int = 0, e2e=None) -> dict:
    return {"channel_name": name, "message_count": count, "depth": 2, "backend_depth": 0, "in_flight_count": 4,
            "deferred_count": 5, "requeue_count": requeues, "timeout_count": timeouts, "client_count": 6,
            "paused": False, "e2e_processing_latency": {"count": 0, "percentiles": e2e}}


def _pusher(**kw) -> Pusher:
    args = dict(address="127.0.0.1:8125", prefix="nsq.h_4151.", interval=60.0, mem_stats=False, packet_size=508,
                exclude_ephemeral=False, gather=None)
    args.update(kw)
    return Pusher(**args)  # type: ignore[arg-type]


def test_prefix_is_nsqds():
    assert host_prefix("nsq.%s", "box.example.com", "4151") == "nsq.box_example_com_4151."
    assert host_prefix("nsq.%s.", "10.0.0.1", "4151") == "nsq.10_0_0_1_4151."
    assert host_prefix("nsq.%s", "::1", "4151") == "nsq.[__1]_4151."  # JoinHostPort brackets IPv6
    assert host_prefix("fixed", "h", "1") == "fixed."
    assert host_prefix("", "h", "1") == ""


def test_one_push_has_nsqds_names_and_types_in_order():
    p = _pusher()
    e2e = [{"quantile": 0.99, "value": 1234567.0}]
    lines = p.lines([_topic("orders", 7, [_channel("billing", 7, 1, 2, e2e)], e2e)], None)
    assert lines == [
        "nsq.h_4151.topic.orders.message_count:7|c",
        "nsq.h_4151.topic.orders.message_bytes:70|c",
        "nsq.h_4151.topic.orders.depth:3|g",
        "nsq.h_4151.topic.orders.backend_depth:1|g",
        "nsq.h_4151.topic.orders.e2e_processing_latency_99:1234567|g",
        "nsq.h_4151.topic.orders.channel.billing.message_count:7|c",
        "nsq.h_4151.topic.orders.channel.billing.depth:2|g",
        "nsq.h_4151.topic.orders.channel.billing.backend_depth:0|g",
        "nsq.h_4151.topic.orders.channel.billing.in_flight_count:4|g",
        "nsq.h_4151.topic.orders.channel.billing.deferred_count:5|g",
        "nsq.h_4151.topic.orders.channel.billing.requeue_count:1|c",
        "nsq.h_4151.topic.orders.channel.billing.timeout_count:2|c",
        "nsq.h_4151.topic.orders.channel.billing.clients:6|g",
        "nsq.h_4151.topic.orders.channel.billing.e2e_processing_latency_99:1234567|g",
    ]


def test_counters_are_differences_since_the_last_push_and_a_new_topic_starts_at_zero():
    p = _pusher()
    p.lines([_topic("a", 5, [_channel("c", 5, 1, 1)])], None)
    lines = p.lines([_topic("a", 8, [_channel("c", 6, 3, 1)]), _topic("b", 2, [])], None)
    counters = [line for line in lines if line.endswith("|c")]
    assert counters == [
        "nsq.h_4151.topic.a.message_count:3|c", "nsq.h_4151.topic.a.message_bytes:30|c",
        "nsq.h_4151.topic.a.channel.c.message_count:1|c", "nsq.h_4151.topic.a.channel.c.requeue_count:2|c",
        "nsq.h_4151.topic.a.channel.c.timeout_count:0|c",
        "nsq.h_4151.topic.b.message_count:2|c", "nsq.h_4151.topic.b.message_bytes:20|c",
    ]
    # a topic absent from one push starts again from 0 (nsqd's lastStats = stats)
    p.lines([], None)
    assert p.lines([_topic("a", 8, [])], None)[0] == "nsq.h_4151.topic.a.message_count:8|c"


def test_exclude_ephemeral_skips_ephemeral_topics_and_channels():
    p = _pusher(exclude_ephemeral=True)
    lines = p.lines([_topic("t#ephemeral", 1, [_channel("c", 1)]),
                     _topic("t", 1, [_channel("c#ephemeral", 1), _channel("d", 1)])], None)
    assert not [line for line in lines if "ephemeral" in line]
    assert "nsq.h_4151.topic.t.channel.d.depth:2|g" in lines
    assert any("ephemeral" in line for line in _pusher().lines([_topic("t#ephemeral", 1, [])], None))


def test_mem_stats_gauges_and_the_gc_runs_counter():
    p = _pusher(mem_stats=True)
    memory = {"heap_objects": 10, "heap_idle_bytes": 11, "heap_in_use_bytes": 12, "heap_released_bytes": 0,
              "gc_pause_usec_100": 3, "gc_pause_usec_99": 2, "gc_pause_usec_95": 1, "next_gc_bytes": 0,
              "gc_total_runs": 40}
    assert p.lines([], memory) == [
        "nsq.h_4151.mem.heap_objects:10|g", "nsq.h_4151.mem.heap_idle_bytes:11|g",
        "nsq.h_4151.mem.heap_in_use_bytes:12|g", "nsq.h_4151.mem.heap_released_bytes:0|g",
        "nsq.h_4151.mem.gc_pause_usec_100:3|g", "nsq.h_4151.mem.gc_pause_usec_99:2|g",
        "nsq.h_4151.mem.gc_pause_usec_95:1|g", "nsq.h_4151.mem.next_gc_bytes:0|g", "nsq.h_4151.mem.gc_runs:40|c"]
    assert p.lines([], dict(memory, gc_total_runs=45))[-1] == "nsq.h_4151.mem.gc_runs:5|c"
    assert _pusher(mem_stats=False).lines([], memory) == []


def test_packets_keep_lines_whole_within_the_size():
    lines = [f"nsq.x.topic.t{i}.depth:{i}|g" for i in range(100)]
    sent = packets(lines, 508)
    assert b"".join(sent) == "".join(line + "\n" for line in lines).encode()
    assert all(len(pkt) <= 508 for pkt in sent) and len(sent) > 1
    assert all(pkt.endswith(b"\n") for pkt in sent)
    # a line longer than a packet goes alone; the others still fill theirs
    long = "nsq.x." + "y" * 600 + ":1|g"
    assert packets(["a:1|c", long, "b:1|c"], 508) == [b"a:1|c\n", (long + "\n").encode(), b"b:1|c\n"]


def test_push_once_sends_the_packets_over_udp():
    import socket

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5)

    async def gather():
        return [_topic(f"t{i}", i, [_channel("c", i)]) for i in range(20)], None

    p = _pusher(address=f"127.0.0.1:{rx.getsockname()[1]}", interval=1.0, packet_size=200, gather=gather)
    sent = asyncio.run(p.push_once())
    got = [rx.recv(65536) for _ in range(sent)]
    rx.close()
    assert sent > 10 and all(len(pkt) <= 200 for pkt in got)
    assert b"nsq.h_4151.topic.t19.channel.c.clients:6|g\n" in b"".join(got)
