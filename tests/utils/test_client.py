"""The client the utilities are built on (nsqmp.client.consumer, .producer) against a
running broker: RDY shared over connections, max_attempts, pipelined publishing and
the broker's errors."""
from __future__ import annotations

import threading

import pytest

from nsqmp.client.config import Config
from nsqmp.client.consumer import Consumer
from nsqmp.client.producer import Producer
from nsqmp.client.sync import NSQError
from tests.harness import wait_for


def test_producer_waits_pipelines_and_reports_errors(broker):
    p = Producer(broker.tcp_address, Config())
    try:
        p.publish("t", b"one")
        p.multi_publish("t", [b"two", b"three"])
        with pytest.raises(NSQError, match="E_BAD_TOPIC"):
            p.publish("bad!", b"x")  # fatal for the connection: the next publish dials again
        answers: list = []
        done = threading.Event()

        def answered(error) -> None:
            answers.append(error)
            if len(answers) == 100:
                done.set()

        for i in range(100):
            p.publish_async("t", b"%d" % i, answered)
        assert done.wait(10) and answers == [None] * 100
    finally:
        p.stop()
    assert [t["depth"] for t in broker.stats()["topics"]] == [103]


def test_consumer_shares_rdy_over_brokers_and_gives_up_after_max_attempts(make_broker):
    brokers = [make_broker(), make_broker()]
    for b in brokers:
        b.http("POST", "/pub?topic=t", b"x")
    c = Consumer("t", "ch", Config(max_in_flight=10, max_attempts=1))
    try:
        c.connect_to_nsqds([b.tcp_address for b in brokers])

        def ready(b) -> list[int]:
            return [cl["ready_count"] for cl in b.stats()["topics"][0]["channels"][0]["clients"]]

        for b in brokers:
            wait_for(lambda: ready(b) == [5], what="RDY 10 / 2 connections")
        got = [c.get(10), c.get(10)]
        assert all(m is not None and m.attempts == 1 for m in got)
        assert not c.starved()  # 1 held of RDY 5 on each
        for m in got:
            m.requeue(0)
        # back with attempts 2 > max_attempts: finished by the consumer, never handed out
        for b in brokers:
            wait_for(lambda: b.stats()["topics"][0]["channels"][0]["message_count"] == 1
                     and b.stats()["topics"][0]["channels"][0]["requeue_count"] == 1
                     and b.stats()["topics"][0]["channels"][0]["in_flight_count"] == 0
                     and b.stats()["topics"][0]["channels"][0]["depth"] == 0, what="the message given up")
        assert c.get(0.2) is None
    finally:
        c.close()


def test_idle_connections_answer_heartbeats(broker):
    """A consumer and a producer that get nothing for several heartbeat intervals stay
    connected: their reader threads answer each heartbeat (the broker closes a client
    after two unanswered ones)."""
    cfg = Config(heartbeat_interval=1.0)
    c = Consumer("idle", "ch", cfg)
    p = Producer(broker.tcp_address, cfg)
    try:
        c.connect_to_nsqds([broker.tcp_address])
        p.publish("other", b"x")
        (link,) = c.links.values()
        producer_link = p._link
        assert c.get(3.5) is None  # 3 heartbeats, nothing else
        assert not link.closed and c.links == {broker.tcp_address: link}
        assert producer_link is not None and not producer_link.closed
        p.publish("idle", b"after the silence")
        assert p._link is producer_link  # no new connection was needed
        msg = c.get(5)
        assert msg is not None and msg.body == b"after the silence"
        msg.finish()
    finally:
        c.close()
        p.stop()


def test_consumer_dials_a_restarted_broker_again(make_broker):
    b = make_broker()
    port = b.tcp_port
    c = Consumer("back", "ch", Config(lookupd_poll_interval=0.3))
    try:
        c.connect_to_nsqds([b.tcp_address])
        assert b.stop() == 0
        wait_for(lambda: not c.links, what="the consumer to see the broker gone")
        b = make_broker("--tcp-address", f"127.0.0.1:{port}", data="data0")
        wait_for(lambda: c.links, what="the consumer to dial the broker again")
        b.http("POST", "/pub?topic=back", b"again")
        msg = c.get(10)
        assert msg is not None and msg.body == b"again"
        msg.finish()
    finally:
        c.close()
