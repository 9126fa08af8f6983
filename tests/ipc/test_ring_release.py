"""Ring.release_if_idle (native + twin): an idle ring's data pages go back to the kernel,
and no record is ever lost or damaged by it, in one process and across two."""

from __future__ import annotations

import mmap
import os
import struct
import time

import posix_ipc
import pytest

from nsqmp.ipc import shm
from nsqmp.ipc.pyring import PyRing, ring_size
from tests.harness import endpoint_pair

try:
    from nsqmp._native import Ring as NativeRing
except ImportError:  # pragma: no cover - the extension must build
    NativeRing = None

CAP = 1 << 20
IMPLS = {"native": NativeRing, "python": PyRing}
PAGE = mmap.PAGESIZE


@pytest.fixture(params=sorted(IMPLS))
def impl(request):
    return IMPLS[request.param]


@pytest.fixture
def segment():
    """(mmap, fd) of a fresh POSIX shared-memory segment holding one ring of CAP bytes."""
    name = shm.segment_name(os.getpid(), f"test-release-{time.monotonic_ns()}")
    seg = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=ring_size(CAP))
    buf = mmap.mmap(seg.fd, ring_size(CAP))
    try:
        yield buf, seg.fd
    finally:
        buf.close()
        seg.close_fd()
        shm.unlink(name)


def allocated(fd: int) -> int:
    """Bytes of memory the shm file holds (tmpfs counts its pages in st_blocks)."""
    return os.fstat(fd).st_blocks * 512


def record(i: int) -> bytes:
    """Record i: its number, then a size and a filling that depend on it."""
    return struct.pack("<Q", i) + bytes([i & 0xFF]) * (i * 7919 % 700)


def check(rec: bytes, i: int) -> None:
    assert rec == record(i), f"record {i} damaged: {rec[:16]!r}..."


def release(ring) -> int:
    """Two calls, nothing pushed between them: one of them releases an empty ring whatever
    the ring's previous call saw; returns the bytes released."""
    return ring.release_if_idle() + ring.release_if_idle()


def test_burst_then_drain_gives_the_pages_back(impl, segment):
    buf, fd = segment
    ring = impl.format(buf, CAP)
    i = 0
    for _ in range(3):  # a burst that wraps: every data page written
        while ring.push(record(i)):
            i += 1
        while ring.pop() is not None:
            pass
    assert allocated(fd) >= CAP
    header = bytes(buf[:512])
    assert ring.release_if_idle() == 0  # the first call only looks
    released = ring.release_if_idle()
    assert released == CAP - PAGE  # whole pages from the second page; the partial last one stays
    assert allocated(fd) <= 2 * PAGE
    assert bytes(buf[:512]) == header  # head, tail, flags, capacity untouched
    assert ring.release_if_idle() == 0  # released already at this head: no second madvise
    assert ring.used == 0 and ring.capacity == CAP


def test_kept_while_records_wait_or_a_burst_came(impl, segment):
    buf, _fd = segment
    ring = impl.format(buf, CAP)
    assert ring.release_if_idle() == 0  # the first call only looks
    ring.push(b"waiting")
    assert ring.release_if_idle() == 0  # not empty
    assert ring.pop() == b"waiting"
    assert ring.release_if_idle() > 0  # empty, and a trickle since the previous call
    pushed = i = 0
    while pushed < CAP // 32:  # a burst since the previous call: a busy ring keeps its pages
        ring.push(record(i))
        pushed += len(record(i))
        i += 1
        ring.pop()
    assert ring.release_if_idle() == 0
    assert ring.release_if_idle() > 0  # quiet since
    assert ring.release_if_idle() == 0  # nothing since: released already, no second madvise


def test_private_buffer_releases_nothing(impl):
    ring = impl.format(bytearray(ring_size(CAP)), CAP)
    assert release(ring) == 0


def test_records_after_a_release_read_back_intact_across_the_wrap(impl, segment):
    buf, _fd = segment
    ring = impl.format(buf, CAP)
    consumer = IMPLS["python" if impl is NativeRing else "native"](buf)  # the other twin reads
    i = j = 0
    for round_ in range(12):
        # push until full (the head wraps every round or two), then drain all
        while ring.push(record(i)):
            i += 1
        while (rec := consumer.pop()) is not None:
            check(rec, j)
            j += 1
        assert release(ring) > 0, f"round {round_}"
        # a few records right after the release, read back before the next burst
        for _ in range(round_ * 37 % 100):
            assert ring.push(record(i))
            i += 1
        for rec in consumer.pop_many():
            check(rec, j)
            j += 1
    assert i == j > 12 * CAP // 400


def test_endpoint_releases_idle_outbound_rings_only():
    with endpoint_pair() as (acceptor, router, plan):
        dst = plan.router_slot(0)
        for k in range(200):  # 40 KiB: fits the pair's 64 KiB ring
            acceptor.send(dst, b"%d" % k + b"x" * 200)
        acceptor.flush()
        assert router.drain(lambda src, rec: None) > 0
        acceptor.send(dst, b"queued")  # pending, not flushed: the ring is wanted again
        assert acceptor.release_idle() == 0 and acceptor.release_idle() == 0
        acceptor.flush()
        router.drain(lambda src, rec: None)
        acceptor.release_idle()
        assert acceptor.release_idle() > 0
        assert router.release_idle() == 0  # its ring to the acceptor was never written:
        assert router.release_idle() > 0  # ... released once it stayed idle
        assert acceptor.out_peak[dst] > 0  # the high-water mark stays
        acceptor.send(dst, b"after")
        acceptor.flush()
        seen = []
        router.drain(lambda src, rec: seen.append(rec))
        assert seen == [b"after"]


@pytest.mark.parametrize("producer_impl", sorted(IMPLS))
def test_two_processes_hammering_while_releases_happen(producer_impl, segment):
    """A forked producer pushes numbered records and, whenever it finds the ring drained,
    releases its pages; the parent pops and checks every record. A few seconds."""
    buf, _fd = segment
    NativeRing.format(buf, CAP)
    seconds = 3.0
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the producer
        code = 1
        try:
            os.close(rfd)
            ring = IMPLS[producer_impl](buf)
            i = releases = 0
            end = time.monotonic() + seconds
            n = 0
            while time.monotonic() < end:
                batch = [record(k) for k in range(i, i + 64)]
                written, _wake = ring.push_many(batch)
                i += written
                if ring.release_if_idle():  # when the consumer emptied it meanwhile
                    releases += 1
                if not written:  # full: two calls in a row must release nothing either
                    ring.release_if_idle()
                    time.sleep(0.0002)
                n += 1
                if n % 128 == 0:  # a pause: once the consumer drained it, release
                    while ring.used and time.monotonic() < end + 5:  # bounded: a failed
                        time.sleep(0.0001)  # consumer stops draining
                    if release(ring):
                        releases += 1
            while not ring.push(b"") and time.monotonic() < end + 10:  # the end
                time.sleep(0.001)
            os.write(wfd, struct.pack("<QQ", i, releases))
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    ring = NativeRing(buf)
    j = batches = 0
    give_up = time.monotonic() + seconds + 20
    try:
        while True:
            recs = ring.pop_many()
            if not recs:
                assert time.monotonic() < give_up, "the producer's end record never came"
                time.sleep(0.0001)  # sleeping lets the producer find the ring empty
                continue
            if recs[-1] == b"":
                recs.pop()
                for rec in recs:
                    check(rec, j)
                    j += 1
                break
            for rec in recs:
                check(rec, j)
                j += 1
            batches += 1
            if batches % 100 == 0:  # a slow consumer now and then: the producer finds it full
                time.sleep(0.03)
    finally:
        _, status = os.waitpid(pid, 0)
        pushed, releases = struct.unpack("<QQ", os.read(rfd, 16))
        os.close(rfd)
        ring.release()
    assert os.waitstatus_to_exitcode(status) == 0
    assert j == pushed > 10_000
    assert releases > 20  # the consumer polled the ring while it was released
