"""The stream upgrades IDENTIFY negotiates: TLS (start_tls), then snappy or deflate.

The connection sees two calls: `start_tls(conn, early)` (a task: the handshake, then the
OK over TLS and any compression) and `start_compression(conn, end)` (from IDENTIFY's
handler). Compression sets the connection's `encode`/`decode`, which `write` and
`data_received` apply to every chunk; `common_name` reads the client's certificate for AUTH.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nsqmp.protocol import errors as E
from nsqmp.protocol.errors import FatalClientError
from nsqmp.protocol.frames import OK_FRAME

if TYPE_CHECKING:
    from nsqmp.acceptor.identify import ClientSettings
    from nsqmp.acceptor.tcp import V2Connection

log = logging.getLogger("nsqmp.acceptor")

Codec = Callable[[bytes], bytes]


def compression(settings: ClientSettings) -> tuple[Codec, Codec]:
    """(encode, decode) of the negotiated stream compression: snappy's framing format or
    raw deflate flushed at every write, as nsqd's."""
    if settings.snappy:
        import snappy

        out, inp = snappy.StreamCompressor(), snappy.StreamDecompressor()
        return out.add_chunk, inp.decompress
    deflater = zlib.compressobj(settings.deflate_level, zlib.DEFLATED, -15)
    inflater = zlib.decompressobj(-15)
    return (lambda d: deflater.compress(d) + deflater.flush(zlib.Z_SYNC_FLUSH)), inflater.decompress


def start_compression(conn: V2Connection, end: int) -> None:
    """Switch the stream to the negotiated compression, as nsqd does right after the
    IDENTIFY response (or the TLS OK), and confirm with an OK sent compressed. Bytes the
    client sent after buf[:end] are already compressed: they are decoded now."""
    conn.encode, conn.decode = compression(conn.settings)
    buf = conn.buf
    if len(buf) > end:
        rest = bytes(buf[end:])
        del buf[end:]
        buf += conn.decode(rest)
    conn.write(OK_FRAME)


async def start_tls(conn: V2Connection, early: bytes) -> None:
    """TLS server handshake (5 s, as nsqd), OK over TLS, then any compression upgrade;
    reading stays paused (flow WAIT) until then."""
    if early:
        log.info("%s: sent data before the TLS handshake, closing", conn.remote)
        conn.close()
        return
    head = await peek_record_header(conn)
    if head is not None and not looks_like_tls(head):
        # Go's crypto/tls gives up on the record header; nsqd sends its error in the clear
        log.info("%s: not a TLS handshake: %r", conn.remote, head)
        conn.send_error(FatalClientError(
            E.E_IDENTIFY_FAILED, "IDENTIFY failed tls: first record does not look like a TLS handshake"))
        return
    host = conn.host
    try:
        transport = await host.loop.start_tls(
            conn.transport, conn, host.tls_context, server_side=True, ssl_handshake_timeout=5.0)  # type: ignore[arg-type]
    except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
        log.info("%s: TLS handshake failed: %s", conn.remote, exc)
        if conn.transport is not None:
            conn.transport.close()
        conn.closed = True
        return
    conn.transport = transport  # type: ignore[assignment]
    conn.flow.switch(transport)
    conn.tls = True
    conn.write(OK_FRAME)
    if conn.settings.snappy or conn.settings.deflate:
        start_compression(conn, len(conn.buf))
    conn.waiting_for = ""
    conn.process()


async def peek_record_header(conn: V2Connection) -> bytes | None:
    """The first 5 bytes the client sends for the handshake (a TLS record header), read
    with MSG_PEEK so that the TLS layer still gets them; None if they do not come."""
    raw = conn.transport.get_extra_info("socket") if conn.transport is not None else None
    if raw is None:
        return None
    peek = socket.socket(fileno=os.dup(raw.fileno()))
    try:
        for _ in range(500):  # nsqd's 5 s handshake deadline
            try:
                head = peek.recv(5, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                head = None  # nothing yet
            except OSError:
                return None
            if head is not None and (len(head) >= 5 or not head):
                return head or None  # the header, or None at EOF
            if conn.closed:
                return None
            await asyncio.sleep(0.01)
        return None
    finally:
        peek.close()


def looks_like_tls(head: bytes) -> bool:
    """Go's crypto/tls check of a client's first record header: an alert or a handshake of a
    version below 16.0 (an SSLv2 hello, 0x80, gets its own error there and here a failed
    handshake)."""
    return head[0] == 0x80 or (head[0] in (0x15, 0x16) and (head[1] << 8 | head[2]) < 0x1000)


def ssl_object(conn: V2Connection) -> Any:
    """The connection's ssl.SSLObject once TLS is on, else None."""
    if not conn.tls or conn.transport is None:
        return None
    return conn.transport.get_extra_info("ssl_object")


def common_name(conn: V2Connection) -> str:
    """CN of the client's TLS certificate, if it sent one (Go keeps the last CN)."""
    obj = ssl_object(conn)
    cert = obj.getpeercert() if obj is not None else None
    cn = ""
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                cn = value
    return cn
