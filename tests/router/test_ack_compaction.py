"""When a topic rewrites its ack log: once the entries of deleted files are most of it."""
from __future__ import annotations

from nsqmp.diskqueue import acklog
from nsqmp.diskqueue.segment import drain_background
from nsqmp.router import topicfiles
from nsqmp.router.topic import Topic


def _finish(topic: Topic, ch, seg, n: int) -> None:
    """n messages of seg finished on ch: an ack entry each, and their refs released."""
    seg.refs += n
    for k in range(n):
        topic.ack(ch, seg, 64 + 100 * k)
    topic.release(seg, n)


def _sync(topic: Topic) -> None:
    """topic.sync(), and any rewrite it started done and swapped in (the next sync would)."""
    topic.sync()
    while topic.acklog.compacting:
        drain_background()
        topic.acklog.finish_compaction()


def test_log_is_rewritten_once_dead_entries_are_most_of_it(tmp_path, monkeypatch):
    monkeypatch.setattr(topicfiles, "_COMPACT_MIN", 10)
    topic = Topic(b"acks", str(tmp_path), 100)
    ch = topic.add_channel(b"ch", None)
    first = topic.segment(0, 0)
    _finish(topic, ch, first, 30)
    _sync(topic)
    assert topic.acklog.entries == 30 and topic.dead_acks == 0  # its file is the newest: kept
    second = topic.segment(0, 1)  # the acceptor rolled: the finished first file goes
    assert (0, 0) not in topic.segments and topic.dead_acks == 30
    _finish(topic, ch, second, 20)
    _sync(topic)  # 30 dead of 50: more than half, and past the minimum
    assert topic.dead_acks == 0
    assert topic.acklog.entries == 20
    assert {(a, q) for _, a, q, _ in acklog.read(topic.dir)} == {(0, 1)}
    third = topic.segment(0, 2)  # 20 more dead
    _finish(topic, ch, third, 25)
    _sync(topic)  # 20 dead of 45: not yet
    assert topic.acklog.entries == 45 and topic.dead_acks == 20
    fourth = topic.segment(0, 3)  # 25 more: 45 dead of 55
    _finish(topic, ch, fourth, 10)
    _sync(topic)
    assert topic.acklog.entries == 10 and topic.dead_acks == 0
    topic.close()


def test_live_entries_alone_never_cause_a_rewrite(tmp_path, monkeypatch):
    monkeypatch.setattr(topicfiles, "_COMPACT_MIN", 10)
    topic = Topic(b"live", str(tmp_path), 100)
    ch = topic.add_channel(b"ch", None)
    seg = topic.segment(0, 0)
    for _ in range(5):
        seg.refs += 1  # one message still queued keeps the file
        _finish(topic, ch, seg, 40)
        _sync(topic)
    assert topic.acklog.entries == 200 and topic.dead_acks == 0
    topic.close()
