"""Frames sent ahead of a consumer's credit (nsqmp.acceptor.ahead): held by the acceptor
and written one for each FIN or REQ, never so that a client has more than its RDY in
flight; back to the channel, their attempt not counted, when the consumer lowers its RDY,
sends CLS, goes, or stalls. Through the real processes, with RDY at or above
AHEAD_MIN_RDY (below it nothing is sent ahead)."""
from __future__ import annotations

import time

from nsqmp.client import Connection
from nsqmp.client import wire
from nsqmp.router.flight import AHEAD_MIN_RDY
from tests.harness import channel_stats, nothing_within, wait_for

RDY = AHEAD_MIN_RDY


def consumer(broker, topic: str, channel: str = "ch", rdy: int = RDY, **identify) -> Connection:
    c = Connection.connect(broker.tcp_address)
    c.identify(**identify)
    c.sub(topic, channel, rdy=rdy)
    return c


def publish(broker, topic: str, n: int) -> None:
    with Connection.connect(broker.tcp_address) as p:
        p.mpub(topic, [b"m%d" % i for i in range(n)])


def take(c: Connection, n: int) -> list[wire.Message]:
    return [c.read_message() for _ in range(n)]


def client(broker, topic: str) -> dict:
    clients = channel_stats(broker, topic, "ch")["clients"]
    assert len(clients) == 1, clients
    return clients[0]


def test_a_consumer_gets_its_rdy_and_one_more_for_each_fin(broker):
    """With a backlog three times its RDY, a consumer gets RDY messages and nothing more
    until it FINs; each FIN brings exactly one more (written by its acceptor at once)."""
    c = consumer(broker, "ahead_rdy")
    publish(broker, "ahead_rdy", 3 * RDY)
    got = take(c, RDY)
    # as many again were sent ahead, in the same pass: held by the acceptor (for HOLD_MAX_NS),
    # neither in flight nor gone from the queue for /stats
    stats = channel_stats(broker, "ahead_rdy", "ch")
    mine = stats["clients"][0]
    assert (stats["depth"], stats["in_flight_count"]) == (2 * RDY, RDY)
    assert (mine["in_flight_count"], mine["message_count"], mine["nsqmp_ahead_count"]) == (RDY, RDY, RDY)
    nothing_within(c, 0.3)
    c.send(b"".join(wire.fin(m.id) for m in got[:30]))
    more = take(c, 30)
    nothing_within(c, 0.3)
    assert all(m.attempts == 1 for m in got + more)
    assert len({m.id for m in got + more}) == RDY + 30
    c.close()


def test_a_lower_rdy_is_kept_from_the_next_fin_on(broker):
    """Lowering RDY sends back what was held under the higher one: after RDY 50 and 80 FINs
    of 100 in flight, the consumer gets 30 more (20 + 30 = 50), not 80."""
    c = consumer(broker, "ahead_lower")
    publish(broker, "ahead_lower", 3 * RDY)
    got = take(c, RDY)
    c.send(wire.rdy(RDY // 2))
    c.send(b"".join(wire.fin(m.id) for m in got[:80]))
    more = take(c, RDY // 2 - (RDY - 80))
    nothing_within(c, 0.4)
    wait_for(lambda: client(broker, "ahead_lower")["in_flight_count"] == RDY // 2, what="in flight = new RDY")
    assert all(m.attempts == 1 for m in more)
    c.close()


def test_cls_sends_what_was_held_back_to_the_channel_unattempted(broker):
    a = consumer(broker, "ahead_cls")
    publish(broker, "ahead_cls", 2 * RDY + 50)
    take(a, RDY)
    a.send(wire.CLS)
    assert a.read_frame().data == b"CLOSE_WAIT"
    b = consumer(broker, "ahead_cls", rdy=2 * RDY)
    rest = take(b, RDY + 50)
    assert all(m.attempts == 1 for m in rest)  # none of them reached a client before
    nothing_within(b, 0.3)
    a.close()
    b.close()


def test_a_consumer_that_goes_leaves_what_was_held_unattempted(broker):
    a = consumer(broker, "ahead_gone")
    publish(broker, "ahead_gone", 2 * RDY + 50)
    sent = {m.id for m in take(a, RDY)}
    a.close()
    b = consumer(broker, "ahead_gone", rdy=3 * RDY)
    every = take(b, 2 * RDY + 50)
    assert {m.id for m in every if m.attempts == 2} == sent  # a had them: a second attempt
    assert all(m.attempts == 1 for m in every if m.id not in sent)
    nothing_within(b, 0.3)
    b.close()


def test_held_frames_go_back_when_the_consumer_stalls(broker):
    """A consumer that stops FINing keeps what it has (until msg_timeout), but what was held
    for it goes back within a fraction of a second, for another consumer, unattempted."""
    a = consumer(broker, "ahead_stall")
    publish(broker, "ahead_stall", 2 * RDY)
    take(a, RDY)
    wait_for(lambda: client(broker, "ahead_stall")["nsqmp_ahead_count"] == RDY, what="RDY held ahead")
    time.sleep(0.5)  # HOLD_MAX_NS (0.2 s) and the check after it
    wait_for(lambda: client(broker, "ahead_stall")["nsqmp_ahead_count"] == 0, what="held ones back")
    assert channel_stats(broker, "ahead_stall", "ch")["depth"] == RDY
    b = consumer(broker, "ahead_stall")
    t0 = time.monotonic()
    rest = take(b, RDY)
    assert time.monotonic() - t0 < 5.0  # not after a's msg_timeout (60 s)
    assert all(m.attempts == 1 for m in rest)
    nothing_within(a, 0.2)
    a.close()
    b.close()


def test_req_brings_one_more_as_fin_does(broker):
    c = consumer(broker, "ahead_req")
    publish(broker, "ahead_req", 3 * RDY)
    got = take(c, RDY)
    c.send(wire.req(got[0].id, 0) + wire.req(got[1].id, 0))
    more = take(c, 2)
    nothing_within(c, 0.3)
    wait_for(lambda: client(broker, "ahead_req")["in_flight_count"] == RDY, what="in flight = RDY")
    assert len({m.id for m in got + more}) == RDY + 2
    c.close()


def test_a_refused_fin_frees_no_room(broker):
    """A FIN of an ID not in flight gets E_FIN_FAILED and the connection stays; the room it
    seemed to free is taken back from the next FIN, so the consumer ends with RDY in flight."""
    c = consumer(broker, "ahead_bad")
    publish(broker, "ahead_bad", 3 * RDY)
    got = take(c, RDY)
    c.send(wire.fin(b"0123456789abcdef"))
    frames = []
    while not any(f.type == wire.FRAME_ERROR for f in frames):
        frames.append(c.read_frame())
    errors = [f.data for f in frames if f.type == wire.FRAME_ERROR]
    assert errors == [b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"]
    extra = len(frames) - 1  # a frame sent ahead, written for the refused FIN (at most one)
    assert extra <= 1
    c.send(b"".join(wire.fin(m.id) for m in got[:10]))
    more = take(c, 10 - extra)
    nothing_within(c, 0.3)
    wait_for(lambda: client(broker, "ahead_bad")["in_flight_count"] == RDY, what="in flight = RDY")
    assert len(got) + extra + len(more) - 10 == RDY
    c.close()


def test_below_the_threshold_nothing_is_sent_ahead(broker):
    c = consumer(broker, "ahead_small", rdy=AHEAD_MIN_RDY - 1)
    publish(broker, "ahead_small", 2 * AHEAD_MIN_RDY)
    take(c, AHEAD_MIN_RDY - 1)
    nothing_within(c, 0.2)
    stats = channel_stats(broker, "ahead_small", "ch")
    assert (stats["depth"], stats["in_flight_count"]) == (AHEAD_MIN_RDY + 1, AHEAD_MIN_RDY - 1)
    assert stats["clients"][0]["nsqmp_ahead_count"] == 0
    c.close()


def test_a_paused_channel_writes_nothing_held_and_an_unpaused_one_goes_on(broker):
    c = consumer(broker, "ahead_pause")
    publish(broker, "ahead_pause", 3 * RDY)
    got = take(c, RDY)
    assert broker.http("POST", "/channel/pause?topic=ahead_pause&channel=ch")[0] == 200
    wait_for(lambda: client(broker, "ahead_pause")["nsqmp_ahead_count"] == 0, what="held ones recalled")
    c.send(b"".join(wire.fin(m.id) for m in got[:30]))
    nothing_within(c, 0.4)  # nsqd sends nothing from a paused channel
    assert channel_stats(broker, "ahead_pause", "ch")["depth"] == 2 * RDY
    assert broker.http("POST", "/channel/unpause?topic=ahead_pause&channel=ch")[0] == 200
    more = take(c, 30)
    assert all(m.attempts == 1 for m in more)
    nothing_within(c, 0.3)
    c.close()


def test_an_emptied_channel_writes_nothing_it_held(broker):
    c = consumer(broker, "ahead_empty")
    publish(broker, "ahead_empty", 2 * RDY)
    got = take(c, RDY)
    assert broker.http("POST", "/channel/empty?topic=ahead_empty&channel=ch")[0] == 200
    wait_for(lambda: channel_stats(broker, "ahead_empty", "ch")["depth"] == 0, what="emptied")
    c.send(wire.fin(got[0].id))
    assert c.read_frame().data == b"E_FIN_FAILED FIN " + got[0].id + b" failed ID not in flight"
    nothing_within(c, 0.4)
    publish(broker, "ahead_empty", 1)
    assert c.read_message().body == b"m0"
    c.close()
