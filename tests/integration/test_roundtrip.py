"""The thinnest path through every process: publish, consume, finish."""
from __future__ import annotations

from nsqmp.client import Connection


def test_publish_then_consume_over_tcp(broker):
    with Connection.connect(broker.tcp_address) as producer:
        producer.identify()
        producer.pub("orders", b"first")
        producer.mpub("orders", [b"second", b"third"])

    with Connection.connect(broker.tcp_address) as consumer:
        consumer.identify()
        consumer.sub("orders", "billing", rdy=10)
        got = [consumer.read_message() for _ in range(3)]
        assert sorted(m.body for m in got) == [b"first", b"second", b"third"]
        assert all(m.attempts == 1 for m in got)
        for m in got:
            consumer.fin(m.id)

    def finished():
        ch = broker.stats(topic="orders")["topics"][0]["channels"][0]
        return ch["depth"] == 0 and ch["in_flight_count"] == 0 and ch["message_count"] == 3

    from tests.harness import wait_for
    wait_for(finished, what="every message finished")


def test_http_publish_is_delivered(broker):
    status, body, headers = broker.http("POST", "/pub?topic=web", b"from-http")
    assert (status, body) == (200, b"OK")
    status, body, _ = broker.http("POST", "/mpub?topic=web", b"a\nb\n\nc")
    assert (status, body) == (200, b"OK")
    with Connection.connect(broker.tcp_address) as consumer:
        consumer.identify()
        consumer.sub("web", "ch", rdy=10)
        bodies = sorted(consumer.read_message().body for _ in range(4))
    assert bodies == [b"a", b"b", b"c", b"from-http"]


def test_a_channel_exists_once_sub_is_answered(broker):
    """nsqd creates the channel before it answers SUB, so a message published right after
    (here through another connection, often on the other acceptor) reaches the channel."""
    for i in range(30):
        topic = f"race{i}"
        with Connection.connect(broker.tcp_address) as c:
            c.identify()
            c.sub(topic, "early")
        with Connection.connect(broker.tcp_address) as p:
            p.pub(topic, b"x")

    def all_delivered() -> bool:
        topics = {t["topic_name"]: t for t in broker.stats()["topics"]}
        return all(topics[f"race{i}"]["channels"][0]["message_count"] == 1 for i in range(30))

    from tests.harness import wait_for
    wait_for(all_delivered, what="every early channel got its message")
