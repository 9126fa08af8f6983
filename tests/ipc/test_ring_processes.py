"""Two processes sharing a ring in POSIX shared memory, eventfd doorbells.

The forked child produces records with push_many; the parent consumes with
pop_many and verifies every byte and the order.  The ring is small (64 KiB)
so it wraps thousands of times; neither side spins (prepare_sleep /
prepare_wait + eventfd).
"""

from __future__ import annotations

import json
import mmap
import os
import random
import secrets
import select
import signal
import sys
import time
import traceback

import posix_ipc
import pytest

from nsqmp.ipc.pyring import PyRing, ring_size
from tests.harness import wait_for

try:
    from nsqmp._native import Ring as NativeRing
except ImportError:  # pragma: no cover - the extension must build
    NativeRing = None

CAPACITY = 64 * 1024
BATCH = 128
SEED = 20240611
# Record i: size SIZES[i % len(SIZES)] (0..200 bytes) and content
# PATTERN[o:o+size] with o = (i * 40503) % 65536.  len(SIZES) is prime and
# coprime with 65536, so (size, offset) only repeat every ~4.3e9 records:
# a lost, duplicated or reordered record changes the expected bytes.
_rng = random.Random(SEED)
SIZES = [_rng.randrange(0, 201) for _ in range(65521)]
PATTERN = _rng.randbytes(65536 + 256)
NSIZES = len(SIZES)


def make_batch(start: int, count: int) -> list[bytes]:
    sizes, pattern, nsizes = SIZES, PATTERN, NSIZES
    out = []
    for i in range(start, start + count):
        o = (i * 40503) & 0xFFFF
        out.append(pattern[o : o + sizes[i % nsizes]])
    return out


class Bell:
    """eventfd doorbell counting the syscalls we issue on it."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.poller = select.poll()
        self.poller.register(self.fd, select.POLLIN)
        self.writes = 0
        self.waits = 0

    def ring(self) -> None:
        self.writes += 1
        os.eventfd_write(self.fd, 1)

    def wait(self, timeout_ms: int) -> bool:
        self.waits += 1
        if not self.poller.poll(timeout_ms):
            return False
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            pass
        return True


def shm_buffer(size: int) -> mmap.mmap:
    name = f"/nsqmp-test-ring-{os.getpid()}-{secrets.token_hex(6)}"
    shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
    try:
        return mmap.mmap(shm.fd, size)
    finally:
        shm.close_fd()
        shm.unlink()  # the mapping survives; nothing left in /dev/shm


def producer(
    ring, total: int, cbell: Bell, pbell: Bell, deadline: float, single: bool = False
) -> dict:
    sent = 0
    waits = 0
    push_many = ring.push_many
    push = ring.push
    while single and sent < total:  # one push() per record
        for rec in make_batch(sent, min(BATCH, total - sent)):
            while not (res := push(rec)):
                if ring.prepare_wait(len(rec)):
                    waits += 1
                    if not pbell.wait(500) and time.monotonic() > deadline:
                        raise TimeoutError("producer timed out")
            if res == 2:
                cbell.ring()
            sent += 1
    while sent < total:
        batch = make_batch(sent, min(BATCH, total - sent))
        j = 0
        while j < len(batch):
            n, wake = push_many(batch, j)
            if wake:
                cbell.ring()
            j += n
            if j < len(batch) and ring.prepare_wait(len(batch[j])):
                waits += 1
                if not pbell.wait(500) and time.monotonic() > deadline:
                    raise TimeoutError("producer timed out")
        sent += len(batch)
    return {"rings": cbell.writes, "waits": waits}


def consumer(
    ring,
    total: int,
    cbell: Bell,
    pbell: Bell,
    deadline: float,
    child: int,
    single: bool = False,
) -> dict:
    got = 0
    sleeps = 0
    pop_many = ring.pop_many
    pop = ring.pop
    take = ring.take_producer_wakeup
    nbytes = 0
    while got < total:
        if single:
            rec = pop()
            recs = [] if rec is None else [rec]
        else:
            recs = pop_many(4 * BATCH)
        if recs:
            if take():
                pbell.ring()
            expected = make_batch(got, len(recs))
            if recs != expected:
                for k, (a, b) in enumerate(zip(recs, expected)):
                    assert a == b, f"record {got + k} differs"
                raise AssertionError(f"more records than sent at {got}")
            got += len(recs)
            for r in recs:
                nbytes += len(r)
            continue
        if ring.prepare_sleep():
            sleeps += 1
            if not cbell.wait(500):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"consumer timed out after {got} records")
                pid, status = os.waitpid(child, os.WNOHANG)
                if pid:
                    raise AssertionError(f"producer exited early (status {status})")
    assert ring.pop() is None
    return {"rings": pbell.writes, "sleeps": sleeps, "bytes": nbytes}


def run_pair(cls, total: int, timeout: float, single: bool = False) -> None:
    buf = shm_buffer(ring_size(CAPACITY))
    cls.format(buf, CAPACITY).release()
    cbell, pbell = Bell(), Bell()
    rfd, wfd = os.pipe()
    deadline = time.monotonic() + timeout
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(rfd)
            stats = producer(cls(buf), total, cbell, pbell, deadline, single)
            os.write(wfd, json.dumps(stats).encode())
            code = 0
        except BaseException:  # noqa: BLE001 - forked child: report, then _exit
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(wfd)
    try:
        ring = cls(buf)
        cstats = consumer(ring, total, cbell, pbell, deadline, pid, single)
        elapsed = time.perf_counter() - t0
        ring.release()
        raw = b""
        while chunk := os.read(rfd, 4096):
            raw += chunk
        _, status = wait_for(lambda: (w := os.waitpid(pid, os.WNOHANG))[0] and w,
                             max(0.0, deadline - time.monotonic()), interval=0.01, what="the producer to exit")
        pid = 0
        assert status == 0, f"producer failed, wait status {status}"
        pstats = json.loads(raw)
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(rfd)
        os.close(cbell.fd)
        os.close(pbell.fd)
        buf.close()
    laps = cstats["bytes"] / CAPACITY
    rings = pstats["rings"] + cstats["rings"]
    print(
        f"\n{cls.__module__}.{cls.__name__}{' (push/pop)' if single else ''}: {total} records, {cstats['bytes']} payload bytes, "
        f"ring lapped >= {laps:.0f} times, {elapsed:.2f}s ({total / elapsed:,.0f} rec/s); "
        f"doorbells: producer->consumer {pstats['rings']}, consumer->producer "
        f"{cstats['rings']}, {rings / total:.5f} rings/record; "
        f"consumer sleeps {cstats['sleeps']}, producer waits {pstats['waits']}"
    )
    assert laps > 1000 or total < 1_000_000
    assert rings <= total


def test_make_batch_is_deterministic():
    a = make_batch(12345, 300)
    assert a == make_batch(12345, 300)
    assert a[:10] == make_batch(12345, 10)
    assert make_batch(12345, 300) != make_batch(12346, 300)
    assert max(len(x) for x in make_batch(0, 10000)) == 200


def test_consumer_detects_bad_data():
    # the verification itself must catch a swapped pair and a corrupt byte
    for mutate in (
        lambda recs: recs.__setitem__(slice(3, 5), recs[4:2:-1]),
        lambda recs: recs.__setitem__(7, recs[7][:-1] + b"?"),
        lambda recs: recs.pop(5),
    ):
        recs = make_batch(0, 20)
        mutate(recs)
        ring = PyRing.format(bytearray(ring_size(CAPACITY)), CAPACITY)
        assert ring.push_many(recs) == (len(recs), False)
        bell = Bell()
        try:
            with pytest.raises(AssertionError):
                consumer(ring, 20, bell, bell, time.monotonic() + 5, os.getpid())
        finally:
            os.close(bell.fd)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_native_ten_million_records():
    assert NativeRing is not None, "nsqmp._native must build"
    run_pair(NativeRing, 10_000_000, timeout=150)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_python_twin_records():
    run_pair(PyRing, 200_000, timeout=100)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["native", "python"])
def test_single_record_push_pop(name):
    cls = {"native": NativeRing, "python": PyRing}[name]
    assert cls is not None, "nsqmp._native must build"
    run_pair(cls, 1_000_000 if name == "native" else 100_000, timeout=100, single=True)
