"""The segment tail (native/segtail.c and its twin in nsqmp/diskqueue/pubrun.py) and the
ID generator it advances (native/ids.c and nsqmp/protocol/ids.py): both implementations
on the same cases. Runs through a SegmentWriter, with growths and rolls, are in
test_segment.py; the broker's runs in tests/acceptor/test_pub_fastpath.py."""
from __future__ import annotations

import gc
import os
import random
import sys
import time

import pytest

from nsqmp.client import wire
from nsqmp.diskqueue import pubrun
from nsqmp.diskqueue.segment import iter_blob
from nsqmp.ipc import records
from nsqmp.layouts import MESSAGE_HEAD
from nsqmp.protocol import ids as id_module
from tests.harness import memory_kept_by, native_module

MAX_MSG, MAX_BODY = 1024, 8192
FIELDS = records.PUBLISH_AT_FIELDS
EPOCH_MS = 1288834974657


def implementation(name: str):
    """(SegmentTail, IdGenerator) of one implementation."""
    if name == "native":
        mod = native_module("SegmentTail")
        return mod.SegmentTail, mod.IdGenerator
    return pubrun.SegmentTail, id_module.PyIdGenerator


@pytest.fixture(params=["native", "python"])
def impl(request):
    return implementation(request.param)


def head(seq: int = 3) -> bytes:
    return records.publish_at(1, seq, 0, 0, 0, b"t")


def open_tail(impl, path, size: int = 1 << 20, window: int = 64 << 10, node: int = 5):
    tail_type, id_type = impl
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.posix_fallocate(fd, 0, size)
    tail = tail_type(b"t", id_type(node), MAX_MSG, MAX_BODY, FIELDS, window)
    tail.attach(fd, 64, size - 8, head())
    return tail, fd


def test_the_native_id_generator_is_the_one_in_use_and_counts_as_the_twin():
    native = native_module("IdGenerator").IdGenerator
    if os.environ.get("NSQMP_PURE_PYTHON") != "1":
        assert id_module.IdGenerator is native
    for gen in (native(5 + 1024), id_module.PyIdGenerator(5 + 1024)):
        assert gen.node == 5 and (gen.ms, gen.seq) == (0, 0)
        before = time.time_ns() // 1_000_000 - EPOCH_MS
        first = gen.next_block(10)
        assert first >> 22 >= before and (first >> 12) & 0x3FF == 5 and first & 0xFFF == 0
        assert gen.next_block(1) == first + 10 and gen.seq == 11
        gen.seq = 4090  # the millisecond's IDs run out: the next block borrows the next one
        ms = gen.ms
        nxt = gen.next_block(10)
        assert nxt == (ms + 1) << 22 | 5 << 12 and (gen.ms, gen.seq) == (ms + 1, 10)
        for bad in (0, 4097, -1):
            with pytest.raises(ValueError):
                gen.next_block(bad)


def test_a_run_is_appended_at_the_tail_and_its_publish_at_says_where(impl, tmp_path):
    tail, fd = open_tail(impl, tmp_path / "s")
    try:
        buf = wire.pub("t", b"one") + wire.mpub("t", [b"two", b"three"]) + wire.pub("u", b"not mine")
        end, commands, messages, record = tail.run(buf, 0)
        assert (end, commands, messages) == (len(buf) - len(wire.pub("u", b"not mine")), 2, 3)
        size = tail.pos - 64
        assert size == sum(8 + 26 + len(b) for b in (b"one", b"two", b"three"))
        assert records.parse_publish_at(record) == (1, 3, 64, 3, size, b"t")
        written = os.pread(fd, size + 8, 64)
        assert [m[MESSAGE_HEAD.size:] for _, m, _ in iter_blob(written[:size])] == [b"one", b"two", b"three"]
        assert written[size:] == bytes(8)  # the end stays marked
        ids = [int(MESSAGE_HEAD.unpack_from(m)[2], 16) for _, m, _ in iter_blob(written[:size])]
        assert ids == [ids[0] + k for k in range(3)] and tail.ids.seq == (ids[0] & 0xFFF) + 3
        assert tail.unsynced == 1 and 0 < tail.window_len <= 64 << 10
        # the next run goes on where this one ended
        end, commands, messages, record = tail.run(wire.pub("t", b"four"), 0)
        assert records.parse_publish_at(record)[2] == 64 + size and commands == messages == 1
    finally:
        tail.detach()
        os.close(fd)


def test_a_tail_takes_nothing_when_it_may_not(impl, tmp_path):
    tail, fd = open_tail(impl, tmp_path / "s")
    buf = wire.pub("t", b"x")
    try:
        tail.taking = False  # the topic is full
        assert tail.run(buf, 0) == (0, 0, 0, None)
        tail.taking = True
        tail.end = tail.pos + 8 + 26  # no room for its record
        assert tail.run(buf, 0) == (0, 0, 0, None)
        tail.end = tail.pos + 8 + 26 + 1
        assert tail.run(buf, 0)[:3] == (len(buf), 1, 1)
        assert tail.run(buf[:-1], 0) == (0, 0, 0, None)  # not all here yet
        tail.attach(fd, 64, 1 << 19, None)  # no PUBLISH_AT: no run
        assert tail.run(buf, 0) == (0, 0, 0, None)
        tail.detach()
        assert tail.fd == -1 and tail.window_len == 0 and tail.run(buf, 0) == (0, 0, 0, None)
    finally:
        tail.detach()
        os.close(fd)
    tail_type, _ = impl
    assert tail_type().run(buf, 0) == (0, 0, 0, None)  # a writer's own tail: no topic, no ids


def test_syncs_every_n_appends_and_strict(impl, tmp_path):
    tail, fd = open_tail(impl, tmp_path / "s")
    calls = []

    def on_sync():
        calls.append(tail.unsynced)
        tail.unsynced = 0  # what SegmentWriter.sync does

    try:
        tail.on_sync, tail.sync_every = on_sync, 3
        for _ in range(7):
            tail.run(wire.pub("t", b"x"), 0)
        assert calls == [3, 3] and tail.unsynced == 1
        tail.sync_every = 1  # strict: synced before run() returns, no callback
        tail.run(wire.pub("t", b"x"), 0)
        assert calls == [3, 3] and tail.unsynced == 0
    finally:
        tail.detach()
        os.close(fd)


def test_a_failed_write_takes_nothing(impl, tmp_path):
    """A file it cannot map or write: OSError, and the position and the IDs stay."""
    tail_type, id_type = impl
    path = tmp_path / "ro"
    path.write_bytes(bytes(1 << 16))
    fd = os.open(path, os.O_RDONLY)
    ids = id_type(5)
    tail = tail_type(b"t", ids, MAX_MSG, MAX_BODY, FIELDS, 64 << 10)
    try:
        tail.attach(fd, 64, (1 << 16) - 8, head())
        with pytest.raises(OSError):
            tail.run(wire.pub("t", b"x"), 0)
        assert tail.pos == 64 and tail.unsynced == 0 and (ids.ms, ids.seq) == (0, 0)
    finally:
        tail.detach()
        os.close(fd)


def test_bad_arguments_are_refused(impl, tmp_path):
    tail_type, id_type = impl
    with pytest.raises(ValueError):
        tail_type(b"t", id_type(1), MAX_MSG, MAX_BODY, FIELDS, 1000)  # not a multiple of the page
    tail = tail_type(b"t", id_type(1), MAX_MSG, MAX_BODY, FIELDS, 64 << 10)
    with pytest.raises(ValueError):
        tail.attach(-1, 64, 1000, head()[:FIELDS[2] + 3])  # shorter than its fields
    with pytest.raises(ValueError):
        tail.run(b"PUB t\n", 7)


def test_the_native_tail_wants_the_native_ids():
    mod = native_module("SegmentTail")
    with pytest.raises(TypeError):
        mod.SegmentTail(b"t", id_module.PyIdGenerator(1), MAX_MSG, MAX_BODY, FIELDS)


def test_both_append_the_same_runs(tmp_path):
    """Random reads of PUB/MPUB (some cut, some on another topic) through both: the same
    commands taken, the same PUBLISH_ATs, the same bodies in the same places."""
    rng = random.Random(7)
    reads = []
    for _ in range(400):
        cmds = [wire.pub("t", os.urandom(rng.randint(1, 300))) if rng.random() < 0.7 else
                wire.mpub("t", [os.urandom(rng.randint(1, 200)) for _ in range(rng.randint(1, 20))])
                for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.2:
            cmds.insert(rng.randrange(len(cmds)), wire.pub("u", b"other"))
        buf = b"".join(cmds)
        if rng.random() < 0.2:
            buf = buf[:rng.randrange(len(buf))]
        reads.append(buf)
    outcomes = []
    for name in ("native", "python"):
        tail, fd = open_tail(implementation(name), tmp_path / name, size=4 << 20, window=16 << 10)
        got = []
        try:
            for buf in reads:
                end, commands, messages, record = tail.run(buf, 0)
                fields = records.parse_publish_at(record)[2:5] if record is not None else None
                got.append((end, commands, messages, fields))
            data = os.pread(fd, tail.pos - 64, 64)
        finally:
            tail.detach()
            os.close(fd)
        outcomes.append((got, [(at, m[MESSAGE_HEAD.size:]) for at, m, _ in iter_blob(data)]))
    assert outcomes[0] == outcomes[1]
    assert sum(c for _, c, _, _ in outcomes[0][0]) > 500


def test_no_reference_or_memory_is_leaked(tmp_path):
    mod = native_module("SegmentTail")
    tail, fd = open_tail((mod.SegmentTail, mod.IdGenerator), tmp_path / "s", size=64 << 20)
    buf = wire.pub("t", b"x" * 50) * 3
    topic = tail.topic
    try:
        def once():
            if tail.pos > (60 << 20):
                tail.attach(fd, 64, (64 << 20) - 8, head())
            tail.run(buf, 0)
            tail.run(b"NOP\n", 0)
            try:
                tail.run(buf, len(buf) + 1)
            except ValueError:
                pass

        once()
        refs = sys.getrefcount(topic)
        grown = memory_kept_by(once, times=50_000)
        assert sys.getrefcount(topic) == refs
        assert grown < 64 * 1024, grown
    finally:
        tail.detach()
        os.close(fd)
    # a tail in a cycle with its writer's on_sync goes with the garbage collector
    t = mod.SegmentTail(b"t", mod.IdGenerator(1), MAX_MSG, MAX_BODY, FIELDS)
    holder = [t]
    t.on_sync = holder.append
    del t, holder
    gc.collect()
