"""Test helpers: the real broker as a subprocess (nsqmp.launcher) and polling."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import os
import re
import socket
import struct
import time
import tracemalloc
from collections.abc import Callable

import pytest

from nsqmp.client import Connection, wire
from nsqmp.ipc import pyring, shm
from nsqmp.launcher import Broker

__all__ = ["Broker", "assert_fatal", "await_for", "built_module", "memory_kept_by", "native_module", "nothing_within",
           "queued_kinds", "wait_for"]


def built_module(module: str, name: str):
    """The C extension `module` for a test of its `name`: the test fails (never skips) if
    the extension did not build or lacks it."""
    try:
        ext = importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{module} did not build: {exc!r}")
    if not hasattr(ext, name):
        pytest.fail(f"{module}.{name} is missing")
    return ext


def native_module(name: str):
    """nsqmp._native for a test of its `name` (built_module)."""
    return built_module("nsqmp._native", name)


def memory_kept_by(once: Callable[[], object], times: int = 100_000, warmup: int = 1000) -> int:
    """Bytes of traced memory still held after `times` calls of once(), the first `warmup`
    calls and a collection done before counting: a C function that leaks an object per
    call keeps megabytes, one that does not keeps a few kilobytes of the allocator's."""
    for _ in range(warmup):
        once()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(times):
            once()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05,
             what: str | Callable[[], str] = "condition"):
    """Poll `predicate` until it returns something true (returned) or `timeout` passes
    (TimeoutError naming `what`, or what `what()` says then): how a test waits for the
    broker instead of sleeping."""
    deadline = time.monotonic() + timeout
    while (value := _poll(predicate, deadline, what)) is None:
        time.sleep(interval)
    return value


def _poll(predicate, deadline: float, what: str | Callable[[], str]):
    """One poll of wait_for/await_for: the predicate's true value, None to poll again,
    or TimeoutError once the deadline has passed."""
    value = predicate()
    if value:
        return value
    if time.monotonic() > deadline:
        raise TimeoutError(f"timed out waiting for {what() if callable(what) else what}")
    return None


async def await_for(predicate, timeout: float = 10.0, interval: float = 0.05,
                    what: str | Callable[[], str] = "condition"):
    """wait_for inside an event loop: the loop (and the clients on it) runs between the
    polls of `predicate`, a plain function."""
    deadline = time.monotonic() + timeout
    while (value := _poll(predicate, deadline, what)) is None:
        await asyncio.sleep(interval)
    return value


def channel_stats(broker, topic: str, channel: str) -> dict:
    """The channel's entry in the broker's /stats; AssertionError if it is not there."""
    for t in broker.stats(topic=topic)["topics"]:
        for ch in t["channels"]:
            if ch["channel_name"] == channel:
                return ch
    raise AssertionError(f"{topic}/{channel} not in /stats")


def nothing_within(c: Connection, seconds: float) -> None:
    """Read `c` for `seconds` (answering heartbeats): no frame may arrive in that time.
    The bounded read for "nothing comes back", where the time itself is what is tested."""
    saved = c.sock.gettimeout()
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            c.sock.settimeout(left)
            try:
                frame = c.read_frame()
            except (socket.timeout, TimeoutError):
                return
            pytest.fail(f"nothing should arrive within {seconds}s, got {frame}")
    finally:
        c.sock.settimeout(saved)


_SHM_DIR = "/dev/shm"
_INBOUND = re.compile(r"a\d+r\d+")  # an acceptor -> router ring (nsqmp.ipc.mesh.Plan.ring_names)


def queued_kinds(broker: Broker) -> list[int]:
    """The kinds (nsqmp.ipc.records) of the records waiting in the broker's acceptor ->
    router rings, read without consuming them. A test that stops the routers (SIGSTOP)
    waits on this until what it sent is in the rings, instead of sleeping."""
    prefix = f"{shm.PREFIX}{broker.proc.pid}."
    kinds: list[int] = []
    for entry in sorted(os.listdir(_SHM_DIR)):
        if not (entry.startswith(prefix) and _INBOUND.fullmatch(entry[len(prefix):])):
            continue
        buf = shm.attach("/" + entry)
        try:
            kinds += _ring_kinds(buf)
        finally:
            buf.close()
    return kinds


def _ring_kinds(buf) -> list[int]:
    """The first byte of each record between one ring's tail and head, oldest first
    (the layout drawn in nsqmp.ipc.pyring; the ring is only read)."""
    capacity = struct.unpack_from("<Q", buf, pyring.OFF_CAPACITY)[0]
    tail = struct.unpack_from("<Q", buf, pyring.OFF_TAIL)[0]  # tail first: head only grows
    head = struct.unpack_from("<Q", buf, pyring.OFF_HEAD)[0]
    kinds = []
    while tail < head:
        pos = tail % capacity
        room = capacity - pos
        length = pyring.WRAP_MARKER if room < pyring.RECORD_HEADER else \
            struct.unpack_from("<I", buf, pyring.HEADER_SIZE + pos)[0]
        if length == pyring.WRAP_MARKER:
            tail += room
            continue
        kinds.append(buf[pyring.HEADER_SIZE + pos + pyring.RECORD_HEADER])
        tail += (pyring.RECORD_HEADER + length + 7) & ~7
    return kinds


def pynsq_round_trip(address: str, topic: str, bodies: list[bytes], reader_opts: dict | None = None,
                     writer_opts: dict | None = None, timeout: float = 30.0) -> list[bytes]:
    """MPUB `bodies` with a pynsq Writer and read them back with a pynsq Reader (each
    with its own connection options: tls_v1, snappy, deflate, ...); returns what arrived."""
    import nsq

    async def scenario() -> list[bytes]:
        got: list[bytes] = []
        done = asyncio.Event()

        def handler(message) -> bool:
            got.append(message.body)
            if len(got) >= len(bodies):
                done.set()
            return True

        reader = nsq.Reader(topic, "ch", handler, nsqd_tcp_addresses=[address], max_in_flight=50,
                            **(reader_opts or {}))
        writer = nsq.Writer([address], **(writer_opts or {}))
        await await_for(lambda: writer.conns, what="the pynsq Writer's connection")
        acks: list = []
        for i in range(0, len(bodies), 20):
            writer.mpub(topic, bodies[i:i + 20], callback=lambda conn, data: acks.append(data))
        await asyncio.wait_for(done.wait(), timeout)
        assert all(a == b"OK" for a in acks), acks
        reader.connect_to_nsqd = lambda *a, **k: None  # no reconnect after close
        reader.close()
        for conn in list(writer.conns.values()):
            conn.close()
        await await_for(lambda: not reader.conns and not writer.conns, what="pynsq to see its connections closed")
        return got

    return asyncio.run(scenario())


def assert_fatal(c: Connection, data: bytes, text: str) -> None:
    """Send data: exactly one error frame with this text, then the server closes."""
    c.send(data)
    frame = c.read_frame()
    assert (frame.type, frame.data.decode()) == (wire.FRAME_ERROR, text)
    with pytest.raises((EOFError, ConnectionResetError)):
        extra = c.read_frame()
        pytest.fail(f"the connection stayed open and sent {extra}")
    c.close()


@contextlib.contextmanager
def endpoint_pair():
    """(acceptor, router, plan): the mesh endpoints of acceptor 0 and router 0 over real
    shared-memory rings and eventfd doorbells, in this process; closed and unlinked after.
    The rings are named after this (live) process, as a supervisor names its run's: no
    broker's stale-segment sweep takes them, and no broker uses the same pid."""
    from nsqmp.ipc import mesh, shm
    from nsqmp.ipc.doorbell import Doorbell

    plan = mesh.Plan(os.getpid(), 1, 1, 1 << 16)
    names = mesh.create_all(plan)
    doorbells = [Doorbell() for _ in range(plan.slots)]
    acceptor = mesh.Endpoint(plan, plan.acceptor_slot(0), doorbells)
    router = mesh.Endpoint(plan, plan.router_slot(0), doorbells)
    try:
        yield acceptor, router, plan
    finally:
        for e in (acceptor, router):
            e.close()
        for d in doorbells:
            d.close()
        for name in names:
            shm.unlink(name)
