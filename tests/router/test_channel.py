"""A channel's verbs (router/channel.py) with the delivery pass and the timer link, on
real segment files, without processes or rings: what is delivered, acknowledged,
requeued, timed out and disarmed."""
from __future__ import annotations

import random
import time

import pytest

from nsqmp.router.flight import DEFER_SLOT_NS
from tests.router.nouns import Nouns, acceptor_slot


@pytest.fixture
def nouns(tmp_path):
    n = Nouns(tmp_path)
    yield n
    n.close()


def queued(ch) -> list[tuple[bytes, int]]:
    return [(m.body, tries) for m, tries in ch.ready]


def test_a_pass_hands_a_consumer_its_rdy_in_one_flight(nouns):
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"m%d" % i for i in range(5)])
    c = nouns.consumer(ch, 1, rdy=3)
    nouns.run()
    assert nouns.frames(c.conn) == [(ids[i], 1, b"m%d" % i) for i in range(3)]
    assert queued(ch) == [(b"m3", 0), (b"m4", 0)]
    assert c.in_flight == 3 and c.message_count == 3 and len(ch.in_flight) == 3
    arms, disarms = nouns.timer()
    (flight,) = c.flights.values()
    assert arms == [(flight.token, flight.deadline)] and not disarms  # one entry for the three
    assert nouns.deadlines.tokens == {flight.token: flight}


def test_fin_acknowledges_in_the_log_and_disarms_with_the_last_member(nouns, tmp_path):
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"a", b"b"])
    c = nouns.consumer(ch, 1, rdy=10)
    nouns.run()
    nouns.frames()
    (flight,) = c.flights.values()
    nouns.timer()
    assert nouns.fin(c, [ids[0], b"f" * 16]) == [b"f" * 16]  # not in flight: refused
    nouns.run()
    assert nouns.timer() == ([], [])  # one member still in the flight
    assert nouns.fin(c, [ids[1]]) == []
    nouns.run()
    assert nouns.timer() == ([], [flight.token])
    seg = nouns.topic.segments[(0, 0)]
    assert [(cid, a, q) for cid, a, q, _ in nouns.acks()] == [(ch.id, 0, 0)] * 2
    assert c.in_flight == 0 and c.finish_count == 2 and not c.flights and not nouns.deadlines.tokens
    assert seg.refs == 0


def test_a_fin_from_another_consumer_is_refused(nouns):
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"a"])
    one, two = nouns.consumer(ch, 1, rdy=1), nouns.consumer(ch, 2, rdy=1)
    nouns.run()
    owner = ch.in_flight.get(ids[0])[2].consumer
    other = two if owner is one else one
    assert nouns.fin(other, ids) == ids and owner.in_flight == 1
    assert nouns.fin(owner, ids) == [] and owner.in_flight == 0


def test_req_requeues_now_or_after_its_delay(nouns):
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"now", b"later"])
    c = nouns.consumer(ch, 1, rdy=2)
    nouns.run()
    nouns.frames()
    c.rdy = 0
    ch.requeue(ids[0], ch.in_flight.get(ids[0]), 0)
    before = time.monotonic_ns()
    ch.requeue(ids[1], ch.in_flight.get(ids[1]), 20)
    assert queued(ch) == [(b"now", 1)]
    (d,) = ch.deferred.values()
    assert [(m.body, tries) for m, tries in d.entries] == [(b"later", 1)]
    assert before + 20_000_000 <= d.deadline <= time.monotonic_ns() + 20_000_000 + DEFER_SLOT_NS
    assert c.requeue_count == ch.requeue_count == 2 and c.in_flight == 0 and not c.flights
    c.rdy = 5
    nouns.delivery.mark(ch)
    nouns.run()
    assert nouns.frames() == [(ids[0], 2, b"now")]  # attempts go on counting
    arms, disarms = nouns.timer()
    assert (d.token, d.deadline) in arms and len(disarms) == 1  # the emptied flight's entry


def test_touch_gives_a_message_a_flight_of_its_own(nouns):
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"a", b"b"])
    c = nouns.consumer(ch, 1, rdy=2, msg_timeout=1000)
    nouns.run()
    nouns.timer()
    (shared,) = c.flights.values()
    ch.touch(ids[0], ch.in_flight.get(ids[0]), 10**12)
    (mine,) = [f for f in c.flights.values() if f is not shared]
    assert shared.live == 1 and mine.live == 1 and mine.deadline >= shared.deadline
    nouns.run()
    assert nouns.timer() == ([(mine.token, mine.deadline)], [])
    # the shared flight times out: only the message never touched goes back
    assert nouns.deadlines.fire([shared.token]) == {ch}
    assert queued(ch) == [(b"b", 1)] and c.in_flight == 1 and ch.timeout_count == 1
    assert ch.in_flight.get(ids[0])[2] is mine


def test_touch_never_passes_max_msg_timeout(nouns):
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"a"])
    c = nouns.consumer(ch, 1, rdy=1, msg_timeout=60000)
    nouns.run()
    (f,) = c.flights.values()
    ch.touch(ids[0], ch.in_flight.get(ids[0]), 5_000_000)
    assert f.deadline == f.delivered + 5_000_000


def test_a_timed_out_flight_goes_back_whole_and_is_delivered_again(nouns):
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"x", b"y", b"z"])
    c = nouns.consumer(ch, 1, rdy=3)
    nouns.run()
    nouns.frames()
    (f,) = c.flights.values()
    assert nouns.deadlines.fire([f.token, 12345]) == {ch}  # an unknown token is ignored
    assert queued(ch) == [(b"x", 1), (b"y", 1), (b"z", 1)]
    assert c.in_flight == 0 and not c.flights and ch.timeout_count == 3 and not len(ch.in_flight)
    assert sum(nouns.deadlines.fire_lateness["timeouts"].counts) == 3
    nouns.delivery.mark(ch)  # as Router.on_fire does for the channels fire() returns
    nouns.run()
    assert nouns.frames() == [(i, 2, b) for i, b in zip(ids, (b"x", b"y", b"z"))]


def test_dropping_a_consumer_requeues_its_in_flight_at_once_at_the_head(nouns):
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"m%d" % i for i in range(4)])
    gone = nouns.consumer(ch, 1, rdy=3)
    nouns.run()
    nouns.frames()
    nouns.timer()
    (f,) = gone.flights.values()
    assert not ch.drop_consumer(gone)  # a durable channel stays
    assert queued(ch) == [(b"m0", 1), (b"m1", 1), (b"m2", 1), (b"m3", 0)]
    assert ch.requeue_count == 3 and not ch.consumers and not len(ch.in_flight)
    other = nouns.consumer(ch, 2, rdy=10, acceptor=1)
    nouns.run()
    assert nouns.frames(other.conn) == [(ids[0], 2, b"m0"), (ids[1], 2, b"m1"), (ids[2], 2, b"m2"),
                                        (ids[3], 1, b"m3")]
    arms, disarms = nouns.timer()
    assert disarms == [f.token] and len(arms) == 1
    assert acceptor_slot(1) == 101


def test_an_ephemeral_channel_asks_to_go_with_its_last_consumer(nouns):
    ch = nouns.topic.get_channel(b"c#ephemeral")
    c = nouns.consumer(ch, 1, rdy=1)
    assert ch.drop_consumer(c) is True


def test_sample_rate_skips_and_acknowledges_what_it_does_not_send(nouns):
    random.seed(7)
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"%d" % i for i in range(100)])
    c = nouns.consumer(ch, 1, rdy=100, sample_rate=10)
    nouns.run()
    sent = [mid for mid, _, _ in nouns.frames()]
    acked = {off for _, _, _, off in nouns.acks()}
    assert 0 < len(sent) < 40 and len(sent) + len(acked) == 100 and not ch.ready
    assert set(sent) <= set(ids) and c.in_flight == len(sent)
    assert nouns.topic.segments[(0, 0)].refs == len(sent)


def test_deferred_messages_wait_in_their_millisecond_and_fire_in_order(nouns):
    ch = nouns.topic.get_channel(b"c")
    due = time.time_ns() + 3_000_000_000
    ids = nouns.publish([b"d1", b"d2"], due_ns=due)
    nouns.publish([b"now"])
    assert queued(ch) == [(b"now", 0)] and ch.deferred_count == 2
    (d,) = ch.deferred.values()
    nouns.run()
    arms, _ = nouns.timer()
    assert (d.token, d.deadline) in arms
    assert nouns.deadlines.fire([d.token]) == {ch}
    assert queued(ch) == [(b"now", 0), (b"d1", 0), (b"d2", 0)] and ch.deferred_count == 0
    assert not ch.deferred and d.token not in nouns.deadlines.tokens
    c = nouns.consumer(ch, 1, rdy=5)
    nouns.run()
    assert [mid for mid, _, _ in nouns.frames(c.conn)][1:] == ids


def test_clear_drops_everything_and_disarms_every_entry(nouns):
    ch = nouns.topic.get_channel(b"c")
    nouns.publish([b"late"], due_ns=time.time_ns() + 10**10)
    nouns.publish([b"a", b"b", b"c"])
    c = nouns.consumer(ch, 1, rdy=2)
    nouns.run()
    nouns.timer()
    tokens = set(nouns.deadlines.tokens)
    assert len(tokens) == 2  # the deferred slot and the flight
    ch.clear()
    nouns.run()
    assert nouns.timer() == ([], sorted(tokens))
    assert not ch.ready and not ch.deferred and not len(ch.in_flight) and ch.deferred_count == 0
    assert c.in_flight == 0 and not c.flights and not nouns.deadlines.tokens
    assert nouns.topic.segments[(0, 0)].refs == 0
