"""The ack log and the topic metadata file."""
from __future__ import annotations

import os
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from nsqmp.diskqueue import acklog, meta
from nsqmp.diskqueue.layout import list_topics, topic_dir
from nsqmp.diskqueue.segment import drain_background
from tests.harness import native_module


def test_acklog_appends_reopens_and_compacts(tmp_path):
    log = acklog.AckLog(str(tmp_path))
    log.append(acklog.pack([(1, 0, 5, 64), (2, 1, 5, 128)]))
    log.append(acklog.pack([(1, 0, 6, 64)]))
    log.close()
    assert list(acklog.read(str(tmp_path))) == [(1, 0, 5, 64), (2, 1, 5, 128), (1, 0, 6, 64)]
    log = acklog.AckLog(str(tmp_path))
    assert log.entries == 3
    log.append(acklog.pack([(3, 0, 6, 99)]))
    kept = log.compact({(0, 6)})
    assert kept == 2
    log.append(acklog.pack([(1, 0, 7, 1)]))
    log.close()
    assert list(acklog.read(str(tmp_path))) == [(1, 0, 6, 64), (3, 0, 6, 99), (1, 0, 7, 1)]


def test_meta_round_trip_is_atomic(tmp_path):
    m = meta.TopicMeta(paused=True, next_channel_id=3, channels=[
        meta.ChannelMeta("a", 1, False, None),
        meta.ChannelMeta("b", 2, True, {0: (4, 640), 1: (0, 64)}),
    ])
    meta.write(str(tmp_path), m)
    assert meta.read(str(tmp_path)) == m
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    assert meta.read(str(tmp_path / "missing")) is None


def test_dot_names_stay_inside_the_data_path(tmp_path):
    for name in (".", "..", "a.b", ".hidden"):
        d = topic_dir(str(tmp_path), name)
        assert os.path.realpath(d).startswith(os.path.realpath(tmp_path / "topics") + os.sep)
        os.makedirs(d)
    assert list_topics(str(tmp_path)) == sorted([".", "..", "a.b", ".hidden"])


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(st.tuples(st.integers(1, 0xFFFF), st.integers(0, 3), st.integers(0, 6),
                                  st.integers(0, 2**64 - 1)), max_size=60),
       live=st.sets(st.tuples(st.integers(0, 3), st.integers(0, 6))), tail=st.binary(max_size=15))
def test_keep_entries_native_and_twin_agree_with_a_model(entries, live, tail):
    data = acklog.pack(entries) + tail  # a trailing partial entry is ignored
    keys = array("Q", sorted(a << 32 | q for a, q in live)).tobytes()
    want = acklog.pack([e for e in entries if (e[1], e[2]) in live])
    assert acklog.py_keep_entries(data, keys) == want
    assert native_module("keep_entries").keep_entries(data, keys) == want


@given(channel=st.integers(1, 0xFFFF), acceptor=st.integers(0, 0xFFFF), seq=st.integers(0, 2**32 - 1),
       offsets=st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_pack_file_is_pack_of_the_same_entries(channel, acceptor, seq, offsets):
    assert acklog.pack_file(channel, acceptor, seq, offsets) == \
        acklog.pack([(channel, acceptor, seq, o) for o in offsets])


def test_a_compaction_in_the_background_keeps_what_is_appended_meanwhile(tmp_path):
    log = acklog.AckLog(str(tmp_path))
    log.append(acklog.pack([(1, 0, 5, 64), (1, 0, 6, 64), (2, 0, 5, 96)]))
    log.compact_soon({(0, 6)})
    assert log.compacting
    log.append(acklog.pack([(1, 0, 5, 128), (1, 0, 7, 64)]))  # while it runs: kept as they are
    log.compact_soon({(0, 7)})  # one at a time: ignored
    log.append(acklog.pack([(2, 0, 7, 96)]))
    while not log.finish_compaction():  # the rewrite, then the catch-up, then the swap
        drain_background()
        log.append(acklog.pack([(4, 0, 7, 8)]))  # during each step
    during = log.entries - 4
    assert not log.compacting and during >= 2
    log.append(acklog.pack([(3, 0, 7, 1)]))
    log.close()
    assert list(acklog.read(str(tmp_path))) == (
        [(1, 0, 6, 64), (1, 0, 5, 128), (1, 0, 7, 64), (2, 0, 7, 96)] + [(4, 0, 7, 8)] * during + [(3, 0, 7, 1)])
    assert sorted(os.listdir(tmp_path)) == ["acks.log"]


def test_closing_during_a_compaction_keeps_the_log_and_drops_the_rewrite(tmp_path):
    log = acklog.AckLog(str(tmp_path))
    log.append(acklog.pack([(1, 0, 5, 64), (1, 0, 6, 64)]))
    log.compact_soon({(0, 6)})
    log.close()
    assert list(acklog.read(str(tmp_path))) == [(1, 0, 5, 64), (1, 0, 6, 64)]
    assert sorted(os.listdir(tmp_path)) == ["acks.log"]


def _mapped_rss_kib(path: str) -> int:
    """This process's resident KiB of its mappings of path (/proc/self/smaps)."""
    rss, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line[:1].isdigit() or line[:1] in "abcdef" and "-" in line.split()[0]:
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1])
    return rss


def test_synced_pages_leave_the_routers_memory_and_keep_their_entries(tmp_path):
    """A FIN's 16 bytes would otherwise stay in the router's resident memory (PSS) until a
    compaction: sync() takes the written pages out of the mapping, not out of the file."""
    log = acklog.AckLog(str(tmp_path))
    entries = [(1, 0, 7, off) for off in range(200_000)]  # 3.2 MB
    log.append(acklog.pack(entries[:100_000]))
    assert _mapped_rss_kib(log.path) > 1000
    log.sync()
    drain_background()
    assert _mapped_rss_kib(log.path) < 100
    log.append(acklog.pack(entries[100_000:]))  # appending after a released page works
    log.sync()
    log.close()
    assert list(acklog.read(str(tmp_path))) == entries
