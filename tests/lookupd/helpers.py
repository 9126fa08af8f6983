"""Talk protocol V1 to nsqlookupd the way a broker does, so tests read like transcripts."""
from __future__ import annotations

import socket
import struct

import orjson

MAGIC = b"  V1"


def peer(port: int = 4150, http_port: int = 4151, address: str = "127.0.0.1", **extra) -> dict:
    """An IDENTIFY body for a fake broker."""
    return {"broadcast_address": address, "tcp_port": port, "http_port": http_port, "version": "1.3.0",
            "hostname": "fake-broker", **extra}


class V1:
    """A blocking protocol V1 connection."""

    def __init__(self, port: int, magic: bytes | None = MAGIC, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if magic is not None:
            self.sock.sendall(magic)

    def __enter__(self) -> V1:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError(f"connection closed after {len(data)} of {n} bytes")
            data += chunk
        return data

    def read(self) -> bytes:
        """One response: [4-byte size][data] (no frame type in V1)."""
        (size,) = struct.unpack(">i", self._exactly(4))
        return self._exactly(size)

    def cmd(self, line: str | bytes) -> bytes:
        raw = line.encode() if isinstance(line, str) else line
        self.send(raw + b"\n")
        return self.read()

    def identify_raw(self, body: bytes) -> bytes:
        self.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        return self.read()

    def identify(self, **fields) -> dict:
        reply = self.identify_raw(orjson.dumps(peer(**fields)))
        return orjson.loads(reply)

    def closed(self) -> bool:
        """True once the daemon has closed the connection (EOF)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def broker(port: int, tcp_port: int = 4150, http_port: int = 4151, address: str = "127.0.0.1",
           registrations: tuple[str, ...] = ()) -> V1:
    """A fake broker: connected, IDENTIFYed, with ``"topic"`` or ``"topic channel"`` registered."""
    conn = V1(port)
    conn.identify(port=tcp_port, http_port=http_port, address=address)
    for r in registrations:
        assert conn.cmd(f"REGISTER {r}") == b"OK"
    return conn
