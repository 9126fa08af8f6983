"""A small blocking NSQ connection: reads like a transcript in tests and tools."""
from __future__ import annotations

import socket
from collections import deque
from dataclasses import dataclass

import orjson

from nsqmp.client import wire


class NSQError(Exception):
    """An error frame from the server."""


@dataclass
class Frame:
    type: int
    data: bytes

    @property
    def message(self) -> wire.Message:
        return wire.decode_message(self.data)


class Connection:
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = wire.FrameReader()
        self.pending: deque[tuple[int, bytes]] = deque()
        self.sock.sendall(wire.MAGIC)

    @classmethod
    def connect(cls, address: str, timeout: float = 10.0) -> "Connection":
        host, _, port = address.rpartition(":")
        return cls(host, int(port), timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self, skip_heartbeats: bool = True) -> Frame:
        """The next frame; answers heartbeats with NOP. Raises EOFError when the server closes."""
        while True:
            while not self.pending:
                data = self.sock.recv(1 << 16)
                if not data:
                    raise EOFError("connection closed by the server")
                self.pending.extend(self.reader.feed(data))
            ftype, data = self.pending.popleft()
            if skip_heartbeats and ftype == wire.FRAME_RESPONSE and data == b"_heartbeat_":
                self.send(wire.NOP)
                continue
            return Frame(ftype, data)

    def expect_ok(self) -> None:
        frame = self.read_frame()
        if frame.type == wire.FRAME_ERROR:
            raise NSQError(frame.data.decode())
        if frame.data != b"OK":
            raise NSQError(f"expected OK, got {frame.data!r}")

    def identify(self, **fields) -> dict | None:
        fields.setdefault("feature_negotiation", True)
        self.send(wire.identify(fields))
        frame = self.read_frame()
        if frame.type == wire.FRAME_ERROR:
            raise NSQError(frame.data.decode())
        return orjson.loads(frame.data) if frame.data != b"OK" else None

    def auth(self, secret: str | bytes) -> dict:
        """AUTH; the server's {"identity", "identity_url", "permission_count"}."""
        self.send(wire.auth(secret))
        frame = self.read_frame()
        if frame.type == wire.FRAME_ERROR:
            raise NSQError(frame.data.decode())
        return orjson.loads(frame.data)

    def pub(self, topic: str, body: bytes) -> None:
        self.send(wire.pub(topic, body))
        self.expect_ok()

    def mpub(self, topic: str, bodies: list[bytes]) -> None:
        self.send(wire.mpub(topic, bodies))
        self.expect_ok()

    def sub(self, topic: str, channel: str, rdy: int = 0) -> None:
        self.send(wire.sub(topic, channel))
        self.expect_ok()
        if rdy:
            self.send(wire.rdy(rdy))

    def read_message(self) -> wire.Message:
        frame = self.read_frame()
        if frame.type == wire.FRAME_ERROR:
            raise NSQError(frame.data.decode())
        if frame.type != wire.FRAME_MESSAGE:
            raise NSQError(f"expected a message, got {frame.data!r}")
        return frame.message

    def fin(self, msg_id: bytes) -> None:
        self.send(wire.fin(msg_id))
