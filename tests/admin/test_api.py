"""The admin's read routes against a real cluster: every number checked against the brokers'
own /stats, the per-node rows, clients (a hostile user agent comes back as the same text), the
node list, one node, the counter, nsqmp's topic list and lookup view, a dead broker."""
from __future__ import annotations

import time

from nsqmp.client import Connection
from tests.harness import wait_for

XSS = "<img src=x onerror=alert(1)>"


def _publish(broker, topic: str, n: int) -> None:
    for i in range(n):
        status, body, _ = broker.http("POST", f"/pub?topic={topic}", b"m%d" % i)
        assert status == 200, body


def _channel(broker, topic: str, channel: str) -> None:
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel={channel}"):
        status, body, _ = broker.http("POST", path)
        assert status == 200, body


def _consumer(broker, topic: str, channel: str, rdy: int) -> Connection:
    c = Connection("127.0.0.1", broker.tcp_port)
    c.identify(user_agent=XSS, client_id="worker-1", hostname="worker.local")
    c.sub(topic, channel, rdy=rdy)
    for _ in range(rdy):
        c.read_message()  # held in flight
    return c


def _broker_channel(broker, topic: str, channel: str) -> dict:
    t = [t for t in broker.stats(topic=topic)["topics"] if t["topic_name"] == topic][0]
    return [c for c in t["channels"] if c["channel_name"] == channel][0]


def test_topic_channel_node_and_counter_match_the_brokers(cluster, make_admin):
    b0, b1 = cluster.brokers
    _channel(b0, "orders", "billing")
    _channel(b1, "orders", "billing")
    _channel(b1, "orders", "audit")
    _publish(b0, "orders", 5)
    _publish(b1, "orders", 7)
    consumer = _consumer(b0, "orders", "billing", rdy=2)
    try:
        admin = make_admin("--lookupd-http-address", cluster.lookupd_http)
        wait_for(lambda: len(admin.get("/api/nodes")["nodes"]) == 2, what="both brokers registered")
        wait_for(lambda: admin.get("/api/topics")["topics"] == ["orders"], what="topic registered")

        topic = admin.get("/api/topics/orders")
        assert topic["message"] == "" and topic["errors"] == []
        per_node = {n["node"]: n for n in topic["nodes"]}
        assert set(per_node) == {cluster.nsqd_http(0), cluster.nsqd_http(1)}
        total = 0
        for i, b in enumerate(cluster.brokers):
            st = [t for t in b.stats(topic="orders")["topics"]][0]
            row = per_node[cluster.nsqd_http(i)]
            assert (row["depth"], row["message_count"]) == (st["depth"], st["message_count"])
            total += st["message_count"]
        assert topic["node"] == "*" and topic["message_count"] == total == 12
        chans = {c["channel_name"]: c for c in topic["channels"]}
        assert set(chans) == {"billing", "audit"}
        assert chans["audit"]["depth"] == _broker_channel(b1, "orders", "audit")["depth"] == 7
        assert len(chans["billing"]["nodes"]) == 2

        ch = admin.get("/api/topics/orders/billing")
        want = [_broker_channel(b, "orders", "billing") for b in cluster.brokers]
        for field in ("depth", "in_flight_count", "message_count", "requeue_count", "timeout_count",
                      "deferred_count", "client_count"):
            assert ch[field] == sum(w[field] for w in want), field
        assert ch["in_flight_count"] == 2 and ch["client_count"] == 1
        (client,) = ch["clients"]
        assert client["user_agent"] == XSS  # data, unchanged: the UI inserts it as text
        assert (client["client_id"], client["hostname"], client["node"]) == ("worker-1", "worker.local",
                                                                             cluster.nsqd_http(0))
        assert client["in_flight_count"] == 2 and client["connected"] >= 0
        for key in ("ready_count", "finish_count", "tls", "snappy", "deflate", "authed", "version"):
            assert key in client

        node = admin.get(f"/api/nodes/{cluster.nsqd_http(1)}")
        assert node["total_messages"] == 7 and node["total_clients"] == 0
        assert [t["topic_name"] for t in node["topics"]] == ["orders"]
        status, body, _ = admin.request("GET", "/api/nodes/127.0.0.1:1")
        assert status == 404 and b"NODE_NOT_FOUND" in body

        counter = admin.get("/api/counter")["stats"]
        assert counter[f"orders:billing:{cluster.nsqd_http(0)}"]["message_count"] == want[0]["message_count"]
        assert sum(s["message_count"] for s in counter.values()) == sum(
            c["message_count"] for b in cluster.brokers for t in b.stats()["topics"] for c in t["channels"])

        (listed,) = admin.get("/api/stats/topics")["topics"]
        assert (listed["topic_name"], listed["message_count"], listed["channel_count"], listed["node_count"]) == (
            "orders", 12, 2, 2)
        lookup = admin.get("/api/lookup")["lookupds"][0]
        assert lookup["error"] == "" and lookup["topics"][0]["topic"] == "orders"
        assert sorted(lookup["topics"][0]["producers"]) == sorted([cluster.nsqd_http(0), cluster.nsqd_http(1)])
    finally:
        consumer.close()


def test_nsqd_addresses_and_a_dead_broker(cluster, make_admin):
    b0, _ = cluster.brokers
    _publish(b0, "solo", 3)
    admin = make_admin("--nsqd-http-address", cluster.nsqd_http(0), "--nsqd-http-address", "127.0.0.1:1",
                       "--http-client-request-timeout", "2")
    got = admin.get("/api/topics")
    assert got["topics"] == ["solo"]
    assert got["message"].startswith("WARNING: ") and "127.0.0.1:1" in got["message"]
    assert [e["node"] for e in got["errors"]] == ["127.0.0.1:1"]
    topic = admin.get("/api/topics/solo")
    assert topic["message_count"] == 3 and [e["node"] for e in topic["errors"]] == ["127.0.0.1:1"]
    nodes = admin.get("/api/nodes")
    assert [n["http_port"] for n in nodes["nodes"]] == [b0.http_port] and nodes["errors"]

    dead = make_admin("--nsqd-http-address", "127.0.0.1:1")
    status, body, _ = dead.request("GET", "/api/topics")
    assert status == 502 and body.startswith(b'{"message":"UPSTREAM_ERROR: failed to query any nsqd')


def test_history_rates_and_depth(cluster, make_admin):
    b0, _ = cluster.brokers
    _channel(b0, "hist", "c")
    admin = make_admin("--nsqd-http-address", cluster.nsqd_http(0), "--history-interval", "0.5")
    time.sleep(0.7)
    _publish(b0, "hist", 20)

    def rate_seen() -> bool:
        h = admin.get("/api/history/topics/hist")
        return any(r and r > 0 for r in h["publish_rate"])

    wait_for(rate_seen, timeout=10, what="a publish rate sample")
    h = admin.get("/api/history/topics/hist")
    assert len(h["ts"]) == len(h["depth"]) == len(h["publish_rate"]) == len(h["delivery_rate"])
    assert h["interval"] == 0.5 and h["ts"] == sorted(h["ts"])
    wait_for(lambda: admin.get("/api/history/topics/hist")["channels_depth"][-1] == 20, what="channel depth")
    ch = admin.get("/api/history/topics/hist/c")
    assert ch["channel_name"] == "c" and ch["depth"][-1] == 20
    # 20 published messages, spread over the samples' rates: rate x interval sums to about 20
    assert abs(sum(r * 0.5 for r in ch["publish_rate"] if r) - 20) < 2
    listed = admin.get("/api/stats/topics")["topics"][0]
    assert listed["publish_rate"] is not None
    assert admin.get("/api/history/topics/nope")["ts"] == []


def test_a_slow_broker_is_marked_and_the_page_still_answers(cluster, make_admin):
    import socket

    b0, _ = cluster.brokers
    _publish(b0, "slowpoke", 2)
    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        slow = f"127.0.0.1:{silent.getsockname()[1]}"
        admin = make_admin("--nsqd-http-address", cluster.nsqd_http(0), "--nsqd-http-address", slow,
                           "--http-client-request-timeout", "1")
        t0 = time.monotonic()
        got = admin.get("/api/topics/slowpoke")
        assert time.monotonic() - t0 < 5
        assert got["message_count"] == 2
        (err,) = got["errors"]
        assert err["node"] == slow and "Client.Timeout exceeded" in err["error"]
