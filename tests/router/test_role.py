"""The router's record dispatch (router/role.py, router/subscriptions.py) as a transcript:
a real Router object and a real (not running) event loop, fed ring records directly; what
it sends goes to a list in place of its endpoint."""
from __future__ import annotations

import asyncio
import os

import orjson
import pytest

from nsqmp.client import wire
from nsqmp.config import loader
from nsqmp.diskqueue.segment import encode
from nsqmp.ipc import records
from nsqmp.ipc.mesh import Plan
from nsqmp.protocol.frames import MESSAGE_HEADER, message_frame
from nsqmp.router.role import FULL_PIPE, FULL_PIPE_LOOK_MAX, Router

CONN = records.conn_id(1, 1, 7)  # a connection of acceptor 1


class Rings:
    """What the dispatch and the delivery pass use of an Endpoint; records sent, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes]] = []

    def send(self, dst: int, rec: bytes) -> None:
        self.sent.append((dst, rec))

    def flush(self) -> None:
        pass

    def urgent_waiting(self) -> bool:
        return False

    def drain_urgent(self, on_record) -> None:
        pass

    def take(self, kind: int) -> list[tuple[int, bytes]]:
        found = [(dst, rec) for dst, rec in self.sent if rec[0] == kind]
        self.sent = [(dst, rec) for dst, rec in self.sent if rec[0] != kind]
        return found


@pytest.fixture
def router(tmp_path):
    opts = loader.load(["--data-path", str(tmp_path)], environ={})
    r = Router(opts, Plan(os.getpid(), 2, 2, 8 << 20), 0, 1, [], "unused")
    r.loop = asyncio.new_event_loop()
    r.endpoint = Rings()  # type: ignore[assignment]
    r.delivery.attach(r.endpoint, r.on_record)
    yield r
    for topic in r.topics.values():
        topic.close()
    r.loop.close()


def tick(router) -> None:
    """Run what the router scheduled on its loop (a delivery pass and the tick's end)."""
    router.loop.run_until_complete(asyncio.sleep(0))


def sub(router, conn: int, topic: bytes, channel: bytes) -> None:
    """conn's SUB record, as acceptor 1 sends it."""
    router.on_record(1, records.sub(conn, topic, channel, orjson.dumps({"msg_timeout": 60000})))


def subscribe(router, topic: bytes, channel: bytes) -> None:
    """SUB to a new channel: it waits for both acceptors' BARRIER_OK."""
    sub(router, CONN, topic, channel)
    barriers = router.endpoint.take(records.BARRIER)
    assert sorted(dst for dst, _ in barriers) == [0, 1] and not router.endpoint.take(records.SUB_OK)
    for dst, rec in barriers:
        router.on_record(dst, records.barrier_ok(records.parse_barrier(rec)))
    assert router.endpoint.take(records.SUB_OK) == [(1, records.sub_ok(CONN))]


def publish(router, topic: bytes, bodies: list[bytes]) -> list[bytes]:
    ids = [b"%016x" % k for k in range(len(bodies))]
    blob = encode([MESSAGE_HEADER.pack(1000, 0, i) + b for i, b in zip(ids, bodies)])
    router.on_record(0, records.publish(0, records.MEMORY_ONLY, 0, len(bodies), topic, blob))
    return ids


def test_sub_rdy_deliver_fin_gone(router):
    subscribe(router, b"t#ephemeral", b"c")
    ids = publish(router, b"t#ephemeral", [b"a", b"b", b"c"])
    router.on_record(1, records.rdy(CONN, 2))
    tick(router)
    (deliver,) = router.endpoint.take(records.DELIVER)
    assert deliver[0] == 1 and records.parse_deliver(deliver[1])[0] == CONN
    assert ids[0] in deliver[1] and ids[1] in deliver[1] and ids[2] not in deliver[1]
    (arm,) = router.endpoint.take(records.ARM)
    assert arm[0] == router.plan.timer_slot and len(records.parse_arm(arm[1])) == 1
    router.on_record(1, records.fin(CONN, ids[0] + b"x" * 16))
    (err,) = router.endpoint.take(records.CONN_ERR)
    assert err[1].endswith(b"E_FIN_FAILED FIN xxxxxxxxxxxxxxxx failed ID not in flight")
    ch = router.topics[b"t#ephemeral"].channels[b"c"]
    c = router.consumers[CONN]
    assert c.finish_count == 1 and c.in_flight == 1
    router.on_record(1, records.gone(CONN))  # b comes back at once, first
    assert [(m.body, tries) for m, tries in ch.ready] == [(b"b", 1), (b"c", 0)]
    assert CONN not in router.consumers


def test_gone_requeues_in_flight_at_once_on_a_durable_channel(router):
    subscribe(router, b"t", b"c")
    publish(router, b"t", [b"a", b"b"])
    router.on_record(1, records.rdy(CONN, 5))
    tick(router)
    ch = router.topics[b"t"].channels[b"c"]
    assert len(ch.in_flight) == 2 and not ch.ready
    router.endpoint.sent.clear()
    router.on_record(1, records.gone(CONN))
    assert [(m.body, tries) for m, tries in ch.ready] == [(b"a", 1), (b"b", 1)]
    assert ch.requeue_count == 2 and not ch.consumers and not router.deadlines.tokens
    tick(router)
    (disarm,) = router.endpoint.take(records.DISARM)
    assert len(records.parse_disarm(disarm[1])) == 1


def test_an_ephemeral_channel_goes_with_its_last_consumer(router):
    subscribe(router, b"t", b"c#ephemeral")
    topic = router.topics[b"t"]
    assert b"c#ephemeral" in topic.channels
    router.on_record(1, records.gone(CONN))
    assert not topic.channels and b"t" in router.topics  # a durable topic stays


def test_a_fire_record_requeues_the_flight_and_the_next_pass_redelivers(router):
    subscribe(router, b"t", b"c")
    publish(router, b"t", [b"a"])
    router.on_record(1, records.rdy(CONN, 1))
    tick(router)
    router.endpoint.take(records.DELIVER)
    (token,) = router.consumers[CONN].flights
    router.on_record(router.plan.timer_slot, records.fire([token]))
    tick(router)
    (deliver,) = router.endpoint.take(records.DELIVER)
    ch = router.topics[b"t"].channels[b"c"]
    assert ch.timeout_count == 1 and len(ch.in_flight) == 1 and deliver[1].endswith(b"a")


def test_the_router_polls_its_rings_only_while_no_consumer_waits_on_it(router):
    """poll_rings: no consumer, or every consumer with RDY holding a full pipe (FULL_PIPE
    in flight or more), and the router takes its records once a millisecond; a consumer
    with RDY and fewer in flight (waiting on a FIN or a publish) keeps it woken at once,
    and so do more than FULL_PIPE_LOOK_MAX consumers (not looked at one by one)."""
    assert router.poll_rings()  # nobody subscribed: nobody waits on a publish
    subscribe(router, b"t#ephemeral", b"c")
    assert router.poll_rings()  # RDY 0: waits on nothing
    router.on_record(1, records.rdy(CONN, FULL_PIPE + 100))
    assert not router.poll_rings()  # credit and nothing to deliver: waits on a publish
    ids = publish(router, b"t#ephemeral", [b"m%d" % k for k in range(FULL_PIPE)])
    tick(router)
    c = router.consumers[CONN]
    assert c.in_flight == FULL_PIPE and router.poll_rings()
    router.on_record(1, records.fin(CONN, ids[0]))
    assert c.in_flight == FULL_PIPE - 1 and not router.poll_rings()  # its pipe runs low
    router.on_record(1, records.req(CONN, 0, ids[1]))
    tick(router)  # the requeued message goes straight back out
    assert c.in_flight == FULL_PIPE - 1 and not router.poll_rings()
    publish(router, b"t#ephemeral", [b"x"])
    tick(router)
    assert c.in_flight == FULL_PIPE and router.poll_rings()
    other = records.conn_id(1, 1, 8)  # a second consumer, RDY 1, with nothing in flight
    sub(router, other, b"t#ephemeral", b"c")
    router.on_record(1, records.rdy(other, 1))
    assert not router.poll_rings()
    router.on_record(1, records.rdy(other, 0))
    assert router.poll_rings()
    for k in range(FULL_PIPE_LOOK_MAX - 1):  # idle consumers (RDY 0) up to one too many
        sub(router, records.conn_id(1, 1, 100 + k), b"t#ephemeral", b"c")
    assert len(router.consumers) == FULL_PIPE_LOOK_MAX + 1 and not router.poll_rings()


def frames_of(rec: bytes, at: int) -> list[tuple[int, bytes]]:
    """(attempts, id) of each message frame in a DELIVER or DELIVER_AHEAD from byte `at`."""
    msgs = [wire.decode_message(data) for _, data in wire.FrameReader().feed(rec[at:])]
    return [(m.attempts, m.id) for m in msgs]


def test_a_large_rdy_is_sent_as_much_again_ahead_and_fins_say_what_was_written(router):
    """RDY 100 with 250 queued: 100 frames in DELIVER, 100 more in DELIVER_AHEAD (carrying
    the RDY they were sent under); a FIN record saying 30 of them were written leaves 70
    ahead, and in flight to the client still 100 (/stats)."""
    subscribe(router, b"t#ephemeral", b"c")
    ids = publish(router, b"t#ephemeral", [b"m%d" % i for i in range(250)])
    router.on_record(1, records.rdy(CONN, 100))
    tick(router)
    now = [f for _, rec in router.endpoint.take(records.DELIVER) for f in frames_of(rec, records.DELIVER_FRAMES_AT)]
    aheads = router.endpoint.take(records.DELIVER_AHEAD)
    assert {records.parse_deliver_ahead(rec)[:2] for _, rec in aheads} == {(CONN, 100)}
    ahead = [f for _, rec in aheads for f in frames_of(rec, records.DELIVER_AHEAD_FRAMES_AT)]
    assert [i for _, i in now + ahead] == ids[:200] and {a for a, _ in now + ahead} == {1}
    c = router.consumers[CONN]
    assert (c.in_flight, c.ahead, c.sent, c.credit) == (200, 100, 100, 0)
    router.on_record(1, records.fin(CONN, b"".join(ids[:30]), 30))
    assert (c.in_flight, c.ahead, c.sent) == (170, 70, 100)
    stats = c.channel.stats(include_clients=True)
    assert (stats["in_flight_count"], stats["depth"]) == (100, 50 + 70)
    assert stats["clients"][0]["nsqmp_ahead_count"] == 70
    tick(router)  # room for 30 more ahead: sent ahead, none now (the client has its 100)
    assert not router.endpoint.take(records.DELIVER)
    assert sum(len(frames_of(rec, records.DELIVER_AHEAD_FRAMES_AT))
               for _, rec in router.endpoint.take(records.DELIVER_AHEAD)) == 30


def test_unsent_frames_go_back_unattempted_and_stop_sending_ahead_until_a_fin(router):
    subscribe(router, b"t#ephemeral", b"c")
    ids = publish(router, b"t#ephemeral", [b"m%d" % i for i in range(300)])
    router.on_record(1, records.rdy(CONN, 100))
    tick(router)
    router.endpoint.take(records.DELIVER)
    (_, rec), = router.endpoint.take(records.DELIVER_AHEAD)
    c = router.consumers[CONN]
    frames = memoryview(rec)[records.DELIVER_AHEAD_FRAMES_AT:]
    router.on_record(1, records.unsent(CONN, bytes(frames)))
    assert (c.in_flight, c.ahead, c.ahead_off) == (100, 0, True)
    ch = c.channel
    assert [(m.id, attempts) for m, attempts in list(ch.ready)[:100]] == [(i, 0) for i in ids[100:200]]
    tick(router)
    assert not router.endpoint.take(records.DELIVER_AHEAD)  # none ahead until it FINs
    router.on_record(1, records.fin(CONN, ids[0]))
    tick(router)
    (_, now), = router.endpoint.take(records.DELIVER)
    assert frames_of(now, records.DELIVER_FRAMES_AT) == [(1, ids[100])]  # the first back, first out
    assert router.endpoint.take(records.DELIVER_AHEAD)  # ahead again


def test_unsent_frames_that_timed_out_or_moved_are_left_alone(router):
    """An UNSENT frame whose message is no longer in flight to that consumer with that
    attempt (timed out, requeued) is only no longer ahead."""
    subscribe(router, b"t#ephemeral", b"c")
    ids = publish(router, b"t#ephemeral", [b"m%d" % i for i in range(300)])
    router.on_record(1, records.rdy(CONN, 100))
    tick(router)
    router.endpoint.take(records.DELIVER)
    router.endpoint.take(records.DELIVER_AHEAD)
    c = router.consumers[CONN]
    stale = message_frame(1000, 2, ids[150], b"m150") + message_frame(1000, 1, b"f" * 16, b"?")
    router.on_record(1, records.unsent(CONN, stale))
    assert (c.in_flight, c.ahead) == (200, 98)
    assert ids[150] in c.channel.in_flight


def test_nothing_is_sent_ahead_below_the_thresholds(router):
    from nsqmp.router.flight import AHEAD_MIN_RDY
    subscribe(router, b"t#ephemeral", b"c")
    publish(router, b"t#ephemeral", [b"m%d" % i for i in range(300)])
    router.on_record(1, records.rdy(CONN, AHEAD_MIN_RDY - 1))
    tick(router)
    assert not router.endpoint.take(records.DELIVER_AHEAD)
    c = router.consumers[CONN]
    assert (c.in_flight, c.ahead, c.reserve) == (AHEAD_MIN_RDY - 1, 0, 0)
    c.info["msg_timeout"] = 999  # IDENTIFY's msg_timeout under a second: none either
    router.on_record(1, records.rdy(CONN, 200))
    assert c.reserve == 0
