"""nsqd 1.3.0 behaviours that need their own broker flags or several clients:
--max-channel-consumers, sample_rate, #ephemeral deletion, /stats producers."""
from __future__ import annotations

import time

import orjson
import pytest

from nsqmp.acceptor.producers import FLUSH_INTERVAL
from nsqmp.client import Connection
from nsqmp.client import wire
from tests.harness import nothing_within, wait_for


def _consumer(broker, topic: str, channel: str, rdy: int = 0, **identify) -> Connection:
    c = Connection.connect(broker.tcp_address)
    if identify:
        c.identify(**identify)
    c.sub(topic, channel, rdy=rdy)
    return c


def _channels(broker, topic: str) -> dict[str, dict]:
    for t in broker.stats(topic=topic)["topics"]:
        if t["topic_name"] == topic:
            return {ch["channel_name"]: ch for ch in t["channels"]}
    return {}


def test_max_channel_consumers_refuses_the_next_sub_and_closes(make_broker):
    broker = make_broker("--max-channel-consumers", "2")
    first = _consumer(broker, "limited", "ch")
    second = _consumer(broker, "limited", "ch")
    third = Connection.connect(broker.tcp_address)
    third.send(wire.sub("limited", "ch"))
    frame = third.read_frame()
    assert (frame.type, frame.data) == (
        wire.FRAME_ERROR, b"E_SUB_FAILED SUB failed consumers for limited:ch exceeds limit of 2")
    with pytest.raises((EOFError, ConnectionResetError)):
        third.read_frame()
    third.close()
    # the limit is per channel: another channel of the same topic still takes consumers
    other = _consumer(broker, "limited", "other")
    # a consumer leaving makes room again
    second.close()
    wait_for(lambda: _channels(broker, "limited")["ch"]["client_count"] == 1, what="one consumer left")
    again = _consumer(broker, "limited", "ch")
    for c in (first, other, again):
        c.close()


def test_sample_rate_delivers_a_sample_and_drops_the_rest(broker):
    sampled = _consumer(broker, "sampled", "few", rdy=1000, sample_rate=10)
    full = _consumer(broker, "sampled", "all", rdy=1000)
    with Connection.connect(broker.tcp_address) as p:
        for i in range(0, 600, 100):
            p.mpub("sampled", [b"m%d" % n for n in range(i, i + 100)])
    # the unsampled channel gets everything; the sampled one about 11 % (a draw 0..99 <= 10)
    got_all = {full.read_message().body for _ in range(600)}
    assert len(got_all) == 600
    wait_for(lambda: _channels(broker, "sampled")["few"]["depth"] == 0, what="sampled channel drained")
    few = _channels(broker, "sampled")["few"]
    kept = few["in_flight_count"]
    assert 10 <= kept <= 160, kept  # 600 draws at p=0.11: mean 66, these bounds are > 8 sigma
    bodies = [sampled.read_message().body for _ in range(kept)]
    assert len(set(bodies)) == kept and set(bodies) <= got_all
    assert few["clients"][0]["sample_rate"] == 10
    assert few["clients"][0]["message_count"] == kept
    sampled.close()
    full.close()


def test_sample_rate_over_timed_out_messages_waiting_in_the_queue(broker):
    """Messages that timed out whole wait in the queue with their in-flight entries left
    stale (native/inflight.c); a sampling consumer that skips some of them drops those
    entries too: the skipped are gone for good, the kept ones come with attempts 2."""
    first = Connection.connect(broker.tcp_address)
    first.identify(msg_timeout=1000)
    first.sub("sampled_again", "ch", rdy=0)
    with Connection.connect(broker.tcp_address) as p:
        p.mpub("sampled_again", [b"m%d" % n for n in range(300)])
    wait_for(lambda: _channels(broker, "sampled_again")["ch"]["depth"] == 300, what="300 queued")
    first.send(wire.rdy(300))
    ids = {first.read_message().id for _ in range(300)}
    first.send(wire.rdy(0))
    wait_for(lambda: _channels(broker, "sampled_again")["ch"]["timeout_count"] == 300, what="all timed out")
    sampled = _consumer(broker, "sampled_again", "ch", rdy=300, sample_rate=10)
    wait_for(lambda: _channels(broker, "sampled_again")["ch"]["depth"] == 0, what="sampled the queue")
    kept = _channels(broker, "sampled_again")["ch"]["in_flight_count"]
    assert 5 <= kept <= 90, kept  # 300 draws at p=0.11: mean 33, these bounds are > 5 sigma
    again = [sampled.read_message() for _ in range(kept)]
    assert {m.attempts for m in again} == {2} and {m.id for m in again} <= ids
    for m in again:
        sampled.fin(m.id)
    sampled.send(wire.NOP)
    wait_for(lambda: _channels(broker, "sampled_again")["ch"]["in_flight_count"] == 0, what="finished")
    first.send(wire.rdy(300))
    nothing_within(first, 1.5)  # nothing is left to come back, past a msg_timeout
    ch = _channels(broker, "sampled_again")["ch"]
    assert (ch["depth"], ch["in_flight_count"], ch["timeout_count"]) == (0, 0, 300), ch
    sampled.close()
    first.close()


def _topics(broker) -> set[str]:
    return {t["topic_name"] for t in broker.stats()["topics"]}


def test_ephemeral_channel_goes_with_its_last_consumer(broker):
    a = _consumer(broker, "eph-durable", "c#ephemeral")
    b = _consumer(broker, "eph-durable", "c#ephemeral")
    with Connection.connect(broker.tcp_address) as p:
        p.pub("eph-durable", b"queued, never read")
    a.close()
    wait_for(lambda: _channels(broker, "eph-durable")["c#ephemeral"]["client_count"] == 1, what="one left")
    b.close()
    wait_for(lambda: "c#ephemeral" not in _channels(broker, "eph-durable"), what="ephemeral channel deleted")
    assert "eph-durable" in _topics(broker)  # a durable topic stays
    # a new channel of the same name starts afresh: what the old one held went with it
    c = _consumer(broker, "eph-durable", "c#ephemeral", rdy=10)
    with Connection.connect(broker.tcp_address) as p:
        p.pub("eph-durable", b"fresh")
    assert c.read_message().body == b"fresh"
    c.close()
    # a channel created over HTTP without consumers is not deleted
    status, _, _ = broker.http("POST", "/channel/create?topic=eph-durable&channel=idle%23ephemeral")
    assert status == 200
    wait_for(lambda: "c#ephemeral" not in _channels(broker, "eph-durable"), what="c#ephemeral gone again")
    assert "idle#ephemeral" in _channels(broker, "eph-durable")


def test_ephemeral_topic_goes_with_its_last_channel(broker):
    with Connection.connect(broker.tcp_address) as p:
        p.pub("et#ephemeral", b"no channel yet")
    # the router takes the message after the OK: wait for it; a topic without channels stays
    wait_for(lambda: "et#ephemeral" in _topics(broker), what="the ephemeral topic")
    a = _consumer(broker, "et#ephemeral", "a#ephemeral", rdy=10)
    assert a.read_message().body == b"no channel yet"  # the first channel takes the backlog
    durable = _consumer(broker, "et#ephemeral", "b")
    a.close()
    wait_for(lambda: "a#ephemeral" not in _channels(broker, "et#ephemeral"), what="a#ephemeral deleted")
    durable.close()
    # a durable channel outlives its consumers, so the topic stays ...
    assert set(_channels(broker, "et#ephemeral")) == {"b"}
    # ... until that channel is deleted
    status, _, _ = broker.http("POST", "/channel/delete?topic=et%23ephemeral&channel=b")
    assert status == 200
    wait_for(lambda: "et#ephemeral" not in _topics(broker), what="ephemeral topic deleted")


def _producers(broker, **params) -> dict[str, dict]:
    return {p["client_id"]: p for p in broker.stats(**params)["producers"] or []}


def test_stats_producers_from_every_acceptor(make_broker):
    broker = make_broker("--acceptors", "2", "--acceptor-steering", "spread")  # both acceptors
    conns = []
    for i in range(6):  # SO_REUSEPORT spreads them over both acceptors
        c = Connection.connect(broker.tcp_address)
        c.identify(client_id=f"prod{i}", user_agent="test/1")
        for _ in range(i + 1):
            c.pub("pa", b"x")
        c.mpub("pb", [b"y"] * 3)
        conns.append(c)
    idle = Connection.connect(broker.tcp_address)  # never published: not a producer
    idle.identify(client_id="idle")
    want = {f"prod{i}": [{"topic": "pa", "count": i + 1}, {"topic": "pb", "count": 3}] for i in range(6)}

    def complete():
        got = _producers(broker)
        return got if {k: v.get("pub_counts") for k, v in got.items()} == want else None
    wait_for(complete, what="every producer in /stats")
    # the request that saw them may have reached the acceptor holding every connection
    # (SO_REUSEPORT can put all six on one); the other sees them through its snapshot,
    # at most FLUSH_INTERVAL old (the documented bound): wait that out
    time.sleep(FLUSH_INTERVAL + 0.2)
    # each request reaches either acceptor: every one of them sees all the producers
    for _ in range(6):
        got = _producers(broker)
        assert {k: v["pub_counts"] for k, v in got.items()} == want
    assert {p["nsqmp_acceptor"] for p in got.values()} <= {0, 1}
    p0 = got["prod0"]
    assert (p0["version"], p0["state"], p0["user_agent"], p0["tls"]) == ("V2", 0, "test/1", False)
    # the topic filter keeps only that topic's count
    only = _producers(broker, topic="pb")
    assert {k: v["pub_counts"] for k, v in only.items()} == {f"prod{i}": [{"topic": "pb", "count": 3}]
                                                              for i in range(6)}
    # the text format: one line per producer, as nsqd's ClientV2Stats.String()
    status, text, _ = broker.http("GET", "/stats?topic=pa")
    assert status == 200
    lines = text.decode().split("\n")
    at = lines.index("Producers:")
    prod_lines = sorted(lines[at + 1:at + 7])
    assert all(line.startswith("   [V2 127.0.0.1:") and " msgs: " in line and " topics: pa=" in line
               and " connected: " in line for line in prod_lines), prod_lines
    for c in conns:
        c.close()
    idle.close()
    wait_for(lambda: broker.stats()["producers"] is None, what="producers gone with their connections")

    # the acceptor that answered may not be the one the next request reaches, whose view of
    # the other's producers is a snapshot (at most FLUSH_INTERVAL old, later on a busy
    # machine): every request, in either format, comes to say None
    def none_in_text() -> bool:
        return all(broker.http("GET", "/stats")[1].decode().endswith("\nProducers: None\n") for _ in range(4))
    wait_for(none_in_text, what="Producers: None in the text form from either acceptor")


@pytest.mark.parametrize("fields, size, timeout", [
    ({}, 16384, 250),
    ({"output_buffer_size": -1}, 1, 0),  # unbuffered: no timed flush either
    ({"output_buffer_size": -1, "output_buffer_timeout": 1000}, 1, 0),
    ({"output_buffer_timeout": -1}, 16384, 0),
    ({"output_buffer_size": 64, "output_buffer_timeout": 25}, 64, 25),
    ({"output_buffer_size": 65536, "output_buffer_timeout": 30000}, 65536, 30000),
])
def test_identify_output_buffer_as_nsqd(broker, fields, size, timeout):
    with Connection.connect(broker.tcp_address) as c:
        answer = c.identify(**fields)
    assert (answer["output_buffer_size"], answer["output_buffer_timeout"]) == (size, timeout)


def test_identify_checks_the_output_buffer_timeout_before_the_size(broker):
    with Connection.connect(broker.tcp_address) as c:
        c.send(wire.identify({"output_buffer_size": 1, "output_buffer_timeout": 1}))
        frame = c.read_frame()
    assert frame.data == b"E_BAD_BODY IDENTIFY output buffer timeout (1) is invalid"


def test_start_time_is_the_brokers_on_every_acceptor(make_broker):
    import os
    import signal

    broker = make_broker("--acceptors", "2", "--acceptor-steering", "spread")  # both acceptors
    times = {broker.stats()["start_time"] for _ in range(8)}  # requests spread over both acceptors
    assert len(times) == 1
    [start] = times
    assert time.time() - 60 < start <= time.time()
    time.sleep(1.1)  # a second passes (start_time counts seconds): a respawned acceptor must not report its own
    acceptor = next(pid for name, pid in broker.children().items() if "acceptor" in name)
    os.kill(acceptor, signal.SIGKILL)
    wait_for(lambda: acceptor not in broker.children().values() and len(
        [n for n in broker.children() if "acceptor" in n]) == 2, what="the acceptor respawned")
    broker.wait_ping()
    assert {broker.stats()["start_time"] for _ in range(8)} == {start}
    info_times = {orjson.loads(broker.http("GET", "/info")[1])["start_time"] for _ in range(8)}
    assert info_times == {start}


def test_e2e_processing_latency_percentiles(make_broker):
    broker = make_broker("--e2e-processing-latency-percentile", "0.99,0.5")
    c = _consumer(broker, "lat", "ch", rdy=10)
    idle = _consumer(broker, "lat", "idle")  # no FIN there: count 0, values 0
    with Connection.connect(broker.tcp_address) as p:
        p.mpub("lat", [b"a", b"b", b"c"])
    time.sleep(0.2)  # the latency measured: every message waits at least this long before its FIN
    for _ in range(3):
        c.fin(c.read_message().id)

    def finished():
        [t] = broker.stats(topic="lat")["topics"]
        chans = {ch["channel_name"]: ch["e2e_processing_latency"] for ch in t["channels"]}
        return (t["e2e_processing_latency"], chans) if chans["ch"]["count"] == 3 else None
    topic_e2e, chans = wait_for(finished, what="three FINs counted")
    assert [p["quantile"] for p in chans["ch"]["percentiles"]] == [0.99, 0.5]
    assert all(0.2e9 <= p["value"] < 60e9 for p in chans["ch"]["percentiles"]), chans
    assert chans["idle"] == {"count": 0, "percentiles": [{"quantile": 0.99, "value": 0},
                                                         {"quantile": 0.5, "value": 0}]}
    assert topic_e2e["count"] == 3 and topic_e2e["percentiles"] == chans["ch"]["percentiles"]
    status, text, _ = broker.http("GET", "/stats?topic=lat")
    assert "e2e%: " in text.decode() and "ms, " in text.decode()
    c.close()
    idle.close()


def test_e2e_latency_off_by_default(broker):
    c = _consumer(broker, "nolat", "ch", rdy=1)
    with Connection.connect(broker.tcp_address) as p:
        p.pub("nolat", b"a")
    c.fin(c.read_message().id)
    wait_for(lambda: _channels(broker, "nolat")["ch"]["in_flight_count"] == 0, what="the FIN")
    [t] = broker.stats(topic="nolat")["topics"]
    assert t["e2e_processing_latency"] == t["channels"][0]["e2e_processing_latency"] == {
        "count": 0, "percentiles": None}
    c.close()
