"""Two-process benchmark of the shared-memory ring.

A forked child produces ``--records`` records of ``--size`` bytes in batches
of ``--batch`` (push_many; push() when batch == 1) into a ring living in a
POSIX shared memory segment; the parent consumes them (pop_many with
max_records=batch; pop() when batch == 1).  Neither side spins: an empty
consumer sleeps on an eventfd doorbell after prepare_sleep(), a producer
facing a full ring sleeps on another after prepare_wait().

Prints one line of JSON: throughput, and the doorbell syscalls each side
issued itself (eventfd writes, poll() calls, eventfd reads), per record and
per second.

    python -m nsqmp.bench.ring --records 2000000 --size 200 --batch 64
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import secrets
import select
import signal
import sys
import time
from typing import Any

import posix_ipc

from nsqmp.bench.commands import ShowDefaults
from nsqmp.ipc.pyring import PyRing, ring_size
from nsqmp.ipc.ring import NativeRing

POLL_MS = 1000


class Doorbell:
    """An eventfd plus counters of the syscalls issued on it."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.poller = select.poll()
        self.poller.register(self.fd, select.POLLIN)
        self.writes = 0
        self.reads = 0
        self.polls = 0

    def ring(self) -> None:
        self.writes += 1
        os.eventfd_write(self.fd, 1)

    def wait(self, timeout_ms: int = POLL_MS) -> bool:
        """Sleep until rung (True) or timeout (False); consumes the count."""
        self.polls += 1
        if not self.poller.poll(timeout_ms):
            return False
        self.reads += 1
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        os.close(self.fd)


def shm_buffer(size: int) -> mmap.mmap:
    """A shared mapping of a fresh POSIX shm segment (already unlinked)."""
    name = f"/nsqmp-ringbench-{os.getpid()}-{secrets.token_hex(4)}"
    shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
    try:
        return mmap.mmap(shm.fd, size)
    finally:
        shm.close_fd()
        shm.unlink()


def _produce(
    ring: Any,
    records: int,
    size: int,
    batch: int,
    cbell: Doorbell,
    pbell: Doorbell,
    deadline: float,
) -> dict[str, int]:
    recs = [bytes([i % 256]) * size for i in range(batch)]
    waits = 0
    sent = 0
    if batch == 1:
        rec = recs[0]
        push = ring.push
        while sent < records:
            res = push(rec)
            if res:
                sent += 1
                if res == 2:
                    cbell.ring()
            elif ring.prepare_wait(size):
                waits += 1
                if not pbell.wait() and time.monotonic() > deadline:
                    raise TimeoutError("producer timed out")
    else:
        push_many = ring.push_many
        while sent < records:
            todo = recs if records - sent >= batch else recs[: records - sent]
            j = 0
            while j < len(todo):
                n, wake = push_many(todo, j)
                if wake:
                    cbell.ring()
                j += n
                if j < len(todo) and ring.prepare_wait(size):
                    waits += 1
                    if not pbell.wait() and time.monotonic() > deadline:
                        raise TimeoutError("producer timed out")
            sent += len(todo)
    return {
        "doorbell_writes": cbell.writes,
        "polls": pbell.polls,
        "eventfd_reads": pbell.reads,
        "waits": waits,
    }


def _consume(
    ring: Any,
    records: int,
    size: int,
    batch: int,
    cbell: Doorbell,
    pbell: Doorbell,
    deadline: float,
    child: int,
) -> dict[str, int]:
    got = 0
    sleeps = 0
    nbytes = 0
    pop_many = ring.pop_many
    pop = ring.pop
    take = ring.take_producer_wakeup
    while got < records:
        if batch == 1:
            rec = pop()
            if rec is not None:
                if take():
                    pbell.ring()
                got += 1
                nbytes += len(rec)
                continue
        else:
            recs = pop_many(batch)
            if recs:
                if take():
                    pbell.ring()
                got += len(recs)
                for r in recs:
                    nbytes += len(r)
                continue
        if ring.prepare_sleep():
            sleeps += 1
            if not cbell.wait():
                if time.monotonic() > deadline:
                    raise TimeoutError("consumer timed out")
                pid, _ = os.waitpid(child, os.WNOHANG)
                if pid:
                    raise RuntimeError("producer exited early")
    if nbytes != records * size:
        raise RuntimeError("byte count mismatch")
    return {
        "doorbell_writes": pbell.writes,
        "polls": cbell.polls,
        "eventfd_reads": cbell.reads,
        "sleeps": sleeps,
    }


def run(
    records: int,
    size: int,
    batch: int,
    impl: str,
    capacity: int = 1 << 20,
    timeout: float = 300.0,
) -> dict[str, Any]:
    cls: Any
    if impl == "native":
        if NativeRing is None:
            raise RuntimeError("native extension nsqmp._native is not available")
        cls = NativeRing
    else:
        cls = PyRing
    buf = shm_buffer(ring_size(capacity))
    cls.format(buf, capacity).release()
    cbell, pbell = Doorbell(), Doorbell()  # consumer's, producer's
    rfd, wfd = os.pipe()
    deadline = time.monotonic() + timeout
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # child: producer
        code = 1
        try:
            os.close(rfd)
            ring = cls(buf)
            stats = _produce(ring, records, size, batch, cbell, pbell, deadline)
            os.write(wfd, json.dumps(stats).encode())
            code = 0
        except BaseException:  # noqa: BLE001 - forked child: report, then _exit
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(wfd)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    try:
        ring = cls(buf)
        cstats = _consume(ring, records, size, batch, cbell, pbell, deadline, pid)
        elapsed = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        raw = b""
        while chunk := os.read(rfd, 65536):
            raw += chunk
        _, status, cru = os.wait4(pid, 0)
        pid = 0
        if status != 0 or not raw:
            raise RuntimeError(f"producer failed (wait status {status})")
        pstats = json.loads(raw)
        ring.release()
    finally:
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except ProcessLookupError:
                pass
        os.close(rfd)
        cbell.close()
        pbell.close()
        buf.close()

    def per(stats: dict[str, int]) -> dict[str, Any]:
        out: dict[str, Any] = dict(stats)
        for key in ("doorbell_writes", "polls", "eventfd_reads"):
            out[key + "_per_record"] = stats[key] / records
            out[key + "_per_s"] = round(stats[key] / elapsed, 1)
        return out

    return {
        "impl": impl,
        "records": records,
        "size": size,
        "batch": batch,
        "capacity": capacity,
        "seconds": round(elapsed, 4),
        "records_per_s": round(records / elapsed),
        "mb_per_s": round(records * size / elapsed / 1e6, 2),
        "producer": per(pstats) | {"cpu_s": round(cru.ru_utime + cru.ru_stime, 3)},
        "consumer": per(cstats)
        | {
            "cpu_s": round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 3)
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nsqmp bench ring", formatter_class=ShowDefaults,
                                 description="Two-process benchmark of the shared-memory ring.")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=200, help="payload bytes per record")
    ap.add_argument(
        "--batch", type=int, default=64, help="records per push_many/pop_many"
    )
    ap.add_argument("--impl", choices=["native", "python"], default="native")
    ap.add_argument("--capacity", type=int, default=1 << 20, help="ring data bytes")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args(argv)
    if args.records < 1 or args.batch < 1 or args.size < 0:
        ap.error("--records and --batch must be >= 1, --size >= 0")
    if args.size > args.capacity // 4:
        ap.error("--size exceeds the ring's max_record (capacity / 4)")
    try:
        ring_size(args.capacity)
    except ValueError as exc:
        ap.error(str(exc))
    result = run(
        args.records, args.size, args.batch, args.impl, args.capacity, args.timeout
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
