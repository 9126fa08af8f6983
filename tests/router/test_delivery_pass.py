"""The delivery pass and the tick around it (router/delivery.py), and the timer link
(router/deadlines.py): budgets, turns between channels, what the end of a tick sends."""
from __future__ import annotations

from nsqmp.ipc import records
from nsqmp.router import delivery
from nsqmp.router.deadlines import Deadlines
from nsqmp.router.flight import Deferred
from tests.router.nouns import TIMER, Nouns


def test_a_pass_stops_at_its_budget_and_the_next_tick_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(delivery, "PASS_MAX", 3)
    nouns = Nouns(tmp_path)
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"%d" % i for i in range(5)])
    c = nouns.consumer(ch, 1, rdy=10)
    nouns.callbacks.pop(0)()  # one tick
    assert [mid for mid, _, _ in nouns.frames()] == ids[:3] and nouns.callbacks == [nouns.delivery.tick]
    nouns.run()
    assert [mid for mid, _, _ in nouns.frames()] == ids[3:] and len(c.flights) == 2
    arms, _ = nouns.timer()
    assert sorted(t for t, _ in arms) == sorted(c.flights)
    nouns.close()


def test_a_channel_handing_out_many_goes_to_the_back_of_the_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(delivery, "VISIT_MAX", 2)
    nouns = Nouns(tmp_path)
    busy, quiet = nouns.topic.get_channel(b"busy"), nouns.topic.get_channel(b"quiet")
    nouns.publish([b"1", b"2", b"3", b"4"])
    a = [nouns.consumer(busy, n, rdy=1) for n in range(4)]
    q = nouns.consumer(quiet, 9, rdy=1)
    nouns.run()
    order = [records.parse_deliver(rec)[0] for _, rec in nouns.sent if rec[0] == records.DELIVER]
    assert q.conn in order[:3] and len(order) == 5  # quiet's turn came before busy's last two
    assert sum(c.in_flight for c in a) == 4
    nouns.close()


def test_a_paused_channel_is_not_served(tmp_path):
    nouns = Nouns(tmp_path)
    ch = nouns.topic.get_channel(b"c")
    ch.paused = True
    nouns.publish([b"x"])
    nouns.consumer(ch, 1, rdy=1)
    nouns.run()
    assert nouns.frames() == [] and len(ch.ready) == 1
    nouns.close()


def test_frames_are_split_into_records_of_max_chunk_bytes(tmp_path):
    nouns = Nouns(tmp_path, max_chunk=200)
    ch = nouns.topic.get_channel(b"c")
    nouns.publish([b"b" * 100] * 4)
    c = nouns.consumer(ch, 1, rdy=4)
    nouns.run()
    delivers = [rec for _, rec in nouns.sent if rec[0] == records.DELIVER]
    assert len(delivers) == 4 and len(nouns.frames(c.conn)) == 4  # 134-byte frames: one each
    nouns.close()


def test_the_end_of_a_tick_sends_arms_and_disarms_in_chunks():
    sent: list = []
    deadlines = Deadlines(3, TIMER, 64)  # 64 bytes: 4 entries per ARM, 8 tokens per DISARM
    woken: list = []
    deadlines.wake = lambda: woken.append(1)
    entries = [Deferred(deadlines.next_token(), None, k, 1000 + k) for k in range(10)]  # type: ignore[arg-type]
    for d in entries:
        deadlines.arm(d)
    for d in entries:
        deadlines.forget(d.token)
    assert len(woken) == 10 and not deadlines.tokens
    deadlines.flush(lambda dst, rec: sent.append((dst, rec)))
    arms = [rec for dst, rec in sent if rec[0] == records.ARM]
    disarms = [rec for dst, rec in sent if rec[0] == records.DISARM]
    assert all(dst == TIMER for dst, _ in sent) and [len(records.parse_arm(r)) for r in arms] == [4, 4, 2]
    assert [e for r in arms for e in records.parse_arm(r)] == [(d.token, d.deadline) for d in entries]
    assert [t for r in disarms for t in records.parse_disarm(r)] == [d.token for d in entries]
    assert entries[0].token >> 40 == 3  # tokens carry the incarnation
    sent.clear()
    deadlines.flush(lambda dst, rec: sent.append((dst, rec)))
    assert sent == []


def test_a_new_timer_is_given_every_deadline_again(tmp_path):
    nouns = Nouns(tmp_path)
    ch = nouns.topic.get_channel(b"c")
    nouns.publish([b"a"])
    nouns.publish([b"d"], due_ns=2**62)
    c = nouns.consumer(ch, 1, rdy=1)
    nouns.run()
    first, _ = nouns.timer()
    nouns.deadlines.rearm_all()
    nouns.run()
    again, _ = nouns.timer()
    assert sorted(again) == sorted(first) and len(again) == 2
    assert {t for t, _ in again} == set(c.flights) | {d.token for d in ch.deferred.values()}
    nouns.close()
