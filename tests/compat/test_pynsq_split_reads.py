"""pynsq 0.9.1's snappy/deflate reads that end inside a compressed frame (nsqio/pynsq#258).

On tornado 6 a pynsq read that decompresses to nothing closes the connection
(IntegrityError('failed to unpack size'), reconnect 15 s later): tests/pynsq_shim.py says why.
nsqd 1.3.0 writes a small snappy frame's chunk header and data in two writes and deflate's
flush marker apart from the data, so pynsq readers of nsqd fail this way at random right after
the upgrade. nsqmp writes each compressed frame in one write: its small frames never end a
read early.

- `SplitServer` speaks just enough V2 to play nsqd's split writes deterministically (it waits
  until pynsq has read the first part before it writes the rest, which nsqd only does by
  chance): pynsq as released drops the connection, pynsq with the shim gets its message.
- The same pynsq, unpatched, against nsqmp: sixteen snappy and deflate readers, connected one
  at a time, upgrade, subscribe and get their messages without one error. With a broker that
  writes its frames in two pieces as nsqd does, this failed 5 runs in 5.
"""
from __future__ import annotations

import asyncio
import fcntl
import logging
import socket
import struct
import termios
import threading
import time
import zlib
from collections.abc import Callable

import orjson
import pytest
import snappy

from nsqmp.client import Connection
from nsqmp.protocol.frames import OK_FRAME, message_frame, response
from tests.harness import await_for
from tests.pynsq_shim import compressed_reads

MSG_ID = b"0123456789abcdef"


def split_frame(codec: str, encoded: bytes, first: bool) -> tuple[bytes, bytes]:
    """A compressed frame cut where nsqd's writers cut it: snappy after the chunk header
    (golang/snappy's Writer writes an uncompressed chunk's data apart), deflate before the
    sync flush's 00 00 ff ff (compress/flate writes it on Flush)."""
    if codec == "snappy":
        cut = (10 if first else 0) + 8  # [stream identifier] + chunk type, length, CRC
    else:
        assert encoded.endswith(b"\x00\x00\xff\xff")
        cut = len(encoded) - 4
    return encoded[:cut], encoded[cut:]


class SplitServer(threading.Thread):
    """One V2 connection: IDENTIFY answered in the clear, then the upgrade's OK, the SUB's OK
    and one message, each compressed and written in two parts; the second part waits until
    `drained()` says the client has read the first. Records what the client sent; after the
    FIN it reads on until the client closes."""

    def __init__(self, codec: str, drained: Callable[[], bool]) -> None:
        super().__init__(daemon=True)
        self.codec, self.drained = codec, drained
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.commands: list[bytes] = []

    def run(self) -> None:
        self.listener.settimeout(10)
        sock, _ = self.listener.accept()
        self.listener.close()
        sock.settimeout(10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._serve(sock)
        except (OSError, EOFError):
            pass
        finally:
            sock.close()

    def _serve(self, sock: socket.socket) -> None:
        plain = _Reader(sock, lambda b: b)
        assert plain.exactly(4) == b"  V2" and plain.line() == b"IDENTIFY"
        settings = orjson.loads(plain.exactly(struct.unpack(">l", plain.exactly(4))[0]))
        snappy_on, deflate_on = self.codec == "snappy", self.codec == "deflate"
        assert settings[self.codec] is True
        sock.sendall(response(orjson.dumps({
            "max_rdy_count": 2500, "version": "1.3.0", "max_msg_timeout": 900000, "msg_timeout": 60000,
            "tls_v1": False, "deflate": deflate_on, "deflate_level": 6, "max_deflate_level": 6,
            "snappy": snappy_on, "sample_rate": 0, "auth_required": False,
            "output_buffer_size": 16384, "output_buffer_timeout": 250})))
        if snappy_on:
            out, inp = snappy.StreamCompressor(), snappy.StreamDecompressor()
            encode, decode = out.add_chunk, inp.decompress
        else:
            deflater, inflater = zlib.compressobj(6, zlib.DEFLATED, -15), zlib.decompressobj(-15)
            encode = lambda d: deflater.compress(d) + deflater.flush(zlib.Z_SYNC_FLUSH)  # noqa: E731
            decode = inflater.decompress
        reader = _Reader(sock, decode, plain.buf)
        writes = 0

        def send(frame: bytes) -> None:
            nonlocal writes
            head, tail = split_frame(self.codec, encode(frame), writes == 0)
            writes += 1
            sock.sendall(head)
            deadline = time.monotonic() + 5
            while not self.drained() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.05)  # pynsq decompresses what it read
            sock.sendall(tail)

        send(OK_FRAME)  # the upgrade's OK, the first compressed frame
        while True:
            line = reader.line()
            self.commands.append(line)
            if line.startswith(b"SUB "):
                send(OK_FRAME)
            elif line.startswith(b"RDY ") and line != b"RDY 0":
                send(message_frame(time.time_ns(), 1, MSG_ID, b"across the split"))
            elif line.startswith(b"FIN "):
                break
        while True:  # until the client closes: an error pynsq logs before that is its own
            reader.more()


class _Reader:
    """Blocking reads of a socket through a decompressor: whole lines and exact sizes."""

    def __init__(self, sock: socket.socket, decode: Callable[[bytes], bytes], rest: bytes = b"") -> None:
        self.sock, self.decode = sock, decode
        self.buf = decode(rest) if rest else b""

    def more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += self.decode(data)

    def line(self) -> bytes:
        while b"\n" not in self.buf:
            self.more()
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.more()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data


def unread_bytes(reader) -> int | None:
    """Bytes waiting in the kernel for the reader's one connection (FIONREAD), or None
    before it has one."""
    conn = next(iter(list(reader.conns.values())), None)
    stream = getattr(conn, "stream", None)
    if stream is None or stream.socket is None:
        return None
    try:
        raw = fcntl.ioctl(stream.socket.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return None
    return struct.unpack("i", raw)[0]


class PynsqErrors(logging.Handler):
    """pynsq's ERROR lines (the IntegrityError of a dropped connection)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def split_reads(codec: str, fixed: bool) -> tuple[list[bytes], list[str], list[bytes]]:
    """A pynsq Reader (released or with the shim) against SplitServer: (bodies it got,
    pynsq's error lines until then, commands the server read)."""
    import nsq

    errors = PynsqErrors()
    before_close: list[str] = []
    logging.getLogger("nsq").addHandler(errors)

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        got: list[bytes] = []
        holder: list = []  # the reader, for the server's drained()
        server = SplitServer(codec, lambda: bool(holder) and unread_bytes(holder[0]) in (0, None))
        server.start()
        reader = nsq.Reader("split", "ch", lambda m: got.append(m.body) or True,
                            nsqd_tcp_addresses=[server.address], max_in_flight=1, **{codec: True})
        holder.append(reader)
        try:
            await await_for(lambda: b"FIN " + MSG_ID in server.commands or errors.lines, timeout=20,
                            what="pynsq to FIN the message or to drop the connection")
            before_close.extend(errors.lines)  # closing logs an IntegrityError too
        finally:
            reader.connect_to_nsqd = lambda *a, **k: None  # no reconnect after close
            reader.close()
            await await_for(lambda: not reader.conns, what="pynsq to see its connection closed")
        return got, server.commands

    try:
        with compressed_reads(fixed):
            got, commands = asyncio.run(scenario())
    finally:
        logging.getLogger("nsq").removeHandler(errors)
    return got, before_close, commands


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_pynsq_with_the_shim_reads_frames_split_like_nsqd(codec):
    got, errors, commands = split_reads(codec, fixed=True)
    assert got == [b"across the split"] and not errors, errors
    assert commands[0] == b"SUB split ch" and commands[-1] == b"FIN " + MSG_ID, commands


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
def test_released_pynsq_drops_a_connection_whose_frame_is_split(codec):
    # pins why tests/pynsq_shim.py exists: once a pynsq release reads split frames, this
    # fails and the shim (and its callers) can go
    got, errors, commands = split_reads(codec, fixed=False)
    # IntegrityError('failed to unpack size'), or ConnectionClosedError when the close comes
    # between two reads; with deflate the message itself may get through first
    assert any(e in line for line in errors for e in ("IntegrityError", "ConnectionClosedError")), \
        (got, errors, commands)


def test_released_pynsq_upgrades_on_nsqmp_without_error(compat_broker):
    """nsqmp writes each compressed frame whole: pynsq as released upgrades, subscribes and
    reads on every connection (against nsqd 1.3.0 about one such connection in eight fails
    at the start). Fails when the broker writes a frame in pieces, as nsqd does."""
    import nsq

    topic, per_reader = "pynsq-split-upgrade", 3
    errors = PynsqErrors()
    before_close: list[str] = []
    logging.getLogger("nsq").addHandler(errors)
    kinds = [{"snappy": True}, {"deflate": True, "deflate_level": 1}, {"snappy": True},
             {"deflate": True, "deflate_level": 6}] * 4
    got = [0] * len(kinds)

    def counter(i: int):
        def handler(message) -> bool:
            got[i] += 1
            return True
        return handler

    def subscribed() -> int:
        topics = compat_broker.stats(topic=topic)["topics"] or []
        return sum(len(c["clients"]) for t in topics for c in t["channels"] or [])

    async def scenario() -> None:
        readers: list = []
        try:
            # one at a time: an idle client reads each write as it comes, so a frame written
            # in pieces would show (all at once, they are read together more often)
            for i, opts in enumerate(kinds):
                readers.append(nsq.Reader(topic, f"ch{i}", counter(i), max_in_flight=per_reader,
                                          nsqd_tcp_addresses=[compat_broker.tcp_address], **opts))
                await await_for(lambda: subscribed() == i + 1 or errors.lines, timeout=30, interval=0.01,
                                what=f"reader {i} subscribed")
            with Connection.connect(compat_broker.tcp_address) as pub:
                pub.mpub(topic, [b"x" * 300] * per_reader)
            await await_for(lambda: sum(got) == per_reader * len(kinds) or errors.lines, timeout=30,
                            what="every reader's messages")
            before_close.extend(errors.lines)  # closing logs an IntegrityError too
        finally:
            for r in readers:
                r.connect_to_nsqd = lambda *a, **k: None  # no reconnect after close
                r.close()
            await await_for(lambda: not any(r.conns for r in readers), what="pynsq to see its connections closed")

    try:
        with compressed_reads(fixed=False):
            asyncio.run(scenario())
    finally:
        logging.getLogger("nsq").removeHandler(errors)
    assert not before_close and got == [per_reader] * len(kinds), (got, before_close)
