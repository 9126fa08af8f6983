"""The connector's NSQ side against the real broker, without Spark: hold until FIN,
redelivery of what was never acknowledged, reconnects, and the publisher's size checks."""
from __future__ import annotations

import pyarrow as pa
import pytest

from nsqmp.spark.consumer import Consumer, ConsumerError
from nsqmp.spark.options import write_options
from nsqmp.spark.publisher import NSQPublishError, publish_arrow
from tests.harness import wait_for
from tests.spark.helpers import channel_stats, make_channel, publish


def _bodies(chunks):
    return [m.body for ch in chunks for m in ch.msgs]


def _drain(consumer, n, wait=5.0):
    out = []
    while sum(len(ch.msgs) for ch in out) < n:
        got = consumer.take(n, wait)
        if not got:
            break
        out += got
    return out


def test_messages_stay_in_flight_until_fin(broker):
    make_channel(broker.tcp_address, "held", "c")
    publish(broker.tcp_address, "held", [b"m%d" % i for i in range(300)])
    c = Consumer([broker.tcp_address], "held", "c", connections_per_nsqd=2, rdy=200).start()
    try:
        chunks = _drain(c, 300)
        assert sorted(_bodies(chunks)) == sorted(b"m%d" % i for i in range(300))
        assert channel_stats(broker, "held", "c")["in_flight_count"] == 300
        c.fin(chunks)
        wait_for(lambda: channel_stats(broker, "held", "c")["in_flight_count"] == 0, what="FINs processed")
        assert channel_stats(broker, "held", "c")["depth"] == 0
    finally:
        c.close()


def test_limit_and_in_flight_window(broker):
    make_channel(broker.tcp_address, "win", "c")
    publish(broker.tcp_address, "win", [b"x%d" % i for i in range(1000)])
    c = Consumer([broker.tcp_address], "win", "c", connections_per_nsqd=1, rdy=400).start()
    try:
        first = c.take(150, 5.0)
        assert sum(len(ch.msgs) for ch in first) <= 150
        # RDY 400 on one connection: never more than 400 unacknowledged
        wait_for(lambda: c.buffered + sum(len(ch.msgs) for ch in first) >= 400, what="window full")
        rest = _drain(c, 400, wait=0.5)
        assert sum(len(ch.msgs) for ch in first + rest) == 400
        c.fin(first + rest)
        more = _drain(c, 400)
        assert sum(len(ch.msgs) for ch in more) == 400
        c.fin(more)
    finally:
        c.close()


def test_closing_without_fin_gives_messages_back(broker):
    make_channel(broker.tcp_address, "back", "c")
    publish(broker.tcp_address, "back", [b"b%d" % i for i in range(100)])
    c = Consumer([broker.tcp_address], "back", "c").start()
    got = _drain(c, 100)
    assert len(_bodies(got)) == 100
    c.close(graceful=False)
    again = Consumer([broker.tcp_address], "back", "c").start()
    try:
        redelivered = _drain(again, 100)
        assert sorted(_bodies(redelivered)) == sorted(_bodies(got))
        assert all(m.attempts == 2 for ch in redelivered for m in ch.msgs)
        again.fin(redelivered)
    finally:
        again.close()


def test_cutoff_sets_later_messages_aside(broker):
    make_channel(broker.tcp_address, "cut", "c")
    publish(broker.tcp_address, "cut", [b"old"] * 10)
    import time

    cutoff = time.time_ns()
    time.sleep(0.01)  # the clock moves past the cutoff: the later batch is stamped after it
    publish(broker.tcp_address, "cut", [b"new"] * 5)
    c = Consumer([broker.tcp_address], "cut", "c").start()
    try:
        wait_for(lambda: c.buffered >= 15, what="15 delivered")
        got = c.take(100, 0.5, cutoff_ns=cutoff)
        assert _bodies(got) == [b"old"] * 10
        assert c.stats["held_back"] == 5
        assert c.take(100, 0.2, cutoff_ns=cutoff) == []
    finally:
        c.close()


def test_unreachable_address_is_named():
    with pytest.raises(ConsumerError, match=r"cannot connect to nsqd 127\.0\.0\.1:1: "):
        Consumer(["127.0.0.1:1"], "t", "c", connect_timeout_ms=2000).start()


def test_msg_timeout_above_the_broker_maximum_is_refused(broker):
    with pytest.raises(ConsumerError, match=r"refused the subscription.*msg timeout \(3600000\) is invalid"):
        Consumer([broker.tcp_address], "t", "c", msg_timeout_ms=3_600_000).start()


def test_publisher_names_the_row_and_the_limit(broker):
    opts = write_options({"nsqd": broker.tcp_address, "topic": "big", "maxMessageSize": "100"})
    batch = pa.RecordBatch.from_pydict({"value": [b"a" * 10, b"b" * 101, b"c"]})
    with pytest.raises(NSQPublishError, match=r"row 1 \(column 'value'\) is 101 bytes, larger than the max "
                                              r"message size 100 bytes"):
        publish_arrow(opts, "value", iter([batch]))
    nulls = pa.RecordBatch.from_pydict({"value": pa.array([b"a", None], pa.binary())})
    with pytest.raises(NSQPublishError, match=r"row 1: column 'value' is null"):
        publish_arrow(opts, "value", iter([nulls]))
    empty = pa.RecordBatch.from_pydict({"value": ["a", ""]})
    with pytest.raises(NSQPublishError, match=r"row 1: column 'value' is empty"):
        publish_arrow(opts, "value", iter([empty]))


def test_publisher_translates_the_broker_refusal(make_broker):
    b = make_broker("--max-msg-size", "1000")
    opts = write_options({"nsqd": b.tcp_address, "topic": "small"})   # maxMessageSize left at 1 MiB
    batch = pa.RecordBatch.from_pydict({"value": [b"ok"] * 3 + [b"z" * 1500]})
    with pytest.raises(NSQPublishError, match=r"row 3 is 1500 bytes, larger than the broker's max message "
                                              r"size 1000 bytes .*E_BAD_MESSAGE"):
        publish_arrow(opts, "value", iter([batch]))


def test_publisher_mpub_batches_and_counts(broker):
    make_channel(broker.tcp_address, "pubd", "c")
    opts = write_options({"nsqd": broker.tcp_address, "topic": "pubd", "batchSize": "7"})
    batches = [pa.RecordBatch.from_pydict({"body": [f"s{i}-{j}" for j in range(50)]}) for i in range(3)]
    assert publish_arrow(opts, "body", iter(batches)) == 150
    c = Consumer([broker.tcp_address], "pubd", "c").start()
    try:
        got = _drain(c, 150)
        assert sorted(_bodies(got)) == sorted(f"s{i}-{j}".encode() for i in range(3) for j in range(50))
        c.fin(got)
    finally:
        c.close()


def test_heartbeats_answered_and_held_messages_touched(broker):
    """A batch held longer than the msg_timeout: the reading thread answers heartbeats and
    TOUCHes the held messages, so the broker neither drops the connection nor redelivers."""
    make_channel(broker.tcp_address, "slow", "c")
    publish(broker.tcp_address, "slow", [b"s%d" % i for i in range(50)])
    c = Consumer([broker.tcp_address], "slow", "c", msg_timeout_ms=1500, heartbeat_interval_ms=1000).start()
    try:
        held = _drain(c, 50)
        import time

        time.sleep(4.0)                      # > 2 heartbeat intervals, > 2 msg timeouts
        assert c.live_connections == 1 and c.stats["disconnects"] == 0
        assert c.stats["touched"] >= 50
        assert c.fin(held) == 50
        wait_for(lambda: channel_stats(broker, "slow", "c")["in_flight_count"] == 0, what="FINs processed")
        ch = channel_stats(broker, "slow", "c")
        assert (ch["timeout_count"], ch["requeue_count"], ch["depth"]) == (0, 0, 0)
        assert c.stats["E_FIN_FAILED"] == 0
    finally:
        c.close()


def test_two_addresses_each_with_several_connections(make_broker):
    a, b = make_broker(), make_broker()
    for broker, prefix in ((a, b"a"), (b, b"b")):
        make_channel(broker.tcp_address, "two", "c")
        publish(broker.tcp_address, "two", [prefix + b"%d" % i for i in range(600)])
    c = Consumer([a.tcp_address, b.tcp_address], "two", "c", connections_per_nsqd=3, rdy=100).start()
    try:
        assert len({conn.index for conn in c.conns}) == 6
        got = _drain(c, 600)                      # 2 x 3 connections x RDY 100
        assert len(_bodies(got)) == 600
        assert {m.body[:1] for ch in got for m in ch.msgs} == {b"a", b"b"}
        c.fin(got)
        rest = _drain(c, 600)
        c.fin(rest)
        assert sorted(_bodies(got + rest)) == sorted([b"a%d" % i for i in range(600)] + [b"b%d" % i for i in range(600)])
    finally:
        c.close()
