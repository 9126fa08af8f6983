"""A multi-connection NSQ consumer that holds messages until told to FIN them.

Built on the project client (``nsqmp.client.sync.Connection`` for the handshake,
``nsqmp.client.wire`` for every command and frame). One background thread owns the reading
side of every socket: it decodes messages into a buffer, answers heartbeats, TOUCHes
messages held longer than half the msg_timeout and reconnects dropped connections. The
caller takes messages from the buffer (``take``) and later acknowledges them (``fin``) or
gives them back (``requeue``); a message is never acknowledged by the consumer itself.

In-flight capacity: each connection gets RDY ``rdy`` (at most the broker's
max_rdy_count); messages stay in flight from delivery until FIN, so the number of
connections times RDY bounds what can be taken and not yet acknowledged.

A connection that drops loses its messages to the broker, which requeues them: they are
removed from the buffer, and FINs for messages already taken are skipped (they will be
delivered again, so the caller sees them twice: at-least-once).
"""
from __future__ import annotations

import collections
import logging
import os
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

from nsqmp.client import wire
from nsqmp.client.sync import Connection, NSQError

log = logging.getLogger("nsqmp.spark")

USER_AGENT = "nsqmp-spark/0.1"


class ConsumerError(RuntimeError):
    """The consumer cannot connect or subscribe; the text names the address and the cause."""


@dataclass(eq=False)
class Chunk:
    """Messages that arrived together on one connection (one generation of it)."""

    conn: _Conn
    gen: int
    msgs: list
    t: float = field(default_factory=time.monotonic)  # arrival, or last TOUCH

    @property
    def stale(self) -> bool:
        return self.gen != self.conn.gen or self.conn.sock is None


class _Conn:
    def __init__(self, address: str, index: int) -> None:
        self.address = address
        self.index = index
        self.gen = 0
        self.sock: socket.socket | None = None
        self.reader: wire.FrameReader | None = None
        self.lock = threading.Lock()
        self.rdy = 0
        self.retry_at = 0.0
        self.backoff = 0.25

    def send(self, data: bytes) -> bool:
        """Send under the connection's lock; False if the connection is gone."""
        with self.lock:
            sock = self.sock
            if sock is None:
                return False
            try:
                sock.sendall(data)
                return True
            except OSError:
                return False


class Consumer:
    def __init__(self, addresses, topic: str, channel: str, *, connections_per_nsqd: int = 1,
                 rdy: int = 2500, msg_timeout_ms: int = 300_000, connect_timeout_ms: int = 5000,
                 client_id: str = "nsqmp-spark", heartbeat_interval_ms: int | None = None) -> None:
        self.addresses = tuple(addresses)
        self.topic = topic
        self.channel = channel
        self.rdy = rdy
        self.msg_timeout_ms = msg_timeout_ms
        self.connect_timeout = connect_timeout_ms / 1000
        self.client_id = client_id
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # index: unique over all addresses (keys the reading thread's registrations)
        self.conns = [_Conn(a, i) for i, a in enumerate(a for a in self.addresses
                                                         for _ in range(connections_per_nsqd))]
        self.buffer: collections.deque[Chunk] = collections.deque()
        self.buffered = 0
        self.held: dict[int, Chunk] = {}   # taken, not yet acknowledged: id(chunk) -> chunk
        self.cond = threading.Condition()
        self.stats = collections.Counter()
        self.last_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    # -- life ---------------------------------------------------------------------------
    def start(self) -> Consumer:
        """Connect every connection (raises ConsumerError naming the address) and start reading."""
        try:
            for conn in self.conns:
                self._connect(conn)
        except Exception:
            self._stop.set()
            for conn in self.conns:
                self._drop(conn, "start-up failed")
            self._close_pipe()
            raise
        self._thread = threading.Thread(target=self._run, name="nsq-consumer", daemon=True)
        self._thread.start()
        return self

    def close(self, graceful: bool = True, timeout: float = 5.0) -> None:
        """Stop reading. graceful: send CLS and wait for CLOSE_WAIT, so FINs sent before are
        processed by the broker before it sees the connection close."""
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout)
        for conn in self.conns:
            if graceful and conn.sock is not None:
                self._close_wait(conn, timeout)
            self._drop(conn, "closed")
        self._close_pipe()

    def _close_pipe(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._wake_r = self._wake_w = -1

    def _close_wait(self, conn: _Conn, timeout: float) -> None:
        sock = conn.sock
        if sock is None or not conn.send(wire.CLS):
            return
        deadline = time.monotonic() + timeout
        reader = conn.reader
        try:
            while time.monotonic() < deadline:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                data = sock.recv(1 << 20)
                if not data:
                    return
                for ftype, payload in reader.feed(data):
                    if ftype == wire.FRAME_RESPONSE and payload == b"CLOSE_WAIT":
                        return
                    if ftype == wire.FRAME_RESPONSE and payload == b"_heartbeat_":
                        conn.send(wire.NOP)
        except OSError:
            return

    # -- connections --------------------------------------------------------------------
    def _connect(self, conn: _Conn) -> None:
        address = conn.address
        try:
            c = Connection.connect(address, timeout=self.connect_timeout)
        except OSError as exc:
            raise ConsumerError(f"nsq: cannot connect to nsqd {address}: {exc.strerror or exc}") from None
        try:
            fields = {"client_id": self.client_id, "hostname": socket.gethostname(),
                      "user_agent": USER_AGENT, "msg_timeout": self.msg_timeout_ms}
            if self.heartbeat_interval_ms:
                fields["heartbeat_interval"] = self.heartbeat_interval_ms
            info = c.identify(**fields)
            rdy = self.rdy
            if isinstance(info, dict) and info.get("max_rdy_count"):
                rdy = min(rdy, int(info["max_rdy_count"]))
            c.sub(self.topic, self.channel)
            c.sock.settimeout(30.0)
            pending = c.pending
            c.pending = []
            with conn.lock:
                conn.sock, conn.reader = c.sock, c.reader
                conn.gen += 1
                conn.rdy = rdy
            conn.backoff = 0.25
            # frames already read past SUB's OK (none expected before RDY)
            for ftype, data in pending:
                self._frame(conn, ftype, data, [])
            conn.send(wire.rdy(rdy))
        except NSQError as exc:
            c.close()
            raise ConsumerError(f"nsq: nsqd {address} refused the subscription to "
                                f"{self.topic}/{self.channel}: {exc}") from None
        except (OSError, EOFError) as exc:
            c.close()
            raise ConsumerError(f"nsq: nsqd {address} closed the connection during the handshake: {exc}") from None

    def _drop(self, conn: _Conn, why: str) -> None:
        with conn.lock:
            sock = conn.sock
            if sock is None:
                return
            conn.sock = None
            conn.gen += 1
        try:
            sock.close()
        except OSError:
            pass
        if not self._stop.is_set():
            self.stats["disconnects"] += 1
            peers = [c for c in self.conns if c.address == conn.address]
            if sum(1 for c in peers if c.sock is None) == 1:   # the first of this address to go
                log.warning("nsq: lost a connection to nsqd %s (%s); reconnecting. Its unacknowledged "
                            "messages go back to the broker and will be delivered again",
                            conn.address, why)
            conn.retry_at = time.monotonic() + conn.backoff
            conn.backoff = min(conn.backoff * 2, 5.0)
        with self.cond:
            # what this connection delivered and nobody took yet is the broker's again
            kept = collections.deque(ch for ch in self.buffer if not ch.stale)
            dropped = self.buffered - sum(len(ch.msgs) for ch in kept)
            self.buffer = kept
            self.buffered -= dropped
            self.stats["dropped_on_disconnect"] += dropped

    def _wake(self) -> None:
        if self._wake_w < 0:
            return
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    # -- the reading thread -----------------------------------------------------------------
    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        registered: dict[int, tuple[socket.socket, int]] = {}
        next_housekeeping = 0.0
        try:
            while not self._stop.is_set():
                # (re-)register live sockets; reconnect dead ones when their backoff is over
                now = time.monotonic()
                for conn in self.conns:
                    cur = registered.get(conn.index)
                    if conn.sock is None:
                        if cur is not None:
                            self._unregister(sel, cur[0])
                            del registered[conn.index]
                        if now >= conn.retry_at:
                            try:
                                self._connect(conn)
                                self.stats["reconnects"] += 1
                                if all(c.sock is not None for c in self.conns if c.address == conn.address):
                                    log.warning("nsq: connected to nsqd %s again", conn.address)
                            except ConsumerError as exc:
                                self.last_error = str(exc)
                                conn.retry_at = time.monotonic() + conn.backoff
                                conn.backoff = min(conn.backoff * 2, 5.0)
                        continue
                    if cur is None or cur[1] != conn.gen:
                        if cur is not None:
                            self._unregister(sel, cur[0])
                        sel.register(conn.sock, selectors.EVENT_READ, conn)
                        registered[conn.index] = (conn.sock, conn.gen)
                for key, _ in sel.select(timeout=0.25):
                    conn = key.data
                    if conn is None:
                        try:
                            os.read(self._wake_r, 4096)
                        except OSError:
                            pass
                        continue
                    self._read(conn, key.fileobj)
                if now >= next_housekeeping:
                    next_housekeeping = now + min(1.0, self.msg_timeout_ms / 4000)
                    self._touch_held()
        except Exception:  # pragma: no cover - a bug here must not hang the query silently
            log.exception("nsq: consumer thread failed")
            self.last_error = "consumer thread failed"
        finally:
            sel.close()

    @staticmethod
    def _unregister(sel, sock) -> None:
        try:
            sel.unregister(sock)
        except (KeyError, ValueError):
            pass

    def _read(self, conn: _Conn, sock: socket.socket) -> None:
        if sock is not conn.sock:
            return
        try:
            data = sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop(conn, f"read failed: {exc}")
            return
        if not data:
            self._drop(conn, "closed by the broker")
            return
        msgs: list = []
        gen = conn.gen
        for ftype, payload in conn.reader.feed(data):
            self._frame(conn, ftype, payload, msgs)
        if msgs:
            chunk = Chunk(conn, gen, msgs)
            with self.cond:
                if not chunk.stale:
                    self.buffer.append(chunk)
                    self.buffered += len(msgs)
                    self.stats["received"] += len(msgs)
                    self.cond.notify_all()

    def _frame(self, conn: _Conn, ftype: int, payload: bytes, msgs: list) -> None:
        if ftype == wire.FRAME_MESSAGE:
            msgs.append(wire.decode_message(payload))
        elif ftype == wire.FRAME_RESPONSE:
            if payload == b"_heartbeat_":
                conn.send(wire.NOP)
        else:
            text = payload.decode(errors="replace")
            if text.startswith(("E_FIN_FAILED", "E_TOUCH_FAILED", "E_REQ_FAILED")):
                self.stats[text.split(" ", 1)[0]] += 1
                log.debug("nsq: %s: %s", conn.address, text)
            else:
                self.last_error = f"nsqd {conn.address}: {text}"
                log.warning("nsq: nsqd %s sent an error: %s", conn.address, text)

    def _touch_held(self) -> None:
        """TOUCH messages held for more than half the msg_timeout, so a slow micro-batch or
        a long trigger interval does not make the broker deliver them again."""
        limit = self.msg_timeout_ms / 2000
        now = time.monotonic()
        with self.cond:
            chunks = [ch for ch in self.buffer if now - ch.t > limit]
            chunks += [ch for ch in self.held.values() if now - ch.t > limit]
        for ch in chunks:
            if ch.stale:
                continue
            if ch.conn.send(b"".join(wire.touch(m.id) for m in ch.msgs)):
                ch.t = now
                self.stats["touched"] += len(ch.msgs)

    # -- the caller's side --------------------------------------------------------------------
    def take(self, limit: int, wait: float, cutoff_ns: int | None = None) -> list[Chunk]:
        """Up to `limit` buffered messages, as chunks; waits up to `wait` seconds for the first.

        With cutoff_ns, messages published (broker timestamp) after it are set aside: held in
        flight, never returned (trigger availableNow).
        """
        deadline = time.monotonic() + wait
        out: list[Chunk] = []
        taken = 0
        with self.cond:
            while True:
                while self.buffer and taken < limit:
                    ch = self.buffer.popleft()
                    self.buffered -= len(ch.msgs)
                    if ch.stale:
                        self.stats["dropped_on_disconnect"] += len(ch.msgs)
                        continue
                    msgs = ch.msgs
                    if cutoff_ns is not None:
                        late = [m for m in msgs if m.timestamp > cutoff_ns]
                        if late:
                            msgs = [m for m in msgs if m.timestamp <= cutoff_ns]
                            aside = Chunk(ch.conn, ch.gen, late, ch.t)
                            self.held[id(aside)] = aside
                            self.stats["held_back"] += len(late)
                            if not msgs:
                                continue
                    room = limit - taken
                    if len(msgs) > room:
                        rest = Chunk(ch.conn, ch.gen, msgs[room:], ch.t)
                        self.buffer.appendleft(rest)
                        self.buffered += len(rest.msgs)
                        msgs = msgs[:room]
                    got = Chunk(ch.conn, ch.gen, msgs, ch.t)
                    self.held[id(got)] = got
                    out.append(got)
                    taken += len(msgs)
                if out or taken >= limit:
                    return out
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return out
                self.cond.wait(remaining)

    def fin(self, chunks: list[Chunk]) -> int:
        """FIN every message of the chunks still owned by their connection; returns how many."""
        return self._ack(chunks, lambda m: wire.fin(m.id), "fin")

    def requeue(self, chunks: list[Chunk], delay_ms: int = 0) -> int:
        """REQ every message: the broker delivers it again (attempts + 1)."""
        return self._ack(chunks, lambda m: wire.req(m.id, delay_ms), "req")

    def _ack(self, chunks: list[Chunk], encode, what: str) -> int:
        by_conn: dict[int, list[Chunk]] = {}
        done = 0
        with self.cond:
            for ch in chunks:
                self.held.pop(id(ch), None)
        for ch in chunks:
            if ch.stale:
                self.stats[f"{what}_skipped_stale"] += len(ch.msgs)
                continue
            by_conn.setdefault(ch.conn.index, []).append(ch)
        for group in by_conn.values():
            conn = group[0].conn
            gen = group[0].gen
            payload = b"".join(encode(m) for ch in group for m in ch.msgs)
            n = sum(len(ch.msgs) for ch in group)
            if gen == conn.gen and conn.send(payload):
                done += n
            else:
                self.stats[f"{what}_skipped_stale"] += n
        self.stats[what] += done
        return done

    @property
    def live_connections(self) -> int:
        return sum(1 for c in self.conns if c.sock is not None)
