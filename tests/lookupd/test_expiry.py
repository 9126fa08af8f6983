"""--inactive-producer-timeout and --tombstone-lifetime, with small values and real time."""
from __future__ import annotations

import time

from tests.harness import wait_for
from tests.lookupd.helpers import broker


def _ports(d, topic: str = "t") -> list[int]:
    return sorted(p["tcp_port"] for p in d.get(f"/lookup?topic={topic}")["producers"])


def test_inactive_producers_are_hidden_until_they_ping(make_lookupd):
    d = make_lookupd("-inactive-producer-timeout=1s")
    with broker(d.tcp_port, tcp_port=1, registrations=("t",)) as quiet, \
         broker(d.tcp_port, tcp_port=2, registrations=("t",)) as chatty:
        assert _ports(d) == [1, 2]
        deadline = time.monotonic() + 1.6
        while time.monotonic() < deadline:  # only one of them PINGs
            assert chatty.cmd("PING") == b"OK"
            time.sleep(0.2)  # pacing: a PING every 0.2 s while the other one's timeout runs out
        assert _ports(d) == [2]
        assert [n["tcp_port"] for n in d.get("/nodes")["producers"]] == [2]  # /nodes filters inactivity too
        assert d.get("/topics") == {"topics": ["t"]}  # the registration is still there
        assert len(d.get("/debug")["topic:t:"]) == 2
        assert quiet.cmd("PING") == b"OK"  # heard from again: active again
        assert _ports(d) == [1, 2]
        assert quiet.cmd("REGISTER u") == b"OK"  # REGISTER is not a sign of life, PING is
        time.sleep(1.2)  # the time is what is tested: past the 1 s inactive timeout
        assert _ports(d, "u") == []


def test_tombstones_hide_a_producer_for_the_lifetime(make_lookupd):
    d = make_lookupd("--tombstone-lifetime", "1s")
    with broker(d.tcp_port, tcp_port=1, http_port=11, address="b1", registrations=("t", "u")), \
         broker(d.tcp_port, tcp_port=2, http_port=22, address="b2", registrations=("t",)):
        status, body, _ = d.http("POST", "/topic/tombstone?topic=t&node=b1:11")
        assert (status, body) == (200, b"")
        tombstoned_at = time.monotonic()
        assert _ports(d) == [2]
        assert _ports(d, "u") == [1]  # a tombstone is per topic
        nodes = {n["tcp_port"]: n for n in d.get("/nodes")["producers"]}
        assert sorted(nodes) == [1, 2]  # /nodes keeps tombstoned producers, and says so
        assert dict(zip(nodes[1]["topics"], nodes[1]["tombstones"])) == {"t": True, "u": False}
        debug = {e["tcp_port"]: e for e in d.get("/debug")["topic:t:"]}
        assert debug[1]["tombstoned"] is True and debug[1]["tombstoned_at"] > 0
        wait_for(lambda: _ports(d) == [1, 2], timeout=5)
        assert time.monotonic() - tombstoned_at >= 0.9  # visible again only after the lifetime
        nodes = {n["tcp_port"]: n for n in d.get("/nodes")["producers"]}
        assert nodes[1]["tombstones"] == [False, False]


def test_tombstone_node_is_broadcast_address_and_http_port(make_lookupd):
    d = make_lookupd("-tombstone-lifetime=45s")
    with broker(d.tcp_port, tcp_port=1, http_port=11, address="b1", registrations=("t",)):
        for node in ("b1:1", "b1", "127.0.0.1:11", "b1:11%20"):
            assert d.http("POST", f"/topic/tombstone?topic=t&node={node}")[0] == 200
            assert _ports(d) == [1], node
        assert d.http("POST", "/topic/tombstone?topic=t&node=b1:11")[0] == 200
        assert _ports(d) == []
