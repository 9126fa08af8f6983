"""Delivery guarantees through the timer: timeouts, REQ, TOUCH, deferred (DPUB, /pub?defer)."""
from __future__ import annotations

import time

import pytest

from nsqmp.client import Connection
from nsqmp.client import wire
from tests.harness import channel_stats, nothing_within, wait_for


def consumer(broker, topic: str, channel: str, rdy: int = 10, **identify) -> Connection:
    c = Connection.connect(broker.tcp_address)
    c.identify(**identify)
    c.sub(topic, channel, rdy=rdy)
    return c


def test_dpub_is_held_until_due(broker):
    c = consumer(broker, "later", "ch")
    with Connection.connect(broker.tcp_address) as p:
        t0 = time.monotonic()
        p.send(wire.dpub("later", 700, b"deferred"))
        p.expect_ok()
        p.pub("later", b"now")
    first = c.read_message()
    assert first.body == b"now"
    wait_for(lambda: channel_stats(broker, "later", "ch")["deferred_count"] == 1, what="deferred_count 1")
    second = c.read_message()
    waited = time.monotonic() - t0
    assert second.body == b"deferred" and second.attempts == 1
    assert 0.65 <= waited < 3.0, waited
    c.close()


def test_http_pub_defer(broker):
    c = consumer(broker, "hdefer", "ch")
    t0 = time.monotonic()
    status, body, _ = broker.http("POST", "/pub?topic=hdefer&defer=500", b"x")
    assert (status, body) == (200, b"OK")
    m = c.read_message()
    assert m.body == b"x" and time.monotonic() - t0 >= 0.45
    for bad in ("-1", "abc", str(3600 * 1000 + 1), "1_0", "%2010", "10%20", "1.5"):
        status, body, _ = broker.http("POST", f"/pub?topic=hdefer&defer={bad}", b"x")
        assert (status, body) == (400, b'{"message":"INVALID_DEFER"}'), bad
    # Go's ParseInt takes a sign
    status, body, _ = broker.http("POST", "/pub?topic=hdefer&defer=%2B1", b"plus")
    assert (status, body) == (200, b"OK")
    assert c.read_message().body == b"plus"
    c.close()


def test_dpub_reaches_every_channel_that_existed(broker):
    a = consumer(broker, "fan", "a")
    b = consumer(broker, "fan", "b")
    with Connection.connect(broker.tcp_address) as p:
        p.send(wire.dpub("fan", 300, b"both"))
        p.expect_ok()
    assert a.read_message().body == b"both"
    assert b.read_message().body == b"both"
    a.close()
    b.close()


def test_timeout_redelivers_with_attempts_plus_one(broker):
    c = consumer(broker, "slow", "ch", msg_timeout=1000)
    with Connection.connect(broker.tcp_address) as p:
        p.pub("slow", b"work")
    m1 = c.read_message()
    t0 = time.monotonic()
    m2 = c.read_message()  # not FIN'd: comes back after ~1 s
    assert m2.id == m1.id and m2.attempts == 2
    assert 0.9 <= time.monotonic() - t0 < 3.0
    c.fin(m2.id)
    wait_for(lambda: channel_stats(broker, "slow", "ch")["timeout_count"] == 1, what="timeout_count 1")
    c.close()


def test_req_zero_and_with_delay(broker):
    c = consumer(broker, "retry", "ch")
    with Connection.connect(broker.tcp_address) as p:
        p.pub("retry", b"r")
    m = c.read_message()
    c.send(wire.req(m.id, 0))
    again = c.read_message()
    assert again.id == m.id and again.attempts == 2
    t0 = time.monotonic()
    c.send(wire.req(m.id, 600))
    wait_for(lambda: channel_stats(broker, "retry", "ch")["deferred_count"] == 1, what="deferred after REQ")
    third = c.read_message()
    assert third.attempts == 3 and time.monotonic() - t0 >= 0.55
    c.fin(third.id)
    stats = channel_stats(broker, "retry", "ch")
    assert stats["requeue_count"] == 2
    wait_for(lambda: channel_stats(broker, "retry", "ch")["clients"][0]["requeue_count"] == 2, what="client requeues")
    c.close()


def test_touch_extends_the_deadline(broker):
    c = consumer(broker, "touchy", "ch", msg_timeout=1000)
    with Connection.connect(broker.tcp_address) as p:
        p.pub("touchy", b"t")
    m = c.read_message()
    for _ in range(4):  # 2 s of work, touched every 0.5 s: never times out
        time.sleep(0.5)  # the work: the time that passes is what is tested
        c.send(wire.touch(m.id))
    c.fin(m.id)
    c.send(wire.NOP)
    wait_for(lambda: channel_stats(broker, "touchy", "ch")["in_flight_count"] == 0, what="the FIN")
    stats = channel_stats(broker, "touchy", "ch")
    assert stats["timeout_count"] == 0 and stats["in_flight_count"] == 0
    c.close()


@pytest.mark.parametrize("cmd", ["FIN", "REQ", "TOUCH"])
def test_only_the_owner_may_fin_req_touch(broker, cmd):
    owner = consumer(broker, "own", "ch")
    other = consumer(broker, "own", "ch", rdy=0)
    with Connection.connect(broker.tcp_address) as p:
        p.pub("own", b"o")
    m = owner.read_message()
    line = {"FIN": wire.fin(m.id), "REQ": wire.req(m.id, 0), "TOUCH": wire.touch(m.id)}[cmd]
    other.send(line)
    frame = other.read_frame()
    assert frame.type == wire.FRAME_ERROR
    assert frame.data == f"E_{cmd}_FAILED {cmd} {m.id.decode()} failed client does not own message".encode()
    # non-fatal: the connection still works
    other.pub("own", b"still-open")
    owner.fin(m.id)
    owner.close()
    other.close()


def test_req_of_unknown_id_is_not_fatal(broker):
    c = consumer(broker, "unk", "ch")
    c.send(b"REQ 0123456789abcdef 0\n")
    frame = c.read_frame()
    assert frame.data == b"E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight"
    c.pub("unk", b"ok-after")
    c.close()


@pytest.mark.parametrize("line,text", [
    (b"REQ 0123456789abcdef\n", b"E_INVALID REQ insufficient number of params"),
    (b"REQ 0123456789abcdef x\n", b"E_INVALID REQ could not parse timeout x"),
    (b"TOUCH\n", b"E_INVALID TOUCH insufficient number of params"),
    (b"TOUCH short\n", b"E_INVALID Invalid Message ID"),
])
def test_req_touch_bad_input_is_fatal(broker, line, text):
    c = consumer(broker, "bad", "ch")
    c.send(line)
    assert c.read_frame().data == text
    with pytest.raises((EOFError, ConnectionResetError)):
        c.read_frame()
    c.close()


@pytest.mark.parametrize("line,text", [
    (b"DPUB t\n", b"E_INVALID DPUB insufficient number of parameters"),
    (b"DPUB t abc\n", b"E_INVALID DPUB could not parse timeout abc"),
    (b"DPUB t 3600001\n", b"E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
    (b"DPUB bad!name 10\n", b'E_BAD_TOPIC DPUB topic name "bad!name" is not valid'),
])
def test_dpub_bad_input(broker, line, text):
    with Connection.connect(broker.tcp_address) as c:
        c.send(line)
        assert c.read_frame().data == text


def test_req_delay_is_clamped_to_max_req_timeout(tmp_path):
    from tests.harness import Broker

    b = Broker(tmp_path / "data", "--max-req-timeout", "1s").start()
    try:
        c = consumer(b, "clamp", "ch")
        with Connection.connect(b.tcp_address) as p:
            p.pub("clamp", b"c")
        m = c.read_message()
        t0 = time.monotonic()
        c.send(wire.req(m.id, 3_600_000))  # clamped to 1 s, no error
        again = c.read_message()
        assert again.id == m.id and 0.9 <= time.monotonic() - t0 < 3.0
        c.close()
    finally:
        assert b.stop() == 0


def test_deferred_survives_a_timer_restart(broker):
    c = consumer(broker, "tk", "ch")
    with Connection.connect(broker.tcp_address) as p:
        p.send(wire.dpub("tk", 1500, b"late"))
        p.expect_ok()
    wait_for(lambda: channel_stats(broker, "tk", "ch")["deferred_count"] == 1, what="deferred")
    import os
    import signal

    old = broker.children()["nsqmp timer"]
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: broker.children().get("nsqmp timer") not in (None, old), what="new timer")
    assert c.read_message().body == b"late"
    c.close()


def test_no_error_frames_leak(broker):
    """FIN of a message already finished gives E_FIN_FAILED, never a close."""
    c = consumer(broker, "dup", "ch")
    with Connection.connect(broker.tcp_address) as p:
        p.pub("dup", b"d")
    m = c.read_message()
    c.fin(m.id)
    c.fin(m.id)
    frame = c.read_frame()
    assert frame.data.startswith(b"E_FIN_FAILED")
    c.pub("dup", b"after")
    c.close()


def test_pipelined_fins_with_a_bad_id_among_them(broker):
    """FINs sent in one write reach the router as one record: each good ID is finished,
    the bad one alone gets E_FIN_FAILED, in its place, and the connection stays open."""
    c = consumer(broker, "pipelined", "ch", rdy=3)
    with Connection.connect(broker.tcp_address) as p:
        p.mpub("pipelined", [b"a", b"b", b"c"])
    ids = [c.read_message().id for _ in range(3)]
    c.send(wire.fin(ids[0]) + wire.fin(b"0123456789abcdef") + wire.fin(ids[1]) + wire.fin(ids[1])
           + wire.fin(ids[2]))
    errors = [c.read_frame().data for _ in range(2)]
    assert errors == [b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight",
                      b"E_FIN_FAILED FIN " + ids[1] + b" failed ID not in flight"]
    wait_for(lambda: channel_stats(broker, "pipelined", "ch")["in_flight_count"] == 0, what="all finished")
    stats = channel_stats(broker, "pipelined", "ch")
    assert stats["clients"][0]["finish_count"] == 3
    assert stats["depth"] == 0
    c.pub("pipelined", b"still open")
    c.close()


def test_messages_of_one_delivery_leave_their_shared_deadline_one_by_one(broker):
    """Messages handed out in one pass share one timer entry: a FIN'd one is gone, a
    TOUCHed one gets its own later deadline, and the one left alone still times out."""
    c = consumer(broker, "pass", "ch", rdy=0, msg_timeout=2000)
    with Connection.connect(broker.tcp_address) as p:
        p.mpub("pass", [b"a", b"b", b"c"])
    wait_for(lambda: channel_stats(broker, "pass", "ch")["depth"] == 3, what="3 queued")
    c.send(wire.rdy(3))
    a, b, cc = (c.read_message() for _ in range(3))
    t0 = time.monotonic()
    c.fin(a.id)
    time.sleep(1.0)  # the deadlines move with time: b is touched 1 s into its flight
    c.send(wire.touch(b.id))  # b's deadline: about t0 + 3 s
    again = c.read_message()  # c's, about t0 + 2 s
    assert again.id == cc.id and again.attempts == 2
    assert 1.5 <= time.monotonic() - t0 < 2.9
    c.fin(again.id)
    c.fin(b.id)  # still in flight thanks to the TOUCH
    c.send(wire.NOP)
    wait_for(lambda: channel_stats(broker, "pass", "ch")["in_flight_count"] == 0, what="all finished")
    stats = channel_stats(broker, "pass", "ch")
    assert stats["timeout_count"] == 1
    assert stats["clients"][0]["finish_count"] == 3
    nothing_within(c, 1.3)  # past b's touched deadline: nothing comes back
    assert channel_stats(broker, "pass", "ch")["timeout_count"] == 1
    c.close()


def test_passes_over_many_consumers_and_channels_send_each_its_own(broker):
    """Passes larger than the router's push step and a channel's turn (2,048 messages
    each): frames go to the acceptors in the middle of a pass and a channel goes to the
    back of the pass after its turn. Every consumer of both channels still gets exactly
    its RDY of distinct messages, in queue order within its connection, none twice."""
    names = ("ch", "other")
    consumers = {name: [consumer(broker, "wide", name, rdy=0) for _ in range(3)] for name in names}
    bodies = [b"%05d" % i for i in range(6000)]
    with Connection.connect(broker.tcp_address) as p:
        for start in range(0, len(bodies), 1000):
            p.mpub("wide", bodies[start:start + 1000])
    for name in names:
        wait_for(lambda: channel_stats(broker, "wide", name)["depth"] == 6000, what="6000 queued")
    for name in names:  # sent back to back: one pass usually serves several of them
        for c in consumers[name]:
            c.send(wire.rdy(2000))
    for name in names:
        got = []
        for c in consumers[name]:
            mine = [c.read_message().body for _ in range(2000)]
            assert mine == sorted(mine)
            got.extend(mine)
        assert sorted(got) == bodies
        assert channel_stats(broker, "wide", name)["in_flight_count"] == 6000
    for cs in consumers.values():
        for c in cs:
            c.close()


def test_a_timed_out_delivery_waiting_in_the_queue_is_not_in_flight(broker):
    """A delivery that timed out whole goes back to the queue in one step, its in-flight
    entries left behind stale (native/inflight.c, expire). Until its messages go out again
    they are queued, not in flight: FIN, TOUCH and REQ of them are refused, /stats counts
    them in depth; sent again, they carry attempts 2, and a FIN then counts."""
    c = consumer(broker, "stale", "ch", rdy=0, msg_timeout=1000)
    with Connection.connect(broker.tcp_address) as p:
        p.mpub("stale", [b"a", b"b", b"c"])
    wait_for(lambda: channel_stats(broker, "stale", "ch")["depth"] == 3, what="3 queued")
    c.send(wire.rdy(2))
    first = [c.read_message() for _ in range(2)]
    c.send(wire.rdy(0))  # nothing more for now: the timed-out two wait in the queue
    stats = wait_for(lambda: (s := channel_stats(broker, "stale", "ch"))["timeout_count"] == 2 and s,
                     what="both timed out")
    assert (stats["depth"], stats["in_flight_count"], stats["clients"][0]["in_flight_count"]) == (3, 0, 0)
    m = first[0]
    c.send(wire.fin(m.id) + wire.touch(m.id) + wire.req(m.id, 0))
    assert [c.read_frame().data for _ in range(3)] == [
        b"E_FIN_FAILED FIN %s failed ID not in flight" % m.id,
        b"E_TOUCH_FAILED TOUCH %s failed ID not in flight" % m.id,
        b"E_REQ_FAILED REQ %s failed ID not in flight" % m.id,
    ]
    c.send(wire.rdy(3))
    again = [c.read_message() for _ in range(3)]
    assert sorted((x.body, x.attempts) for x in again) == [(b"a", 2), (b"b", 2), (b"c", 1)]
    assert {x.id for x in again if x.attempts == 2} == {x.id for x in first}
    for x in again:
        c.fin(x.id)
    c.send(wire.NOP)
    stats = wait_for(lambda: (s := channel_stats(broker, "stale", "ch"))["in_flight_count"] == 0 and s,
                     what="all finished")
    assert (stats["depth"], stats["timeout_count"], stats["requeue_count"]) == (0, 2, 0), stats
    assert stats["clients"][0]["finish_count"] == 3
    c.close()


def test_timed_out_messages_waiting_in_the_queue_are_dropped_by_empty(broker):
    """EMPTY while a timed-out delivery waits in the queue: gone (each once: the stale
    in-flight entries are not counted again), and the channel goes on with new messages."""
    c = consumer(broker, "stale_empty", "ch", rdy=0, msg_timeout=1000)
    with Connection.connect(broker.tcp_address) as p:
        p.mpub("stale_empty", [b"a", b"b"])
    wait_for(lambda: channel_stats(broker, "stale_empty", "ch")["depth"] == 2, what="2 queued")
    c.send(wire.rdy(2))
    first = [c.read_message() for _ in range(2)]
    c.send(wire.rdy(0))
    wait_for(lambda: channel_stats(broker, "stale_empty", "ch")["timeout_count"] == 2, what="both timed out")
    assert broker.http("POST", "/channel/empty?topic=stale_empty&channel=ch")[0] == 200
    stats = channel_stats(broker, "stale_empty", "ch")
    assert (stats["depth"], stats["in_flight_count"]) == (0, 0), stats
    c.send(wire.fin(first[0].id))
    assert c.read_frame().data == b"E_FIN_FAILED FIN %s failed ID not in flight" % first[0].id
    with Connection.connect(broker.tcp_address) as p:
        p.pub("stale_empty", b"after")
    c.send(wire.rdy(5))
    m = c.read_message()
    assert (m.body, m.attempts) == (b"after", 1)
    c.fin(m.id)
    c.send(wire.NOP)
    wait_for(lambda: channel_stats(broker, "stale_empty", "ch")["in_flight_count"] == 0, what="finished")
    assert channel_stats(broker, "stale_empty", "ch")["depth"] == 0
    c.close()
