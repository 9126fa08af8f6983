"""Segment files: round trip, deferred records, corruption recovery, full disk."""
from __future__ import annotations

import errno
import os
import random
import struct

import pytest

from nsqmp.diskqueue.segment import (
    HEADER_SIZE, ScanStats, SegmentWriter, encode, iter_blob, parse_name, scan, segment_path,
)
from nsqmp.protocol.frames import MESSAGE_HEADER
from tests.harness import native_module


def message(i: int, size: int = 100) -> bytes:
    body = (b"%08d" % i) * (size // 8)
    return MESSAGE_HEADER.pack(1_700_000_000_000_000_000 + i, 0, b"%016x" % i) + body


def write_segment(tmp_path, n: int, batch: int = 1) -> tuple[str, list[int]]:
    w = SegmentWriter(str(tmp_path), 3, 1 << 24, 0)
    offsets = []
    for i in range(0, n, batch):
        blob = encode([message(k) for k in range(i, min(n, i + batch))])
        seq, off = w.append(blob)
        offsets += [off + rel for rel, _, _ in iter_blob(blob)]
    w.close()
    return segment_path(str(tmp_path), 3, 0), offsets


def test_round_trip_and_names(tmp_path):
    path, offsets = write_segment(tmp_path, 500, batch=7)
    got = list(scan(path))
    assert [o for o, _, _ in got] == offsets
    assert [p for _, p, _ in got] == [message(i) for i in range(500)]
    assert parse_name(os.path.basename(path)) == (3, 0)
    assert parse_name("x.seg") is None


def test_deferred_records_carry_their_due_time(tmp_path):
    w = SegmentWriter(str(tmp_path), 0, 1 << 20, 0)
    w.append(encode([message(1)], due_ns=123456789))
    w.append(encode([message(2)]))
    w.close()
    got = list(scan(segment_path(str(tmp_path), 0, 0)))
    assert [(p, d) for _, p, d in got] == [(message(1), 123456789), (message(2), 0)]


def test_rolls_at_max_bytes_and_never_reuses_a_sequence(tmp_path):
    w = SegmentWriter(str(tmp_path), 1, 8192, 0)
    seqs = {w.append(encode([message(i, 1000)]))[0] for i in range(40)}
    w.close()
    assert len(seqs) > 3
    again = SegmentWriter(str(tmp_path), 1, 8192, 0)
    assert again.append(encode([message(99)]))[0] == max(seqs) + 1
    again.close()


def nsqd_rule(offsets: list[int], damaged_at: int) -> int:
    """What nsqd keeps: the records before the first damaged one (it renames the file .bad)."""
    return sum(1 for o in offsets if o < damaged_at)


@pytest.mark.parametrize("how", ["flip-payload", "flip-length", "zero-page", "garbage-run"])
def test_damaged_records_are_skipped_and_reading_resumes(tmp_path, how):
    n = 2000
    path, offsets = write_segment(tmp_path, n)
    rng = random.Random(how)
    victim = rng.randrange(n // 4, n // 2)
    at = offsets[victim]
    with open(path, "r+b") as f:
        if how == "flip-payload":
            f.seek(at + 40)
            f.write(b"\xff")
        elif how == "flip-length":
            f.seek(at)
            f.write(b"\x13\x37\x00\x00")
        elif how == "zero-page":
            page = at & ~4095
            at = max(page, HEADER_SIZE)
            f.seek(at)
            f.write(bytes(4096))
        else:
            f.seek(at + 10)
            f.write(os.urandom(700))
    stats = ScanStats()
    got = [p for _, p, _ in scan(path, stats)]
    lost = n - len(got)
    kept_by_nsqd = nsqd_rule(offsets, at)
    print(f"\n{how}: recovered {len(got)}/{n} (nsqd's rule keeps {kept_by_nsqd}); "
          f"skipped {stats.damaged} damaged stretch(es), {stats.skipped_bytes} bytes")
    assert stats.damaged >= 1
    assert set(got) <= {message(i) for i in range(n)}
    assert lost <= (4096 // 100 + 2 if how == "zero-page" else 8)
    assert len(got) > kept_by_nsqd


def test_torn_tail_keeps_everything_before_it(tmp_path):
    path, offsets = write_segment(tmp_path, 100)
    with open(path, "r+b") as f:
        f.truncate(offsets[60] + 20)  # a record cut in the middle, as a crash leaves it
    stats = ScanStats()
    assert len(list(scan(path, stats))) == 60
    assert stats.damaged == 1


def test_without_resync_reading_stops_at_the_first_bad_record(tmp_path):
    path, offsets = write_segment(tmp_path, 100)
    with open(path, "r+b") as f:
        f.seek(offsets[30] + 40)
        f.write(b"\xff")
    assert len(list(scan(path, resync=False))) == 30
    assert len(list(scan(path, resync=True))) == 99


def test_full_disk_is_an_error_not_a_crash(small_fs):
    small_fs = small_fs("1m")
    w = SegmentWriter(str(small_fs / "t"), 0, 1 << 24, 0)
    accepted = 0
    with pytest.raises(OSError) as info:
        for i in range(100_000):
            w.append(encode([message(i, 4000)] * 4))
            accepted += 4
    assert info.value.errno == errno.ENOSPC
    w.close()
    got = [p for name in sorted(os.listdir(small_fs / "t"))
           for _, p, _ in scan(str(small_fs / "t" / name))]
    assert len(got) == accepted  # everything accepted before the failure is there, intact


def test_a_roll_syncs_and_closes_the_full_file_in_the_background(tmp_path):
    """The full file's descriptor is closed by the background job, after the next file
    exists; close() waits for it; every record is readable in order."""
    w = SegmentWriter(str(tmp_path), 2, 8192, 1)  # a sync after every append
    payloads = [bytes(10) + b"%016x" % i + b"x" * 1500 for i in range(12)]
    places = [w.append(encode([p])) for p in payloads]
    seqs = sorted({seq for seq, _ in places})
    assert len(seqs) > 2
    w.close()
    assert w._fd == -1
    got = [payload for seq in seqs for _, payload, _ in scan(segment_path(str(tmp_path), 2, seq))]
    assert got == payloads
    open_fds = os.listdir("/proc/self/fd")
    assert not any(os.readlink(f"/proc/self/fd/{fd}").endswith(".seg") for fd in open_fds
                   if os.path.exists(f"/proc/self/fd/{fd}"))


def test_sync_every_one_syncs_in_place_and_others_in_the_background(tmp_path):
    """--sync-every 1 is strict: the append returns after its own fdatasync (nothing left
    for a background job); a larger value hands its syncs to the background thread."""
    strict = SegmentWriter(str(tmp_path / "strict"), 0, 1 << 20, 1)
    strict.append(encode([bytes(26) + b"a"]))
    assert strict.tail.unsynced == 0 and strict._last_job is None
    strict.close()
    lazy = SegmentWriter(str(tmp_path / "lazy"), 0, 1 << 20, 2)
    lazy.append(encode([bytes(26) + b"a"]))
    assert lazy.tail.unsynced == 1 and lazy._last_job is None
    lazy.append(encode([bytes(26) + b"b"]))
    assert lazy.tail.unsynced == 0 and lazy._last_job is not None
    lazy.close()
    assert lazy._last_job is None


@pytest.mark.parametrize("impl", ["native", "python"])
def test_runs_go_through_a_moving_window_across_growths_and_rolls(tmp_path, impl):
    """A segment tail's runs go into a mapping of `window` bytes that moves on as the file
    fills; the general path's appends (pwrite) interleave; every record lands once, in
    order, and each run's PUBLISH_AT says where its records are."""
    from nsqmp.client import wire
    from nsqmp.diskqueue import pubrun
    from nsqmp.ipc import records
    from nsqmp.protocol import ids as id_module

    if impl == "native":
        native = native_module("SegmentTail")
        tail_type, ids = native.SegmentTail, native.IdGenerator(5)
    else:
        tail_type, ids = pubrun.SegmentTail, id_module.PyIdGenerator(5)
    tail = tail_type(b"t", ids, 1 << 20, 1 << 22, records.PUBLISH_AT_FIELDS, 64 << 10)
    w = SegmentWriter(str(tmp_path), 0, 1 << 21, 0, tail, lambda seq: records.publish_at(0, seq, 0, 0, 0, b"t"))
    rng = random.Random(11)
    expected: list[bytes] = []
    windows = set()
    w.append(encode([message(0)]))  # a writer opens its file on the general path
    expected.append(message(0)[MESSAGE_HEADER.size:])
    k = 1
    while k < 6000:
        bodies = [b"%06d" % (k + i) + b"x" * rng.randint(0, 900) for i in range(rng.randint(1, 40))]
        buf = bytearray(b"".join(wire.pub("t", b) for b in bodies))
        pos = 0
        for b in bodies:
            if pos == len(buf):
                break
            at = w.pos
            end, commands, messages, record = w.tail.run(buf, pos)
            if commands:
                assert 0 < w.tail.window_len <= 64 << 10
                windows.add(w.tail.window_start)
                assert records.parse_publish_at(record) == (0, w.seq, at, messages, w.pos - at, b"t")
                assert messages == commands  # PUBs only
                pos = end
                continue
            assert record is None and end == pos
            # what the general path does with the first command: a growth or a roll
            (n,) = struct.unpack_from(">i", buf, pos + 6)
            w.append(encode([MESSAGE_HEADER.pack(0, 0, b"%016x" % 0) + bytes(buf[pos + 10:pos + 10 + n])]))
            pos += 10 + n
        expected += bodies
        k += len(bodies)
    w.close()
    assert w.tail.fd == -1 and w.tail.window_len == 0 and w.tail.run(b"PUB t\n", 0) == (0, 0, 0, None)
    got = []
    for seq in range(w.seq + 1):
        got += [p[MESSAGE_HEADER.size:] for _, p, _ in scan(segment_path(str(tmp_path), 0, seq))]
    assert got == expected
    assert w.seq >= 1 and len(windows) > 10  # it rolled, and the window moved many times
