"""GET /metrics on a running broker: what it says per topic and channel, per process and
ring, in both formats, and that a deleted topic or channel is gone from the next scrape."""
from __future__ import annotations

import http.client
import os
import signal

from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families

from nsqmp.client import Connection
from nsqmp.lateness import FireLateness
from nsqmp.metrics.exposition import lateness_buckets
from tests.harness import wait_for


def scrape(broker, accept: str | None = None) -> tuple[str, str]:
    """(content type, body) of GET /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", broker.http_port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Accept": accept} if accept else {})
        resp = conn.getresponse()
        assert resp.status == 200
        return resp.getheader("Content-Type"), resp.read().decode()
    finally:
        conn.close()


def samples(body: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value of a text-format scrape."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def test_topics_channels_processes_and_rings(broker):
    with Connection.connect(broker.tcp_address) as pub:
        pub.pub("orders", b"abc")
        pub.pub("orders", b"de")
        pub.pub("clicks", b"x")
        with Connection.connect(broker.tcp_address) as sub:
            sub.identify()
            sub.sub("orders", "billing", rdy=1)
            pub.pub("orders", b"fgh")
            sub.read_message()
            ctype, body = scrape(broker)
    assert ctype == "text/plain; version=0.0.4; charset=utf-8"
    s = samples(body)
    assert s[("nsqmp_topic_messages_total", (("topic", "orders"),))] == 3
    assert s[("nsqmp_topic_message_bytes_total", (("topic", "orders"),))] == 8
    assert s[("nsqmp_topic_depth", (("topic", "clicks"),))] == 1  # no channel yet: held for the first
    billing = (("channel", "billing"), ("topic", "orders"))
    assert s[("nsqmp_channel_in_flight", billing)] == 1
    assert s[("nsqmp_channel_consumers", billing)] == 1
    assert s[("nsqmp_channel_depth", billing)] == 2  # the held messages went to the first channel; one is in flight
    assert s[("nsqmp_channel_delivered_total", billing)] == 1
    assert s[("nsqmp_channel_finished_total", billing)] == 0
    assert s[("nsqmp_published_messages_total", ())] == 4
    assert s[("nsqmp_delivered_messages_total", ())] == 1
    assert s[("nsqmp_topics", ())] == 2 and s[("nsqmp_channels", ())] == 1
    assert s[("nsqmp_connections", (("listener", "tcp"),))] == 2
    roles = {dict(labels)["role"] + dict(labels)["index"]
             for name, labels in s if name == "nsqmp_process_resident_memory_bytes"}
    assert roles == {"acceptor0", "acceptor1", "router0", "router1", "timer0", "supervisor0"}
    assert all(v > 0 for (name, _), v in s.items() if name == "nsqmp_process_resident_memory_bytes")
    rings = {dict(labels)["ring"] for name, labels in s if name == "nsqmp_ring_capacity_bytes"}
    assert rings == {"a0r0", "r0a0", "a1r0", "r0a1", "r0t", "tr0", "a0r1", "r1a0", "a1r1", "r1a1", "r1t", "tr1"}
    peaks = {dict(labels)["ring"]: v for (name, labels), v in s.items() if name == "nsqmp_ring_high_water_bytes"}
    assert set(peaks) == rings
    # the publishes went to the routers and the delivery to the subscriber: both directions peaked
    assert any(v > 0 for r, v in peaks.items() if r.startswith("a")) and any(
        v > 0 for r, v in peaks.items() if r.startswith("r") and "a" in r)
    assert all(v <= 8 << 20 for v in peaks.values())
    assert s[("nsqmp_segment_files", ())] >= 2
    for router in ("0", "1"):
        assert s[("nsqmp_fire_lateness_seconds_bucket", (("kind", "timeouts"), ("le", "+Inf"), ("router", router)))] == 0


def test_a_deleted_topic_or_channel_is_gone_from_the_next_scrape(broker):
    with Connection.connect(broker.tcp_address) as pub:
        pub.pub("stays", b"a")
        pub.pub("goes", b"b")
    broker.http("POST", "/channel/create?topic=stays&channel=keep")
    broker.http("POST", "/channel/create?topic=stays&channel=drop")
    assert 'channel="drop"' in scrape(broker)[1] and 'topic="goes"' in scrape(broker)[1]
    assert broker.http("POST", "/topic/delete?topic=goes")[0] == 200
    assert broker.http("POST", "/channel/delete?topic=stays&channel=drop")[0] == 200
    body = scrape(broker)[1]
    assert 'topic="goes"' not in body and 'channel="drop"' not in body
    assert 'channel="keep"' in body


def test_openmetrics_when_the_accept_header_asks(broker):
    with Connection.connect(broker.tcp_address) as pub:
        pub.pub("om", b"a")
    ctype, body = scrape(broker, "application/openmetrics-text; version=1.0.0,text/plain;q=0.5")
    assert ctype.startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith("# EOF\n")
    fams = {f.name: f for f in om_families(body)}
    assert fams["nsqmp_topic_messages"].type == "counter"
    assert [s.value for s in fams["nsqmp_topic_messages"].samples if s.name.endswith("_total")] == [1]
    assert fams["nsqmp_fire_lateness_seconds"].type == "histogram"


def test_a_restarted_router_counts_a_restart(broker):
    pid = broker.children()["nsqmp router 0"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: broker.children().get("nsqmp router 0") not in (None, pid), what="router 0 restarted")

    def restarts():
        s = samples(scrape(broker)[1])
        return s[("nsqmp_process_restarts_total", (("index", "0"), ("role", "router")))] == 1 and s
    s = wait_for(restarts, what="a restart counted")
    assert s[("nsqmp_process_restarts_total", (("index", "1"), ("role", "router")))] == 0


def test_lateness_buckets_are_cumulative_and_exact_at_each_bound():
    a, b = FireLateness(), FireLateness()
    a.add(500)          # 0.5 us: the first bucket
    a.add(3_000, 2)     # 3 us: under 4 us
    b.add(1_500_000)    # 1.5 ms: under 2.048 ms
    buckets = dict(lateness_buckets([a.snapshot(), b.snapshot()]))
    assert buckets["1e-06"] == 1 and buckets["2e-06"] == 1 and buckets["4e-06"] == 3
    assert buckets["0.001024"] == 3 and buckets["0.002048"] == 4 and buckets["+Inf"] == 4
    assert list(buckets)[-1] == "+Inf"
    assert lateness_buckets([]) == [("+Inf", 0)]


def test_fsync_durations_of_segments_and_ack_logs(make_broker):
    broker = make_broker("--sync-timeout", "100ms")
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub("synced", "ch", rdy=1)
        c.pub("synced", b"a")
        c.fin(c.read_message().id)
    wait_for(lambda: samples(scrape(broker)[1])[("nsqmp_finished_messages_total", ())] == 1, what="the FIN counted")

    def counts(s, role):
        return {dict(labels)["index"]: v for (name, labels), v in s.items()
                if name == "nsqmp_fsync_seconds_count" and dict(labels)["role"] == role}

    def synced():
        s = samples(scrape(broker)[1])
        return all(sum(counts(s, role).values()) for role in ("acceptor", "router")) and s
    s = wait_for(synced, what="an acceptor's and a router's sync counted")
    for role in ("acceptor", "router"):
        assert set(counts(s, role)) <= {"0", "1"}
        for index, count in counts(s, role).items():
            key = (("index", index), ("role", role))
            assert s[("nsqmp_fsync_seconds_bucket", (("index", index), ("le", "+Inf"), ("role", role)))] == count
            assert 0 <= s[("nsqmp_fsync_seconds_sum", key)] < count * 10 + 1
