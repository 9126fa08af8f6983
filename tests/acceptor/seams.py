"""The seams a V2Connection is driven through in unit tests: an in-memory transport, a loop
whose timers run by hand, and an acceptor side (nsqmp.acceptor.host.AcceptorSide) that
records the ring records and publishes it is asked for. Real parser, real options, real
AUTH client; no sockets, no processes."""
from __future__ import annotations

import struct
import time
from collections.abc import Callable, Coroutine
from typing import Any

import orjson

from nsqmp.acceptor.auth import AuthClient, parse_state
from nsqmp.acceptor.tcp import V2Connection
from nsqmp.client import wire
from nsqmp.config.loader import load
from nsqmp.diskqueue.encoder import SPAN
from nsqmp.protocol.frames import FRAME_ERROR, FRAME_HEADER, FRAME_RESPONSE
from nsqmp.protocol.parser import Parser

CONN_ID = 7


class MemoryTransport:
    """What asyncio's transport does for a connection, kept in memory: the bytes written,
    whether reading is paused, whether it was closed."""

    def __init__(self, peer: tuple[str, int] = ("127.0.0.1", 40000)) -> None:
        self.out = bytearray()
        self.reading = True
        self.closed = False
        self.extra: dict[str, Any] = {"peername": peer}

    def write(self, data: bytes | memoryview) -> None:
        assert not self.closed, "written after close"
        self.out += data

    def pause_reading(self) -> None:
        assert self.reading, "paused twice"
        self.reading = False

    def resume_reading(self) -> None:
        assert not self.reading, "resumed while reading"
        self.reading = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.extra.get(name, default)

    def take(self) -> bytes:
        """Everything written since the last take."""
        data = bytes(self.out)
        self.out.clear()
        return data


def frames(data: bytes) -> list[tuple[int, bytes]]:
    """(frame type, data) of each whole frame in `data`."""
    out, pos = [], 0
    while pos < len(data):
        size, kind = FRAME_HEADER.unpack_from(data, pos)
        out.append((kind, data[pos + 8:pos + 4 + size]))
        pos += 4 + size
    assert pos == len(data), "a partial frame"
    return out


class Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class HandLoop:
    """The part of a loop a connection uses: timers and tasks are kept and run by the
    test (`run`, `run_tasks`)."""

    def __init__(self) -> None:
        self.timers: list[Timer] = []
        self.tasks: list[Coroutine] = []

    def create_task(self, coro: Coroutine) -> None:
        self.tasks.append(coro)

    def run_tasks(self) -> None:
        """Run the tasks queued so far; each must finish without waiting on anything."""
        tasks, self.tasks = self.tasks, []
        for coro in tasks:
            try:
                coro.send(None)
            except StopIteration:
                continue
            raise AssertionError(f"{coro} waited for something")

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(time.monotonic() + delay, callback)
        self.timers.append(timer)
        return timer

    def time(self) -> float:
        return time.monotonic()

    def armed(self) -> list[Timer]:
        return [t for t in self.timers if not t.cancelled]

    def run(self, timer: Timer) -> None:
        """Run a timer now, as the loop would when its time comes."""
        assert not timer.cancelled
        self.timers.remove(timer)
        timer.callback()


class RecordingAcceptor:
    """AcceptorSide for tests: the ring records sent (slot, record) and the publishes
    (topic, bodies, defer) are kept in order."""

    def __init__(self, *flags: str) -> None:
        self.opts = load(["--max-msg-size", "1024", "--max-body-size", "8192",
                          "--max-rdy-count", "2500", *flags], environ={})
        self.loop = HandLoop()
        self.index = 0
        self.parser = Parser(self.opts.max_msg_size, self.opts.max_body_size)
        self.auth = AuthClient(self.opts)
        self.tls_context = None
        self.tls_required: bool | str = False
        self.records: list[tuple[int, bytes | bytearray]] = []
        self.publishes: list[tuple[bytes, list[bytes], int | list[int]]] = []
        self.connections: dict[int, V2Connection] = {}
        self.held: list[V2Connection] = []
        self.failure: OSError | None = None  # raised by the next publish
        self.send_record = self._send
        self.send_record_now = self._send
        self.extend_record = self._extend
        self.publish_spans = self._publish
        self.run_tail = lambda topic: None  # no run: each command goes by its handler
        self.busy_touch = lambda: None

    def _send(self, slot: int, rec: bytes | bytearray) -> None:
        self.records.append((slot, rec))

    def _extend(self, slot: int, rec: bytearray, extra: bytes, limit: int) -> bool:
        """Endpoint.extend_last's rule: only the last record queued, within the limit."""
        if not self.records or self.records[-1][1] is not rec or len(rec) + len(extra) > limit:
            return False
        rec += extra
        return True

    def _publish(self, topic: bytes, buf: bytearray, spans: bytes | bytearray, defer: int | list[int]) -> None:
        if self.failure is not None:
            raise self.failure
        bodies = [bytes(buf[off:off + size]) for off, size in SPAN.iter_unpack(spans)]
        self.publishes.append((topic, bodies, defer if isinstance(defer, int) else list(defer)))

    def new_conn_id(self) -> int:
        return CONN_ID

    def router_slot(self, topic: bytes) -> int:
        return 1 + len(topic) % 2

    def attach(self, conn: V2Connection) -> None:
        self.connections[conn.conn] = conn

    def detach(self, conn: V2Connection) -> None:
        self.connections.pop(conn.conn, None)

    def published(self, conn: V2Connection) -> None:
        pass

    def publish_failed(self, exc: OSError) -> None:
        pass

    def producer_left(self) -> None:
        pass

    def deliver_waiting(self) -> None:
        pass

    def take_records(self) -> list[tuple[int, bytes]]:
        out = [(slot, bytes(rec)) for slot, rec in self.records]
        self.records.clear()
        return out


class AnsweringAuth:
    """Auth servers (host.AuthService) that answer every query with one JSON body, read by
    the real parser of their answers; the queries asked are kept."""
    enabled = True

    def __init__(self, answer: dict) -> None:
        self.answer = answer
        self.queries: list[tuple[str, bool, str, bytes]] = []

    async def query(self, remote_ip: str, tls: bool, common_name: str, secret: bytes, now: float) -> Any:
        self.queries.append((remote_ip, tls, common_name, secret))
        return parse_state(orjson.dumps(self.answer), now)


def connect(*flags: str, auth: Any = None) -> tuple[V2Connection, MemoryTransport, RecordingAcceptor]:
    """A connection made on a fresh transport, the magic sent."""
    host = RecordingAcceptor(*flags)
    if auth is not None:
        host.auth = auth
    conn = V2Connection(host)
    transport = MemoryTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(wire.MAGIC)
    return conn, transport, host


def responses(transport: MemoryTransport) -> list[bytes]:
    """The frames written since the last look, as b"OK", b"E_... text" (errors) etc."""
    out = []
    for kind, data in frames(transport.take()):
        assert kind in (FRAME_RESPONSE, FRAME_ERROR), kind
        out.append(data)
    return out


I32 = struct.Struct(">i")
