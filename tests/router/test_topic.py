"""A topic's verbs (router/topic.py, router/cap.py) on real segment files: publish and
adopt (as objects or as file ranges), fan-out, the backlog a first channel takes,
pausing, and max-topic-bytes."""
from __future__ import annotations

import os

from nsqmp.diskqueue.segment import HEADER_SIZE, drain_background, segment_path
from nsqmp.ipc import records
from tests.router.nouns import Nouns


def bodies(ch) -> list[bytes]:
    return [m.body for m, _ in ch.ready]


def test_every_channel_gets_every_message_from_one_stored_copy(tmp_path):
    nouns = Nouns(tmp_path)
    a, b = nouns.topic.get_channel(b"a"), nouns.topic.get_channel(b"b")
    nouns.publish([b"1", b"2"])
    assert bodies(a) == bodies(b) == [b"1", b"2"]
    assert all(x is y for (x, _), (y, _) in zip(a.ready, b.ready))
    assert nouns.topic.segments[(0, 0)].refs == 4 and nouns.topic.message_count == 2
    assert a in nouns.delivery.dirty and b in nouns.delivery.dirty
    nouns.close()


def test_the_first_channel_takes_the_backlog_and_a_later_one_only_what_follows(tmp_path):
    nouns = Nouns(tmp_path)
    topic = nouns.topic
    nouns.publish([b"early"])
    assert [m.body for m, _ in topic.backlog] == [b"early"] and not topic.channels
    first = topic.get_channel(b"first")
    assert bodies(first) == [b"early"] and not topic.backlog
    second = topic.get_channel(b"second")
    nouns.publish([b"later"])
    assert bodies(first) == [b"early", b"later"] and bodies(second) == [b"later"]
    assert topic.segments[(0, 0)].refs == 3
    nouns.close()


def test_past_the_in_memory_share_batches_wait_as_file_ranges_and_come_back_in_order(tmp_path):
    nouns = Nouns(tmp_path, mem_queue_size=2)
    ch = nouns.topic.get_channel(b"c")
    ids = nouns.publish([b"a", b"b"])
    ids += nouns.publish([b"c", b"d", b"e"])  # the channel holds its share: a range
    assert bodies(ch) == [b"a", b"b"] and len(ch.pending) == 3 and ch.message_count == 5
    c = nouns.consumer(ch, 1, rdy=10)
    nouns.run()  # a pass, the top-up from the file, the next pass
    assert nouns.frames(c.conn) == [(i, 1, b) for i, b in zip(ids, (b"a", b"b", b"c", b"d", b"e"))]
    assert not ch.pending and not ch.ready and c.in_flight == 5
    assert nouns.topic.message_count == 5 and nouns.topic.message_bytes == 5
    nouns.close()


def test_a_paused_topic_holds_and_unpausing_releases_to_every_channel(tmp_path):
    nouns = Nouns(tmp_path)
    topic = nouns.topic
    a, b = topic.get_channel(b"a"), topic.get_channel(b"b")
    topic.paused = True
    nouns.publish([b"held"])
    assert not a.ready and not b.ready and [m.body for m, _ in topic.backlog] == [b"held"]
    topic.paused = False
    topic.release_held()
    assert bodies(a) == bodies(b) == [b"held"] and not topic.backlog
    assert topic.segments[(0, 0)].refs == 2
    nouns.close()


def test_an_ephemeral_channel_keeps_at_most_mem_queue_size(tmp_path):
    nouns = Nouns(tmp_path, mem_queue_size=2)
    ch = nouns.topic.get_channel(b"c#ephemeral")
    nouns.publish([b"1", b"2", b"3"])
    assert bodies(ch) == [b"1", b"2"] and nouns.topic.dropped == 1
    nouns.close()


def test_deleting_a_channel_releases_its_messages(tmp_path):
    nouns = Nouns(tmp_path)
    ch = nouns.topic.get_channel(b"c")
    nouns.publish([b"1", b"2"])
    assert nouns.topic.delete_channel(ch) and not nouns.topic.delete_channel(ch)
    assert nouns.topic.segments[(0, 0)].refs == 0 and not ch.ready
    nouns.close()


def test_drop_oldest_forgets_the_oldest_files_and_acknowledges_their_messages(tmp_path):
    # files of one header and 4096 bytes: three 1000-byte messages each
    nouns = Nouns(tmp_path, segment_bytes=HEADER_SIZE + 4096, max_topic_bytes=5000)
    topic = nouns.topic
    ch = topic.get_channel(b"c")
    for i in range(9):
        nouns.publish([b"%d" % i * 1000])
    drain_background()
    kept = {m.segment.seq for m, _ in ch.ready}
    dropped_files = [seq for seq in range(nouns.writer.seq) if seq not in kept]
    assert dropped_files and topic.disk_bytes <= 5000 and topic.dropped == 9 - len(ch.ready)
    assert not any(os.path.exists(segment_path(topic.dir, 0, seq)) for seq in dropped_files)
    assert all(os.path.exists(segment_path(topic.dir, 0, seq)) for seq in kept)
    nouns.run()  # the end of the tick appends the acks
    acked = sorted((q, o) for _, _, q, o in nouns.acks())
    assert len(acked) == topic.dropped and {q for q, _ in acked} == set(dropped_files)
    assert [m.body[:1] for m, _ in ch.ready] == [b"%d" % i for i in range(topic.dropped, 9)]
    nouns.close()


def test_refuse_tells_the_acceptors_when_full_and_when_there_is_room_again(tmp_path):
    nouns = Nouns(tmp_path, segment_bytes=HEADER_SIZE + 4096, max_topic_bytes=5000,
                  topic_full_policy="refuse")
    topic = nouns.topic
    ch = topic.get_channel(b"c")
    ids = [i for n in range(6) for i in nouns.publish([b"x" * 1000])]
    full = records.topic_full(b"t", True)
    assert topic.full and nouns.sent == [(-1, full)] and len(ch.ready) == 6
    nouns.sent.clear()
    c = nouns.consumer(ch, 1, rdy=6)
    nouns.run()
    nouns.frames()
    nouns.fin(c, ids[:4])  # the files of the first four go: under 90 % of the cap
    assert not topic.full and (-1, records.topic_full(b"t", False)) in nouns.sent
    nouns.close()
