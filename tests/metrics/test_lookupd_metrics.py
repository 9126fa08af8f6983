"""nsqlookupd's GET /metrics: its registry's figures, a broker registered and tombstoned,
and both formats."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from nsqmp.client import Connection
from tests.harness import wait_for
from tests.lookupd.conftest import make_lookupd  # noqa: F401  (fixture)


def _samples(body: bytes) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body.decode()) for s in fam.samples}


def test_registrations_a_broker_and_a_tombstone(make_lookupd, make_broker):  # noqa: F811
    lookupd = make_lookupd()
    assert lookupd.http("POST", "/channel/create?topic=made&channel=by-hand")[0] == 200
    broker = make_broker("--lookupd-tcp-address", f"127.0.0.1:{lookupd.tcp_port}",
                         "--broadcast-address", "127.0.0.1")
    with Connection.connect(broker.tcp_address) as c:
        c.pub("live", b"m")

    def scraped():
        status, body, headers = lookupd.http("GET", "/metrics")
        assert status == 200 and headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        s = _samples(body)
        return s.get(("nsqmp_lookupd_topic_producers", (("topic", "live"),))) == 1 and s
    s = wait_for(scraped, what="the broker's topic registered")
    assert s[("nsqmp_lookupd_brokers", ())] == 1
    assert s[("nsqmp_lookupd_topics", ())] == 2 and s[("nsqmp_lookupd_channels", ())] == 1
    assert s[("nsqmp_lookupd_topic_producers", (("topic", "made"),))] == 0
    assert s[("nsqmp_lookupd_tombstones", ())] == 0
    assert s[("nsqmp_lookupd_process_resident_memory_bytes", ())] > 0
    node = f"127.0.0.1:{broker.http_port}"
    assert lookupd.http("POST", f"/topic/tombstone?topic=live&node={node}")[0] == 200
    s = _samples(lookupd.http("GET", "/metrics")[1])
    assert s[("nsqmp_lookupd_tombstones", ())] == 1
    assert s[("nsqmp_lookupd_topic_producers", (("topic", "live"),))] == 0


def test_openmetrics_when_asked_and_the_routes_stay_method_strict(make_lookupd):  # noqa: F811
    lookupd = make_lookupd()
    status, body, headers = lookupd.http("GET", "/metrics", headers={"Accept": "application/openmetrics-text"})
    assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n") and b"nsqmp_lookupd_brokers 0" in body
    assert "X-NSQ-Content-Type" not in headers
    assert lookupd.http("POST", "/metrics")[0] == 405
