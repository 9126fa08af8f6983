"""Router.on_publish turning a PUBLISH's records into queue entries (read_messages) and
Channel.refill reading ranges back: a real Router object (real options and plan), fed
PUBLISH records directly, without processes or rings.
"""
from __future__ import annotations

import asyncio
import os

import pytest

from nsqmp.config import loader
from nsqmp.diskqueue.segment import HEADER, HEADER_SIZE, MAGIC, VERSION, encode
from nsqmp.ipc import records
from nsqmp.ipc.mesh import Plan
from nsqmp.protocol.frames import MESSAGE_HEADER
from nsqmp.router import cap
from nsqmp.router.channel import Deferred, Message
from nsqmp.router.role import Router


@pytest.fixture
def router(tmp_path):
    opts = loader.load(["--data-path", str(tmp_path)], environ={})
    r = Router(opts, Plan(os.getpid(), 2, 2, 8 << 20), 0, 1, [], "unused")
    r.loop = asyncio.new_event_loop()  # only collects the callbacks it schedules
    yield r
    r.loop.close()


def batch(first: int, bodies: list[bytes], due: int = 0) -> bytes:
    return encode([MESSAGE_HEADER.pack(1000 + k, 0, f"{first + k:016x}".encode()) + b
                   for k, b in enumerate(bodies, 0)], due)


def publish(router, topic: bytes, seq: int, offset: int, blob: bytes, count: int) -> None:
    router.on_publish(0, records.publish(0, seq, offset, count, topic, blob))


def test_a_batch_becomes_entries_of_every_channel(router):
    topic = router.topic(b"t")
    a, b = topic.add_channel(b"a", None), topic.add_channel(b"b", None)
    bodies = [b"", b"x" * 5, b"y" * 3000]
    blob = batch(0, bodies)
    publish(router, b"t", 0, HEADER_SIZE, blob, 3)
    for ch in (a, b):
        assert [(m.id, m.ts, m.body, m.offset, tries) for m, tries in ch.ready] == [
            (b"0000000000000000", 1000, b"", 64, 0), (b"0000000000000001", 1001, b"x" * 5, 64 + 34, 0),
            (b"0000000000000002", 1002, b"y" * 3000, 64 + 34 + 39, 0)]
    assert [m for m, _ in a.ready] == [m for m, _ in b.ready]  # one stored copy
    assert all(type(m) is Message for m, _ in a.ready)
    seg = topic.segments[(0, 0)]
    assert seg.refs == 6 and seg.bytes == len(blob) == topic.disk_bytes
    assert topic.message_count == 3 and topic.message_bytes == 3005
    assert topic.hwm[0] == (0, 64 + 34 + 39)


def test_records_at_or_below_the_high_water_mark_are_skipped(router):
    topic = router.topic(b"t")
    ch = topic.add_channel(b"a", None)
    blob = batch(0, [b"a", b"bb", b"ccc", b"dddd"])
    offsets = [64, 64 + 35, 64 + 35 + 36, 64 + 35 + 36 + 37]
    topic.hwm[0] = (0, offsets[1])  # a rescan adopted the first two already
    publish(router, b"t", 0, 64, blob, 4)
    assert [(m.body, m.offset) for m, _ in ch.ready] == [(b"ccc", offsets[2]), (b"dddd", offsets[3])]
    seg = topic.segments[(0, 0)]
    assert seg.bytes == len(blob) - 71 and seg.refs == 2
    assert topic.message_count == 2 and topic.message_bytes == 7
    assert topic.hwm[0] == (0, offsets[3])
    publish(router, b"t", 0, 64, blob, 4)  # all of it again: nothing new
    assert len(ch.ready) == 2 and topic.message_count == 2


def test_a_deferred_batch_waits_with_its_due_time(router):
    topic = router.topic(b"t")
    ch = topic.add_channel(b"a", None)
    blob = batch(0, [b"later", b"too"], due=2**62)
    publish(router, b"t", 0, 64, blob, 2)
    # both due in the same millisecond: one Deferred, one token, one timer entry
    assert not ch.ready and ch.deferred_count == 2 and len(ch.deferred) == 1
    (d,) = ch.deferred.values()
    assert isinstance(d, Deferred) and router.deadlines.tokens[d.token] is d
    assert [(m.body, tries) for m, tries in d.entries] == [(b"later", 0), (b"too", 0)]
    assert list(router.deadlines.arms) == [d.token, d.deadline]
    assert topic.message_bytes == 8 and topic.segments[(0, 0)].bytes == len(blob)


def test_an_ephemeral_topic_gets_messages_without_a_segment(router):
    topic = router.topic(b"t#ephemeral")
    ch = topic.add_channel(b"a", None)
    publish(router, b"t#ephemeral", records.MEMORY_ONLY, 0, batch(5, [b"m1", b"m2"]), 2)
    assert [(m.id, m.body, m.segment, m.offset) for m, _ in ch.ready] == [
        (b"0000000000000005", b"m1", None, 0), (b"0000000000000006", b"m2", None, 36)]
    assert topic.message_bytes == 4 and not topic.segments


def test_refill_reads_ranges_back_as_ready_entries(router, tmp_path):
    topic = router.topic(b"t")
    ch = topic.add_channel(b"a", None)
    seg = topic.segment(0, 0)
    plain, deferred = batch(0, [b"p1", b"p2"]), batch(2, [b"d-past"], due=1) + batch(3, [b"d-future"], due=2**62)
    os.makedirs(os.path.dirname(seg.path), exist_ok=True)
    with open(seg.path, "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, 0, 0).ljust(HEADER_SIZE, b"\0") + plain + deferred)
    end = HEADER_SIZE + len(plain) + len(deferred)
    ch.pending.add(seg, HEADER_SIZE, HEADER_SIZE + len(plain), 2)
    ch.refill()
    assert [(m.body, tries) for m, tries in ch.ready] == [(b"p1", 0), (b"p2", 0)]
    assert all(type(e) is tuple for e in ch.ready)
    ch.pending.add(seg, HEADER_SIZE + len(plain), end, 2)
    ch.refill()
    assert [(m.body, tries) for m, tries in ch.ready] == [(b"p1", 0), (b"p2", 0), (b"d-past", 0)]
    assert [m.body for d in ch.deferred.values() for m, _ in d.entries] == [b"d-future"]
    assert ch.deferred_count == 1
    assert not ch.pending


def test_deferred_messages_share_a_timer_entry_per_millisecond_and_fire_together(router):
    from nsqmp.router.channel import DEFER_SLOT_NS

    topic = router.topic(b"t")
    ch = topic.add_channel(b"a", None)
    msgs = [Message(b"%016x" % i, 0, b"m%d" % i, None, 0) for i in range(5)]
    base = 7 * DEFER_SLOT_NS
    for m, at in zip(msgs, (base + 10, base + DEFER_SLOT_NS - 1, base + DEFER_SLOT_NS, base + 5, -3)):
        ch.defer(m, 2, at)
    assert ch.deferred_count == 5 and sorted(ch.deferred) == [0, 7, 8]
    seven, eight = ch.deferred[7], ch.deferred[8]
    assert [m.body for m, _ in seven.entries] == [b"m0", b"m1", b"m3"]
    assert seven.deadline == 8 * DEFER_SLOT_NS and eight.deadline == 9 * DEFER_SLOT_NS  # never early
    assert ch.deferred[0].deadline == DEFER_SLOT_NS  # long past: due at once
    arms = list(router.deadlines.arms)
    assert len(arms) == 6 and arms[0::2] == [seven.token, eight.token, ch.deferred[0].token]
    # a FIRE for slot 7: its three, in arrival order, with their attempts
    router.on_fire(0, records.fire([seven.token]))
    assert [(m.body, tries) for m, tries in ch.ready] == [(b"m0", 2), (b"m1", 2), (b"m3", 2)]
    assert ch.deferred_count == 2 and 7 not in ch.deferred and seven.token not in router.deadlines.tokens
    assert sum(router.deadlines.fire_lateness["deferred"].counts) == 3
    # clearing the channel forgets the rest and disarms their entries
    ch.clear()
    assert ch.deferred_count == 0 and not ch.deferred
    assert sorted(router.deadlines.disarms) == sorted([eight.token, arms[4]])


def test_drop_oldest_forgets_a_files_queued_and_deferred_copies_only(router):
    from nsqmp.router.channel import DEFER_SLOT_NS

    topic = router.topic(b"t")
    ch = topic.add_channel(b"a", None)
    old = topic.segment(0, 0)
    old.refs += 3  # held by the messages below, so the roll to the next file keeps it
    new = topic.segment(0, 1)
    new.refs += 3
    mk = [Message(b"%016x" % i, 0, b"m%d" % i, seg, 64 + i) for i, seg in enumerate([old, new] * 3)]
    ch.ready.extend([(mk[0], 0), (mk[1], 1)])  # m0 old, m1 new
    slot = 5 * DEFER_SLOT_NS
    ch.defer(mk[2], 0, slot)  # old, alone in its slot
    ch.defer(mk[3], 0, slot + 2 * DEFER_SLOT_NS)  # new
    ch.defer(mk[4], 0, slot + 2 * DEFER_SLOT_NS)  # old, beside m3
    ch.defer(mk[5], 0, slot + 3 * DEFER_SLOT_NS)  # new
    alone = ch.deferred[5].token
    cap.drop_segment(topic, old)
    assert [(m.body, a) for m, a in ch.ready] == [(b"m1", 1)]
    assert {s: [m.body for m, _ in d.entries] for s, d in ch.deferred.items()} == {7: [b"m3"], 8: [b"m5"]}
    assert ch.deferred_count == 2 and alone not in router.deadlines.tokens and alone in router.deadlines.disarms
    assert old.refs == 0 and new.refs == 3
