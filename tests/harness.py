"""Test helpers: the real broker as a subprocess (nsqmp.launcher) and polling."""
from __future__ import annotations

import time

import pytest

from nsqmp.client import Connection, wire
from nsqmp.launcher import Broker

__all__ = ["Broker", "assert_fatal", "native_module", "wait_for"]


def native_module(name: str):
    """nsqmp._native for a test of its `name`: the test fails (never skips) if the
    extension did not build or lacks it."""
    try:
        from nsqmp import _native
    except ImportError as exc:
        pytest.fail(f"nsqmp._native did not build: {exc!r}")
    if not hasattr(_native, name):
        pytest.fail(f"nsqmp._native.{name} is missing")
    return _native


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(interval)


def pynsq_round_trip(address: str, topic: str, bodies: list[bytes], reader_opts: dict | None = None,
                     writer_opts: dict | None = None, timeout: float = 30.0) -> list[bytes]:
    """MPUB `bodies` with a pynsq Writer and read them back with a pynsq Reader (each
    with its own connection options: tls_v1, snappy, deflate, ...); returns what arrived."""
    import asyncio

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
        while not writer.conns:
            await asyncio.sleep(0.02)
        acks: list = []
        for i in range(0, len(bodies), 20):
            writer.mpub(topic, bodies[i:i + 20], callback=lambda conn, data: acks.append(data))
        await asyncio.wait_for(done.wait(), timeout)
        assert all(a == b"OK" for a in acks), acks
        reader.connect_to_nsqd = lambda *a, **k: None  # no reconnect after close
        reader.close()
        for conn in writer.conns.values():
            conn.close()
        await asyncio.sleep(0.1)
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
