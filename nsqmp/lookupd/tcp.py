"""nsqlookupd's TCP protocol V1, the one brokers speak, on one connection.

Wire format (integers are big-endian)::

    broker -> lookupd
        "  V1"                                  4-byte magic, once
        <COMMAND>[ <param>...]\\n                a line, trimmed, split on single spaces
        IDENTIFY\\n[4-byte size][JSON]           IDENTIFY's line is followed by a body
    lookupd -> broker
        [4-byte size][data]                     NO frame type: "OK", a JSON object, or
                                                "<E_CODE> <description>" for an error

Commands (one handler each, in COMMANDS): IDENTIFY, REGISTER <topic> [<channel>],
UNREGISTER <topic> [<channel>], PING. Every error is fatal: it is sent, then the connection
is closed. A connection's registrations are removed when it goes away.

Limits nsqlookupd does not have (so one peer cannot exhaust our memory): a command line is
at most MAX_LINE bytes, an IDENTIFY body at most MAX_BODY bytes, and a peer that does not
read its responses stops being read from (explicit backpressure).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from nsqmp.lookupd.gojson import decode_peer_fields, dumps
from nsqmp.lookupd.linger import linger_close
from nsqmp.lookupd.registry import (
    CHANNEL, CLIENT_REGISTRATION, TOPIC, PeerInfo, Producer, Registration,
)
from nsqmp.protocol.errors import E_BAD_BODY, E_BAD_CHANNEL, E_BAD_PROTOCOL, E_BAD_TOPIC, E_INVALID
from nsqmp.protocol.lookup_v1 import MAGIC as MAGIC_V1, OK, SIZE, frame
from nsqmp.protocol.names import is_valid_name

log = logging.getLogger("nsqmp.lookupd")

MAX_LINE = 4096          # the longest real command, REGISTER <64> <64>, is ~140 bytes
MAX_BODY = 1 << 20       # a real IDENTIFY body is a few hundred bytes
EPHEMERAL = "#ephemeral"
_SIZE = SIZE  # shared with the registrar: nsqmp/protocol/lookup_v1.py
_OK = OK


class Fatal(Exception):
    """An error sent as ``<code> <description>``, after which the connection is closed."""

    def __init__(self, code: str, description: str = "") -> None:
        super().__init__(code, description)
        self.code = code
        self.description = description

    @property
    def wire(self) -> bytes:
        text = f"{self.code} {self.description}" if self.description else self.code
        return text.encode("utf-8", "surrogateescape")  # raw bytes the peer sent come back as they were

    def __str__(self) -> str:
        return self.wire.decode("utf-8", "replace")


def format_address(peername) -> str:
    """host:port the way Go's net.Addr.String() writes a peer ([v6]:port; mapped v4 bare)."""
    host, port = peername[0], peername[1]
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class LookupConnection(asyncio.Protocol):
    """One broker connection: a buffer, the parse loop, and the peer once IDENTIFYed."""

    def __init__(self, server) -> None:
        self.server = server
        self.db = server.db
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.magic_ok = False
        self.closing = False
        self.remote = "?"
        self.peer: PeerInfo | None = None

    # -- asyncio callbacks -------------------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        peername = transport.get_extra_info("peername")
        if peername:
            self.remote = format_address(peername)
        self.server.connections.add(self)
        log.info("TCP: new client(%s)", self.remote)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.buf += data
        self._drain()

    def pause_writing(self) -> None:
        # the peer is not reading what we send: stop reading what it sends
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.closing:
            self.transport.resume_reading()

    def connection_lost(self, exc) -> None:
        self.transport = None
        self.closing = True
        self.server.connections.discard(self)
        log.info("CLIENT(%s): closing", self.remote)
        if self.peer is not None:
            for r in self.db.lookup_registrations(self.peer.id):
                removed, _ = self.db.remove_producer(r, self.peer.id)
                if removed:
                    log.info("DB: client(%s) UNREGISTER category:%s key:%s subkey:%s",
                             self.remote, r.category, r.key, r.subkey)

    # -- the parse loop ----------------------------------------------------------------------
    def _drain(self) -> None:
        buf = self.buf
        pos = 0
        try:
            while not self.closing:
                if not self.magic_ok:
                    if len(buf) < 4:
                        break
                    magic = bytes(buf[:4])
                    if magic != MAGIC_V1:
                        log.error("client(%s) bad protocol magic %r", self.remote, magic)
                        self._close_with(E_BAD_PROTOCOL.encode())
                        return
                    self.magic_ok = True
                    pos = 4
                    continue
                nl = buf.find(b"\n", pos)
                if nl < 0:
                    if len(buf) - pos > MAX_LINE:
                        raise Fatal(E_INVALID, f"command line longer than {MAX_LINE} bytes")
                    break
                params = bytes(buf[pos:nl]).strip().split(b" ")
                handler = COMMANDS.get(params[0])
                if handler is None:
                    raise Fatal(E_INVALID, f"invalid command {_text(params[0])}")
                end = nl + 1
                body = None
                if handler is IDENTIFY and self.peer is None:
                    got = self._identify_body(buf, end)
                    if got is None:
                        break  # wait for the rest of the body
                    body, end = got
                response = handler(self, params[1:], body)
                pos = end
                if self.transport is not None:
                    self.transport.write(frame(response))
        except Fatal as err:
            log.error("[%s] - %s", self.remote, err)
            self._close_with(err.wire)
            return
        except Exception:  # a bug: lose this connection, never the daemon; say nothing inside
            log.exception("[%s] - command failed", self.remote)
            self.closing = True
            if self.transport is not None:
                linger_close(self.transport)
            return
        if pos:
            del buf[:pos]

    def _identify_body(self, buf: bytearray, start: int) -> tuple[bytes, int] | None:
        """IDENTIFY's ``[4-byte size][body]`` at ``start``, or None until it is all here."""
        if len(buf) < start + 4:
            return None
        (size,) = _SIZE.unpack_from(buf, start)
        if size < 0:
            raise Fatal(E_BAD_BODY, f"IDENTIFY invalid body size {size}")
        if size > MAX_BODY:
            raise Fatal(E_BAD_BODY, f"IDENTIFY body too big {size} > {MAX_BODY}")
        end = start + 4 + size
        if len(buf) < end:
            return None
        return bytes(buf[start + 4:end]), end

    def _close_with(self, data: bytes) -> None:
        self.closing = True
        self.buf.clear()
        if self.transport is not None:
            self.transport.write(frame(data))
            linger_close(self.transport)

    def close(self) -> None:
        """Close (server shutdown)."""
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def require_peer(self) -> PeerInfo:
        if self.peer is None:
            raise Fatal(E_INVALID, "client must IDENTIFY")
        return self.peer


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _topic_channel(command: str, params: list[bytes]) -> tuple[str, str]:
    """nsqlookupd's getTopicChan: a valid topic and an optional valid channel."""
    if not params:
        raise Fatal(E_INVALID, f"{command} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) >= 2 else b""
    if not is_valid_name(topic):
        raise Fatal(E_BAD_TOPIC, f"{command} topic name '{_text(topic)}' is not valid")
    if channel and not is_valid_name(channel):
        raise Fatal(E_BAD_CHANNEL, f"{command} channel name '{_text(channel)}' is not valid")
    return topic.decode(), channel.decode()


# -- one handler per command ----------------------------------------------------------------
Handler = Callable[[LookupConnection, list[bytes], "bytes | None"], bytes]


def IDENTIFY(conn: LookupConnection, params: list[bytes], body: bytes | None) -> bytes:
    """Body: {"broadcast_address","tcp_port","http_port","version",("hostname",
    "topology_zone","topology_region")}; answers the lookupd's own ports and names."""
    if conn.peer is not None:
        raise Fatal(E_INVALID, "cannot IDENTIFY again")
    assert body is not None
    try:
        fields = decode_peer_fields(body)
    except Exception as exc:  # any decoding problem is the peer's
        log.error("[%s] - IDENTIFY body: %s", conn.remote, exc)
        raise Fatal(E_BAD_BODY, "IDENTIFY failed to decode JSON body") from None
    fields.pop("remote_address", None)
    peer = PeerInfo(conn.remote, conn.remote, **fields)
    if not peer.broadcast_address or peer.tcp_port == 0 or peer.http_port == 0 or not peer.version:
        raise Fatal(E_BAD_BODY, "IDENTIFY missing fields")
    log.info("CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
             conn.remote, peer.broadcast_address, peer.tcp_port, peer.http_port, peer.version)
    conn.peer = peer
    if conn.db.add_producer(CLIENT_REGISTRATION, Producer(peer)):
        log.info("DB: client(%s) REGISTER category:client key: subkey:", conn.remote)
    server = conn.server
    return dumps({"tcp_port": server.tcp_port, "http_port": server.http_port, "version": server.version,
                  "broadcast_address": server.opts.broadcast_address, "hostname": server.hostname},
                 sort_keys=True)


def REGISTER(conn: LookupConnection, params: list[bytes], body: bytes | None) -> bytes:
    """The peer has <topic> (and <channel> of it)."""
    peer = conn.require_peer()
    topic, channel = _topic_channel("REGISTER", params)
    db = conn.db
    if channel:
        if db.add_producer(Registration(CHANNEL, topic, channel), Producer(peer)):
            log.info("DB: client(%s) REGISTER category:channel key:%s subkey:%s", conn.remote, topic, channel)
    if db.add_producer(Registration(TOPIC, topic, ""), Producer(peer)):
        log.info("DB: client(%s) REGISTER category:topic key:%s subkey:", conn.remote, topic)
    return _OK


def UNREGISTER(conn: LookupConnection, params: list[bytes], body: bytes | None) -> bytes:
    """The peer no longer has <channel> of <topic>, or <topic> (and all its channels).
    An ephemeral channel or topic left with no producers is forgotten altogether."""
    peer = conn.require_peer()
    topic, channel = _topic_channel("UNREGISTER", params)
    db = conn.db
    if channel:
        key = Registration(CHANNEL, topic, channel)
        removed, left = db.remove_producer(key, peer.id)
        if removed:
            log.info("DB: client(%s) UNREGISTER category:channel key:%s subkey:%s", conn.remote, topic, channel)
        if left == 0 and channel.endswith(EPHEMERAL):
            db.remove_registration(key)
        return _OK
    for r in db.find_registrations(CHANNEL, topic, "*"):
        removed, _ = db.remove_producer(r, peer.id)
        if removed:  # a broker unregisters its channels first; this is unusual
            log.warning("client(%s) unexpected UNREGISTER category:channel key:%s subkey:%s",
                        conn.remote, topic, r.subkey)
    key = Registration(TOPIC, topic, "")
    removed, left = db.remove_producer(key, peer.id)
    if removed:
        log.info("DB: client(%s) UNREGISTER category:topic key:%s subkey:", conn.remote, topic)
    if left == 0 and topic.endswith(EPHEMERAL):
        db.remove_registration(key)
    return _OK


def PING(conn: LookupConnection, params: list[bytes], body: bytes | None) -> bytes:
    """Keeps an IDENTIFYed peer active (allowed, and a no-op, before IDENTIFY)."""
    peer = conn.peer
    if peer is not None:
        now = time.time_ns()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("CLIENT(%s): pinged (last ping %.6fs)", peer.id, (now - peer.last_update) / 1e9)
        peer.last_update = now
    return _OK


COMMANDS: dict[bytes, Handler] = {
    b"IDENTIFY": IDENTIFY,
    b"REGISTER": REGISTER,
    b"UNREGISTER": UNREGISTER,
    b"PING": PING,
}
