"""A producer for one broker: PUB and MPUB, waiting for OK or pipelined with a callback.

go-nsq's Producer as to_nsq and nsq_to_nsq use it: it connects on the first publish (and
again after the connection is lost), answers heartbeats from its reader thread (see
nsqmp.client.link), and matches each answer to the oldest command waiting for one, since
the broker answers PUB and MPUB in order.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from nsqmp.client import wire
from nsqmp.client.config import Config
from nsqmp.client.link import Link, error_text
from nsqmp.client.sync import NSQError

log = logging.getLogger("nsqmp.client")

#: called once per publish with None (OK) or the error, in the reader thread
Callback = Callable[[Exception | None], None]


class Producer:
    """publish()/multi_publish() wait for OK (raising NSQError or ConnectionError);
    publish_async() returns at once and calls back when the answer comes."""

    def __init__(self, address: str, config: Config) -> None:
        self.address = address
        self.config = config
        self._link: Link | None = None
        self._waiting: dict[Link, deque[Callback]] = {}  # each guarded by its link's lock
        self._connect_lock = threading.Lock()

    def _connected(self) -> Link:
        with self._connect_lock:
            link = self._link
            if link is not None and not link.closed and not link.failed:
                return link
            link = Link(self.address, self.config, self._on_frame, self._on_close)
            try:
                link.open()
            except (OSError, EOFError, NSQError) as exc:
                raise ConnectionError(f"({self.address}) {exc}") from None
            self._waiting[link] = deque()
            link.start(f"nsq producer {self.address}")
            self._link = link
            return link

    def publish_async(self, topic: str, body: bytes, callback: Callback) -> None:
        """PUB without waiting; callback(None) on OK, callback(error) otherwise."""
        self._send(wire.pub(topic, body), callback)

    def multi_publish_async(self, topic: str, bodies: list[bytes], callback: Callback) -> None:
        """MPUB (all or nothing) without waiting."""
        self._send(wire.mpub(topic, bodies), callback)

    def publish(self, topic: str, body: bytes, timeout: float = 10.0) -> None:
        """PUB and wait for its OK."""
        self._wait(lambda cb: self.publish_async(topic, body, cb), timeout)

    def multi_publish(self, topic: str, bodies: list[bytes], timeout: float = 10.0) -> None:
        """MPUB and wait for its OK."""
        self._wait(lambda cb: self.multi_publish_async(topic, bodies, cb), timeout)

    def _wait(self, start: Callable[[Callback], None], timeout: float) -> None:
        done = threading.Event()
        result: list[Exception | None] = []

        def callback(error: Exception | None) -> None:
            result.append(error)
            done.set()

        start(callback)
        if not done.wait(timeout):
            raise TimeoutError(f"({self.address}) no answer within {timeout}s")
        if result[0] is not None:
            raise result[0]

    def _send(self, data: bytes, callback: Callback) -> None:
        try:
            link = self._connected()
        except ConnectionError as exc:
            callback(exc)
            return
        waiting = self._waiting[link]
        with link.lock:
            waiting.append(callback)
            if link.send_locked(data):
                return
            waiting.pop()
        callback(ConnectionError(f"({self.address}) the connection is closed"))

    def _on_frame(self, link: Link, ftype: int, data: bytes) -> None:
        with link.lock:
            waiting = self._waiting[link]
            callback = waiting.popleft() if waiting else None
        if callback is None:
            log.error("(%s) unexpected frame from nsqd: %r", self.address, data[:100])
            return
        callback(None if ftype == wire.FRAME_RESPONSE and data == b"OK" else NSQError(error_text(data)))

    def _on_close(self, link: Link) -> None:
        with link.lock:
            waiting = self._waiting.pop(link)
        for callback in waiting:
            callback(ConnectionError(f"({self.address}) connection closed before the answer"))

    def stop(self) -> None:
        """Close the connection (callbacks still waiting get a ConnectionError)."""
        link = self._link
        if link is not None:
            link.close()
            link.join(2.0)
