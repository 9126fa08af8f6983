"""One NSQ connection read by a thread of its own: what the consumer and producer share.

Why a thread and not an event loop: the utilities built on this client run blocking work
per message (file writes and fsync, HTTP requests, reading stdin, a PUB waiting for its
OK) and nsq's tools run several at once (nsq_to_http's ``-n 100``). A reader thread per
connection answers heartbeats whatever the tool is doing, and hands every other frame to
its owner; writes from any thread go through one lock, so frames never interleave.
"""
from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

from nsqmp.client import wire
from nsqmp.client.config import Config
from nsqmp.client.sync import Connection, NSQError

log = logging.getLogger("nsqmp.client")

#: error frames after which the broker keeps the connection (go-nsq's isFatalError)
_NON_FATAL = (b"E_FIN_FAILED", b"E_REQ_FAILED", b"E_TOUCH_FAILED")

#: what a link hands its owner: (link, frame type, frame data)
FrameHandler = Callable[["Link", int, bytes], None]


class Link:
    """A connected, IDENTIFYed (and AUTHed, when the broker asks) connection.

    ``on_frame`` gets every frame but heartbeats, in the reader thread; ``on_close`` is
    called once, in the reader thread, when a started connection ends (EOF, error or
    close()).
    """

    def __init__(self, address: str, config: Config, on_frame: FrameHandler,
                 on_close: Callable[[Link], None]) -> None:
        self.address = address
        self.config = config
        self.on_frame = on_frame
        self.on_close = on_close
        self.lock = threading.Lock()  # writes, and the owner's counters kept with them
        self.closed = False
        self.failed = False  # a fatal error frame came: nothing more is sent
        self.info: dict = {}
        self._conn: Connection | None = None
        self._thread: threading.Thread | None = None

    def open(self) -> Link:
        """Connect and IDENTIFY; raises OSError, EOFError or NSQError."""
        conn = Connection.connect(self.address, timeout=self.config.dial_timeout)
        try:
            conn.sock.settimeout(max(self.config.read_timeout, 1.0))
            info = conn.identify(**self.config.identify())
            self.info = info or {}
            if self.info.get("auth_required"):
                if not self.config.auth_secret:
                    raise NSQError(f"{self.address} requires AUTH and no auth_secret is set")
                conn.auth(self.config.auth_secret)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return self

    def request(self, data: bytes) -> tuple[int, bytes]:
        """Before start(): send data and read its answer (SUB's OK) on this thread."""
        assert self._conn is not None and self._thread is None
        self._conn.send(data)
        frame = self._conn.read_frame()
        return frame.type, frame.data

    def start(self, name: str) -> None:
        """Hand reading to the link's thread."""
        self._thread = threading.Thread(target=self._read_loop, name=name, daemon=True)
        self._thread.start()

    def send(self, data: bytes) -> bool:
        """Send under the lock; False once the connection is gone."""
        with self.lock:
            return self.send_locked(data)

    def send_locked(self, data: bytes) -> bool:
        """send() for a caller that already holds ``lock``."""
        conn = self._conn
        if conn is None or self.closed or self.failed:
            return False
        try:
            conn.sock.sendall(data)
            return True
        except OSError:
            return False

    def close(self) -> None:
        """Close the socket; the reader thread sees it and calls on_close."""
        conn = self._conn
        if conn is None:
            return
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._thread is None:  # never started: nobody is told
            self.closed = True
            conn.close()

    def join(self, timeout: float) -> None:
        """Wait (up to timeout) for the reader thread to end."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _read_loop(self) -> None:
        conn = self._conn
        assert conn is not None
        # go-nsq's ReadTimeout: a live broker talks (heartbeats) well within it; a silent one is dropped
        conn.sock.settimeout(self.config.read_timeout)
        try:
            for ftype, data in conn.pending:
                self.on_frame(self, ftype, data)
            conn.pending.clear()
            while True:
                data = conn.sock.recv(1 << 16)
                if not data:
                    break
                for ftype, payload in conn.reader.feed(data):
                    if ftype == wire.FRAME_RESPONSE and payload == b"_heartbeat_":
                        self.send(wire.NOP)
                        continue
                    fatal = ftype == wire.FRAME_ERROR and not payload.startswith(_NON_FATAL)
                    if fatal:  # as go-nsq: the broker closes after it; the owner must not send more
                        with self.lock:
                            self.failed = True
                    self.on_frame(self, ftype, payload)
                    if fatal:
                        self.close()
        except OSError:
            pass
        except Exception:
            log.exception("(%s) reading the connection failed", self.address)
        finally:
            self._finish()

    def _finish(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        try:
            assert self._conn is not None
            self._conn.close()
        except OSError:
            pass
        self.on_close(self)



def error_text(data: bytes) -> str:
    """An error frame's text."""
    return data.decode(errors="replace")
