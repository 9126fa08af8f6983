"""The admin's peek route (nsqmp, issue 23): GET /api/topics/:topic/:channel/peek asks each
broker that has the channel for its next messages; nothing is consumed."""
from __future__ import annotations

import base64

from tests.admin.test_api import XSS, _broker_channel, _channel, _consumer
from tests.harness import wait_for


def test_peek_gathers_each_broker_and_changes_nothing(cluster, make_admin):
    b0, b1 = cluster.brokers
    _channel(b0, "orders", "billing")
    _channel(b1, "orders", "billing")
    assert b0.http("POST", "/pub?topic=orders", XSS.encode())[0] == 200
    assert b0.http("POST", "/pub?topic=orders", b"\xff\x00binary" + b"z" * 400)[0] == 200
    assert b1.http("POST", "/pub?topic=orders", b"on-b1")[0] == 200
    consumer = _consumer(b0, "orders", "billing", rdy=1)  # the XSS one goes in flight
    try:
        admin = make_admin("--lookupd-http-address", cluster.lookupd_http)
        wait_for(lambda: len(admin.get("/api/nodes")["nodes"]) == 2, what="both brokers registered")
        before = [_broker_channel(b, "orders", "billing")["depth"] for b in (b0, b1)]
        got = admin.get("/api/topics/orders/billing/peek")
        assert got["message"] == "" and got["errors"] == []
        by_node: dict = {}
        for m in got["messages"]:
            by_node.setdefault(m["node"], []).append(m)
        a, b = by_node[cluster.nsqd_http(0)], by_node[cluster.nsqd_http(1)]
        assert [(m["state"], m["attempts"]) for m in a] == [("queued", 0), ("in_flight", 1)]
        assert base64.b64decode(a[0]["body"]) == b"\xff\x00binary" + b"z" * 248  # the 256-byte preview
        assert a[0]["truncated"] and a[0]["body_size"] == 408
        assert base64.b64decode(a[1]["body"]) == XSS.encode() and a[1]["client"]["client_id"] == "worker-1"
        assert [base64.b64decode(m["body"]) for m in b] == [b"on-b1"]
        assert {n["node"]: n["depth"] for n in got["nodes"]} == {cluster.nsqd_http(0): 1, cluster.nsqd_http(1): 1}
        assert len(admin.get("/api/topics/orders/billing/peek?n=1&max_body=0")["messages"]) == 2
        assert [_broker_channel(b, "orders", "billing")["depth"] for b in (b0, b1)] == before
        # a channel one broker lacks is skipped there, not an error; bad n is a 400
        _channel(b1, "orders", "audit")
        only = admin.get("/api/topics/orders/audit/peek")
        assert only["messages"] == [] and only["errors"] == [] and [n["node"] for n in only["nodes"]] == [
            cluster.nsqd_http(1)]
        for query, message in (("n=0", "INVALID_N"), ("n=1001", "INVALID_N"), ("n=x", "INVALID_N"),
                               ("max_body=-1", "INVALID_MAX_BODY")):
            status, body, _ = admin.request("GET", f"/api/topics/orders/billing/peek?{query}")
            assert (status, body) == (400, b'{"message":"%s"}' % message.encode())
    finally:
        consumer.close()
