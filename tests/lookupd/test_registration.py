"""The broker side of nsqlookupd: a real broker started with --lookupd-tcp-address registers
itself with real lookupd processes, as nsqd does (nsq-reference.md section 4.1).

Checked through the lookupd's HTTP API only (/nodes, /lookup, /channels, /debug), so every
assertion is about what a consumer or nsqadmin would see.
"""
from __future__ import annotations

import os
import signal
import socket
import time

import orjson
import pytest

from nsqmp.client.sync import Connection
from tests.harness import wait_for
from tests.lookupd.brokers import (
    BROADCAST, channel_producers, node, post, start_broker, start_lookupd, topics_of,
)

def test_topics_and_channels_come_and_go(make_lookupd, make_broker):
    lookupd = start_lookupd(make_lookupd)
    b = start_broker(make_broker, lookupd)
    wait_for(lambda: node(lookupd, b) is not None, what="the broker's IDENTIFY")
    n = node(lookupd, b)
    assert (n["broadcast_address"], n["http_port"], n["version"]) == ("127.0.0.1", b.http_port, "1.3.0")

    post(b, "/topic/create?topic=lonely")                        # a topic without channels
    post(b, "/topic/create?topic=orders")
    post(b, "/channel/create?topic=orders&channel=billing")
    post(b, "/pub?topic=published", b"hello")                    # created by a publish
    sub = Connection.connect(b.tcp_address)                      # an ephemeral topic and channel
    sub.identify()
    sub.sub("live#ephemeral", "watch#ephemeral")
    wanted = ["live#ephemeral", "lonely", "orders", "published"]
    wait_for(lambda: topics_of(lookupd, b) == wanted, what=f"topics {wanted}")
    assert lookupd.get("/channels?topic=orders")["channels"] == ["billing"]
    assert channel_producers(lookupd, "orders", "billing") == [b.tcp_port]
    assert lookupd.get("/channels?topic=live%23ephemeral")["channels"] == ["watch#ephemeral"]
    (producer,) = lookupd.get("/lookup?topic=orders")["producers"]
    assert producer["tcp_port"] == b.tcp_port

    # the last consumer of an ephemeral channel leaves: channel and topic go, as in nsqd
    sub.close()
    wait_for(lambda: topics_of(lookupd, b) == ["lonely", "orders", "published"], what="ephemeral topic gone")
    assert lookupd.get("/channels?topic=live%23ephemeral")["channels"] == []

    post(b, "/channel/delete?topic=orders&channel=billing")
    wait_for(lambda: channel_producers(lookupd, "orders", "billing") == [], what="channel unregistered")
    post(b, "/topic/delete?topic=lonely")
    wait_for(lambda: topics_of(lookupd, b) == ["orders", "published"], what="topic unregistered")
    assert lookupd.get("/lookup?topic=lonely")["producers"] == []

    # a graceful stop closes the connection: the lookupd forgets the broker at once
    assert b.stop() == 0
    wait_for(lambda: node(lookupd, b) is None, what="the broker gone from /nodes")


def test_a_restarted_lookupd_gets_everything_again(make_lookupd, make_broker):
    first = start_lookupd(make_lookupd)
    tcp, http = first.tcp_port, first.http_port
    b = start_broker(make_broker, first)
    post(b, "/topic/create?topic=kept")
    post(b, "/channel/create?topic=kept&channel=c1")
    post(b, "/topic/create?topic=bare")
    wait_for(lambda: topics_of(first, b) == ["bare", "kept"], what="registered")
    assert first.stop() == 0
    # the same ports again: the broker only knows this address
    again = start_lookupd(make_lookupd, f"-tcp-address=127.0.0.1:{tcp}", f"-http-address=127.0.0.1:{http}")
    wait_for(lambda: topics_of(again, b) == ["bare", "kept"], timeout=20, what="re-registered after restart")
    assert again.get("/channels?topic=kept")["channels"] == ["c1"]
    assert "LOOKUPD(127.0.0.1:%d)" % tcp in b.log_text()


def test_restarted_acceptor_0_and_router_converge(make_lookupd, make_broker):
    lookupd = start_lookupd(make_lookupd)
    b = start_broker(make_broker, lookupd, extra=("--routers", "2"))
    names = [f"topic{i}" for i in range(6)]
    for name in names:
        post(b, f"/topic/create?topic={name}")
        post(b, f"/channel/create?topic={name}&channel=ch")
    wait_for(lambda: topics_of(lookupd, b) == names, what="registered")
    before = node(lookupd, b)["remote_address"]

    # acceptor 0 holds the lookupd connection: a new one registers everything again
    os.kill(b.children()["nsqmp acceptor 0"], signal.SIGKILL)
    wait_for(lambda: (node(lookupd, b) or {}).get("remote_address") not in (None, before),
             what="a new connection")
    wait_for(lambda: topics_of(lookupd, b) == names, what="re-registered by the new acceptor 0")
    assert all(channel_producers(lookupd, name, "ch") == [b.tcp_port] for name in names)

    # a router restarted after its topics changed: what it owns is told again
    post(b, "/topic/create?topic=late")
    wait_for(lambda: "late" in (topics_of(lookupd, b) or []), what="late topic")
    os.kill(b.children()["nsqmp router 1"], signal.SIGKILL)
    wait_for(lambda: "nsqmp router 1" in b.children(), what="router 1 back")
    post(b, "/topic/create?topic=later")
    wait_for(lambda: topics_of(lookupd, b) == sorted(names + ["late", "later"]), what="all topics")
    assert all(channel_producers(lookupd, name, "ch") == [b.tcp_port] for name in names)


@pytest.mark.slow
def test_pings_keep_a_broker_active_and_a_hung_one_expires(make_lookupd, make_broker):
    """Nothing but PING (every 15 s) refreshes a producer: with an 18 s inactive timeout a
    live broker stays listed past it, a stopped (hung, still connected) one does not."""
    lookupd = start_lookupd(make_lookupd, "-inactive-producer-timeout=18s")
    live = start_broker(make_broker, lookupd)
    hung = start_broker(make_broker, lookupd)
    for b in (live, hung):
        post(b, "/topic/create?topic=beat")
    wait_for(lambda: len(lookupd.get("/lookup?topic=beat")["producers"]) == 2, what="both registered")
    os.killpg(hung.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(21)  # the time is what is tested: past the 18 s inactive timeout
        ports = [p["tcp_port"] for p in lookupd.get("/lookup?topic=beat")["producers"]]
        assert ports == [live.tcp_port]
        assert node(lookupd, hung) is None and node(lookupd, live) is not None
    finally:
        os.killpg(hung.proc.pid, signal.SIGCONT)


def test_put_config_switches_lookupds_at_run_time(make_lookupd, make_broker):
    old, new = start_lookupd(make_lookupd), start_lookupd(make_lookupd)
    b = start_broker(make_broker, old)
    post(b, "/topic/create?topic=moving")
    wait_for(lambda: topics_of(old, b) == ["moving"], what="registered with the first lookupd")

    status, body, _ = b.http("PUT", "/config/nsqlookupd_tcp_addresses", orjson.dumps([new.tcp_address]))
    assert (status, orjson.loads(body)) == (200, [new.tcp_address])
    wait_for(lambda: topics_of(new, b) == ["moving"], what="registered with the new lookupd")
    wait_for(lambda: node(old, b) is None, what="gone from the old lookupd")
    # every acceptor answers the same (each new connection may land on another acceptor)
    for _ in range(8):
        assert b.http("GET", "/config/nsqlookupd_tcp_addresses")[:2] == (200, orjson.dumps([new.tcp_address]))

    # a restarted acceptor 0 connects to the set changed at run time, not the start-up one
    registrar = node(new, b)["remote_address"]
    os.kill(b.children()["nsqmp acceptor 0"], signal.SIGKILL)
    wait_for(lambda: "nsqmp acceptor 0" in b.children(), what="acceptor 0 back")
    wait_for(lambda: (n := node(new, b)) is not None and n["remote_address"] != registrar
             and sorted(n["topics"]) == ["moving"], what="registered again with the new lookupd")
    assert node(old, b) is None

    # both, then none (null is the empty list, as Go reads it)
    both = orjson.dumps([old.tcp_address, new.tcp_address])
    assert b.http("PUT", "/config/nsqlookupd_tcp_addresses", both)[:2] == (200, both)
    wait_for(lambda: topics_of(old, b) == ["moving"], what="registered with both")
    assert b.http("PUT", "/config/nsqlookupd_tcp_addresses", b"null")[:2] == (200, b"[]")
    wait_for(lambda: node(old, b) is None and node(new, b) is None, what="registered nowhere")


@pytest.mark.parametrize("path, body, status, message", [
    ("/config/nsqlookupd_tcp_addresses", b"[not json", 400, "INVALID_VALUE"),
    ("/config/nsqlookupd_tcp_addresses", b'"127.0.0.1:4160"', 400, "INVALID_VALUE"),
    ("/config/nsqlookupd_tcp_addresses", b'["no port here"]', 400, "INVALID_VALUE"),
    ("/config/nsqlookupd_tcp_addresses", b"[4160]", 400, "INVALID_VALUE"),
    ("/config/nsqlookupd_tcp_addresses", b"", 413, "INVALID_VALUE"),
    ("/config/log_level", b"loud", 400, "INVALID_VALUE"),
    ("/config/mem_queue_size", b"5", 400, "INVALID_OPTION"),
])
def test_put_config_refuses_bad_values(broker, path, body, status, message):
    assert broker.http("PUT", path, body)[:2] == (status, orjson.dumps({"message": message}))
    assert broker.http("GET", "/config/nsqlookupd_tcp_addresses")[:2] == (200, b"[]")


def test_put_config_log_level(make_broker):
    b = make_broker("--acceptors", "2")
    assert b.http("PUT", "/config/log_level", b"DEBUG")[:2] == (200, b'"debug"')
    for _ in range(8):
        assert b.http("GET", "/config/log_level")[:2] == (200, b'"debug"')
    assert b.http("POST", "/config/log_level", b"info")[:2] == (405, b'{"message":"METHOD_NOT_ALLOWED"}')


def test_a_new_topic_first_gets_the_channels_other_brokers_have(make_lookupd, make_broker):
    """A channel that exists on broker A for a topic: the first message published to that
    topic on broker B, which never had it, is kept for that channel (nsqd's GetTopic)."""
    lookupd = start_lookupd(make_lookupd)
    a = start_broker(make_broker, lookupd)
    b = start_broker(make_broker, lookupd)
    post(a, "/topic/create?topic=orders")
    post(a, "/channel/create?topic=orders&channel=billing")
    post(a, "/channel/create?topic=orders&channel=audit")
    post(a, "/channel/create?topic=orders&channel=peek%23ephemeral")
    wait_for(lambda: sorted(lookupd.get("/channels?topic=orders")["channels"]) == ["audit", "billing", "peek#ephemeral"],
             what="the channels registered")
    post(b, "/pub?topic=orders", b"first")

    def channels_on_b() -> dict | None:
        topics = b.stats(topic="orders")["topics"]
        chans = topics[0]["channels"] if topics else []
        return {c["channel_name"]: c["depth"] for c in chans} or None

    # the ephemeral channel is not created: nobody subscribes to it on b (nsqd skips it too)
    assert wait_for(channels_on_b, what="channels on b") == {"audit": 1, "billing": 1}
    # and B registered them too
    wait_for(lambda: sorted(channel_producers(lookupd, "orders", "billing")) == sorted([a.tcp_port, b.tcp_port]),
             what="b registered the channel")
    with Connection.connect(b.tcp_address) as consumer:
        consumer.identify()
        consumer.sub("orders", "billing", rdy=1)
        msg = consumer.read_message()
        assert msg.body == b"first"
        consumer.fin(msg.id)


def test_without_lookupds_a_new_topic_waits_for_nothing(make_broker):
    """No lookupd configured: a published message goes to the topic's first channel as
    before (nothing is held)."""
    b = make_broker()
    post(b, "/pub?topic=plain", b"one")
    with Connection.connect(b.tcp_address) as consumer:
        consumer.identify()
        consumer.sub("plain", "c", rdy=1)
        assert consumer.read_message().body == b"one"


def test_an_unreachable_lookupd_does_not_hold_messages_back(make_broker):
    """The only lookupd never answers: a new topic's message is delivered at once (there
    is no lookupd to ask, as in nsqd), and the broker keeps trying to connect."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    # were it held until the request timeout (60 s), the read below (10 s) would time out
    b = make_broker(*BROADCAST, "--lookupd-tcp-address", f"127.0.0.1:{port}",
                    "--http-client-request-timeout", "60s")
    with Connection.connect(b.tcp_address, timeout=10.0) as consumer:
        consumer.identify()
        consumer.sub("soon", "c", rdy=1)
        post(b, "/pub?topic=soon", b"now")
        assert consumer.read_message().body == b"now"
    wait_for(lambda: b.log_text().count(f"LOOKUPD(127.0.0.1:{port})") >= 2, what="reconnection attempts")


def test_a_new_topic_holds_its_messages_until_the_lookupds_answer(make_lookupd, make_broker):
    """The lookupd stops answering (SIGSTOP) after the broker identified: a new topic's
    message waits, assigned to no channel, for the request timeout; channels subscribed
    meanwhile get it once it goes on, and a kill -9 right after loses it for none of them."""
    lookupd = start_lookupd(make_lookupd)
    args = [*BROADCAST, "--lookupd-tcp-address", lookupd.tcp_address, "--http-client-request-timeout", "3s"]
    b = make_broker(*args, data="held")
    wait_for(lambda: node(lookupd, b) is not None, what="identified")
    os.kill(lookupd.proc.pid, signal.SIGSTOP)
    try:
        post(b, "/pub?topic=held", b"waiting")
        one, two = Connection.connect(b.tcp_address), Connection.connect(b.tcp_address)
        for conn, channel in ((one, "one"), (two, "two")):
            conn.identify()
            conn.sub("held", channel, rdy=1)
        (topic,) = b.stats(topic="held")["topics"]
        assert topic["depth"] == 1  # held by the topic ...
        assert {c["channel_name"]: c["depth"] + c["in_flight_count"] for c in topic["channels"]} == {"one": 0, "two": 0}
        # ... until the request timeout: then both channels have it
        assert one.read_message().body == b"waiting"
        assert two.read_message().body == b"waiting"
    finally:
        os.kill(lookupd.proc.pid, signal.SIGCONT)
    b.kill()  # neither FIN'd: after a restart both channels still owe it
    one.close()
    two.close()
    again = make_broker(*args, data="held")
    (topic,) = again.stats(topic="held")["topics"]
    assert {c["channel_name"]: c["depth"] for c in topic["channels"]} == {"one": 1, "two": 1}


def test_broadcast_options_are_what_the_lookupd_hands_out(make_lookupd, make_broker):
    lookupd = start_lookupd(make_lookupd)
    make_broker("--lookupd-tcp-address", lookupd.tcp_address, "--broadcast-address", "broker-7.example.com",
                "--broadcast-tcp-port", "4999", "--broadcast-http-port", "5999",
                "--topology-zone", "z1", "--topology-region", "r1")
    (producer,) = wait_for(lambda: lookupd.get("/nodes")["producers"], what="identified")
    assert {k: producer[k] for k in ("broadcast_address", "tcp_port", "http_port", "topology_zone",
                                     "topology_region")} == {
        "broadcast_address": "broker-7.example.com", "tcp_port": 4999, "http_port": 5999,
        "topology_zone": "z1", "topology_region": "r1"}


def test_emptying_a_topic_that_holds_its_messages_drops_them(make_lookupd, make_broker):
    lookupd = start_lookupd(make_lookupd)
    b = make_broker(*BROADCAST, "--lookupd-tcp-address", lookupd.tcp_address, "--http-client-request-timeout", "2s")
    wait_for(lambda: node(lookupd, b) is not None, what="identified")
    os.kill(lookupd.proc.pid, signal.SIGSTOP)
    try:
        post(b, "/mpub?topic=emptied", b"a\nb\nc")
        # /stats may be served by the other acceptor, whose request can pass the hand-off
        wait_for(lambda: [t["depth"] for t in b.stats(topic="emptied")["topics"]] == [3], what="held")
        post(b, "/topic/empty?topic=emptied")
        assert b.stats(topic="emptied")["topics"][0]["depth"] == 0
        post(b, "/pub?topic=emptied", b"after")
        post(b, "/channel/create?topic=emptied&channel=c")
        # once the request timeout passed, the channel has only what came after the empty
        wait_for(lambda: [c["depth"] for c in b.stats(topic="emptied")["topics"][0]["channels"]] == [1]
                 and b.stats(topic="emptied")["topics"][0]["depth"] == 0, what="released")
    finally:
        os.kill(lookupd.proc.pid, signal.SIGCONT)
    with Connection.connect(b.tcp_address) as consumer:
        consumer.identify()
        consumer.sub("emptied", "c", rdy=5)
        assert consumer.read_message().body == b"after"
