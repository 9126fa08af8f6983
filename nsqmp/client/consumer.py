"""A consumer of one topic/channel over many brokers, found directly or through nsqlookupd.

go-nsq's Consumer, as far as the nsq_* utilities use it: IDENTIFY, SUB, RDY shared out
over the connections (max_in_flight / connections, at least 1), heartbeats answered,
messages handed to the caller through a MessageQueue, FIN/REQ/TOUCH on the message, lookupd
polling (every lookupd, every lookupd_poll_interval: go-nsq asks one per poll, in turn,
so a topic only one lookupd knows can wait a whole interval there), a message tried
more than max_attempts times finished and logged, and CLS on stop. There is no RDY backoff
after a requeue: a requeued message waits its REQ delay in the broker.

Threads (see nsqmp.client.link): one reader per connection, one lookupd poller. The
caller takes messages with get() from any thread; the queue is built on a SimpleQueue,
whose put() is safe from a signal handler, so a tool can wake its own loop with wake().
"""
from __future__ import annotations

import logging
import random
import threading
import time
from queue import Empty, SimpleQueue

from nsqmp.client import lookup, wire
from nsqmp.client.config import Config
from nsqmp.client.link import Link, error_text
from nsqmp.client.sync import NSQError

log = logging.getLogger("nsqmp.client")


class Message:
    """A delivered message; finish(), requeue() or touch() answer it on its connection."""

    __slots__ = ("id", "body", "timestamp", "attempts", "topic", "responded", "_held", "_consumer", "_link")

    def __init__(self, m: wire.Message, topic: str, consumer: Consumer, link: Link) -> None:
        self.id, self.body, self.timestamp, self.attempts = m.id, m.body, m.timestamp, m.attempts
        self.topic = topic
        self.responded = False
        self._held = False
        self._consumer = consumer
        self._link = link

    def finish(self) -> bool:
        """FIN; False if already answered or the connection is gone (then the broker
        delivers the message again)."""
        return self._respond(wire.fin(self.id))

    def requeue(self, delay: float = -1.0) -> bool:
        """REQ after `delay` seconds; -1: go-nsq's delay for the attempt count."""
        if delay < 0:
            delay = self._consumer.config.requeue_delay(self.attempts)
        return self._respond(wire.req(self.id, int(delay * 1000)))

    def touch(self) -> bool:
        """TOUCH: restart the message's timeout."""
        if self.responded:
            return False
        return self._link.send(wire.touch(self.id))

    def _respond(self, data: bytes) -> bool:
        link = self._link
        with link.lock:
            if self.responded:
                return False
            self.responded = True
            if self._held:
                self._consumer.held[link] -= 1
            return link.send_locked(data)

    def _take(self) -> None:
        """The caller has it now (MessageQueue.get): it counts for starved()."""
        link = self._link
        with link.lock:
            if not self.responded and link in self._consumer.held:
                self._held = True
                self._consumer.held[link] += 1


def finish_all(messages: list[Message]) -> None:
    """FIN each message; one write per connection for the lot (nsq_to_file FINishes
    hundreds after each sync)."""
    by_link: dict[Link, list[bytes]] = {}
    for msg in messages:
        by_link.setdefault(msg._link, []).append(msg.id)
    for link, ids in by_link.items():
        data = []
        with link.lock:
            for msg in messages:
                if msg._link is link and not msg.responded:
                    msg.responded = True
                    if msg._held:
                        msg._consumer.held[link] -= 1
                    data.append(wire.fin(msg.id))
            link.send_locked(b"".join(data))


class MessageQueue:
    """Delivered messages of one or more consumers, in arrival order; None wakes a get()."""

    def __init__(self) -> None:
        self._queue: SimpleQueue = SimpleQueue()

    def put(self, msg: Message | None) -> None:
        """Reentrant (SimpleQueue): safe in a signal handler."""
        self._queue.put(msg)

    def wake(self) -> None:
        """Make a waiting get() return None."""
        self._queue.put(None)

    def empty(self) -> bool:
        """Nothing waiting (at this instant)."""
        return self._queue.empty()

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message, or None after `timeout` or a wake()."""
        try:
            msg = self._queue.get(timeout=timeout)
        except Empty:
            return None
        if msg is not None:
            msg._take()
        return msg


class Consumer:
    """Connect with connect_to_nsqds() or connect_to_lookupds(); take messages with get()."""

    def __init__(self, topic: str, channel: str, config: Config, queue: MessageQueue | None = None) -> None:
        self.topic = topic
        self.channel = channel
        self.config = config
        self.queue = queue if queue is not None else MessageQueue()
        self.links: dict[str, Link] = {}
        # taken by the caller and not answered, per connection (each guarded by its link's lock)
        self.held: dict[Link, int] = {}
        self.rdy: dict[Link, int] = {}
        self.close_wait: dict[Link, threading.Event] = {}
        self.stopping = False
        self.received = 0
        self._lock = threading.Lock()
        self._nsqds: list[str] = []
        self._lookupds: list[str] = []
        self._poke = threading.Event()
        self._done = threading.Event()  # stop(): the poller and reconnect timers end
        self._prefix = f"[{topic}/{channel}]"

    # -- connecting ---------------------------------------------------------------------------
    def connect_to_nsqds(self, addresses: list[str]) -> None:
        """Connect to each broker now; raises ConnectionError naming the first that fails.
        A lost connection is dialled again every lookupd_poll_interval."""
        for address in addresses:
            if address not in self._nsqds:
                self._nsqds.append(address)
            self.connect(address)

    def connect_to_lookupds(self, addresses: list[str]) -> None:
        """Ask every lookupd now and every lookupd_poll_interval, and connect to every
        broker they list for the topic."""
        if not addresses:
            return
        self._lookupds.extend(a for a in addresses if a not in self._lookupds)
        self.query_lookupd()
        threading.Thread(target=self._poll_lookupds, name=f"lookupd {self._prefix}", daemon=True).start()

    def connect(self, address: str) -> bool:
        """One connection: IDENTIFY, SUB, RDY. False if already connected; ConnectionError
        if it fails."""
        with self._lock:
            if address in self.links or self.stopping:
                return False
            log.info("%s (%s) connecting to nsqd", self._prefix, address)
            link = Link(address, self.config, self._on_frame, self._on_close)
            try:
                link.open()
                ftype, data = link.request(wire.sub(self.topic, self.channel))
            except (OSError, EOFError, NSQError) as exc:
                link.close()
                raise ConnectionError(f"{self._prefix} ({address}) {exc}") from None
            if ftype == wire.FRAME_ERROR:
                link.close()
                raise ConnectionError(f"{self._prefix} ({address}) SUB failed: {error_text(data)}")
            self.links[address] = link
            self.held[link] = 0
            self.rdy[link] = 0
            self.close_wait[link] = threading.Event()
            link.start(f"nsq {address} {self._prefix}")
            self._share_rdy()
        return True

    def _share_rdy(self) -> None:
        """RDY max_in_flight / connections (at least 1, at most the broker's max_rdy_count)
        on every connection whose share changed. Caller holds self._lock."""
        links = list(self.links.values())
        if not links or self.stopping:
            return
        share = max(1, self.config.max_in_flight // len(links))
        for link in links:
            count = min(share, int(link.info.get("max_rdy_count") or share))
            if self.rdy.get(link) != count:
                self.rdy[link] = count
                link.send(wire.rdy(count))

    def query_lookupd(self) -> None:
        """Ask every lookupd for the topic's producers; connect to new ones."""
        found: dict[str, lookup.Producer] = {}
        for addr in self._lookupds:
            try:
                for p in lookup.lookup(addr, self.topic):
                    found.setdefault(p.tcp_address, p)
            except lookup.HTTPError as exc:
                log.error("%s error querying nsqlookupd (%s) - %s", self._prefix, addr, exc)
        for p in found.values():
            try:
                self.connect(p.tcp_address)
            except ConnectionError as exc:
                log.error("%s %s", self._prefix, exc)

    def _poll_lookupds(self) -> None:
        cfg = self.config
        if self._done.wait(random.random() * cfg.lookupd_poll_jitter * cfg.lookupd_poll_interval):
            return
        while not self._done.is_set():
            self._poke.wait(cfg.lookupd_poll_interval)
            self._poke.clear()
            if self._done.is_set():
                return
            self.query_lookupd()

    def _reconnect_later(self, address: str) -> None:
        def attempt() -> None:
            if self._done.is_set() or address not in self._nsqds:
                return
            try:
                self.connect(address)
            except ConnectionError as exc:
                log.error("%s %s", self._prefix, exc)
                self._reconnect_later(address)

        log.info("%s (%s) re-connecting in %.0fs", self._prefix, address, self.config.lookupd_poll_interval)
        timer = threading.Timer(self.config.lookupd_poll_interval, attempt)
        timer.daemon = True
        timer.start()

    # -- the reader threads' side ----------------------------------------------------------------
    def _on_frame(self, link: Link, ftype: int, data: bytes) -> None:
        if ftype == wire.FRAME_MESSAGE:
            msg = Message(wire.decode_message(data), self.topic, self, link)
            self.received += 1
            max_attempts = self.config.max_attempts
            if max_attempts > 0 and msg.attempts > max_attempts:
                log.warning("%s msg %s attempted %d times, giving up", self._prefix, msg.id.decode(errors="replace"),
                            msg.attempts)
                msg.finish()
                return
            self.queue.put(msg)
        elif ftype == wire.FRAME_RESPONSE:
            if data == b"CLOSE_WAIT":
                self.close_wait[link].set()
        else:
            log.error("%s (%s) protocol error - %s", self._prefix, link.address, error_text(data))

    def _on_close(self, link: Link) -> None:
        with self._lock:
            if self.links.get(link.address) is link:
                del self.links[link.address]
            self.rdy.pop(link, None)
            self.close_wait.pop(link).set()
            self._share_rdy()
        log.info("%s (%s) connection closed", self._prefix, link.address)
        if self.stopping:
            return
        if self._lookupds:
            self._poke.set()  # as go-nsq: ask a lookupd again at once
        elif link.address in self._nsqds:
            self._reconnect_later(link.address)

    # -- the caller's side ---------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> Message | None:
        """The next message (of this consumer, or of any sharing its queue), or None after
        `timeout` or a wake()."""
        return self.queue.get(timeout)

    def wake(self) -> None:
        """Make a waiting get() return None (safe in a signal handler)."""
        self.queue.wake()

    def starved(self) -> bool:
        """go-nsq's IsStarved: the caller holds (has taken and not answered) at least 85%
        of some connection's RDY, so that broker sends no more until it answers some.
        Messages still in the queue do not count: go-nsq's reader has not read them yet."""
        for link, rdy in list(self.rdy.items()):
            count = self.held.get(link, 0)
            if count > 0 and count >= int(rdy * 0.85) and not self.stopping:
                return True
        return False

    def stop(self) -> None:
        """CLS on every connection: no more deliveries, no more connecting. Messages in
        flight can still be finished until close()."""
        with self._lock:
            if self.stopping:
                return  # a second CLS is an error the broker closes the connection for
            self.stopping = True
            links = list(self.links.values())
        self._done.set()
        self._poke.set()
        for link in links:
            link.send(wire.CLS)

    def close(self, timeout: float = 5.0) -> None:
        """stop(), wait (up to `timeout`) for every CLOSE_WAIT, close the connections. What
        is still in flight goes back to the broker, which delivers it again."""
        self.stop()
        deadline = time.monotonic() + timeout
        links = list(self.close_wait.items())
        for link, event in links:
            event.wait(max(0.0, deadline - time.monotonic()))
        for link, _ in links:
            link.close()
        for link, _ in links:
            link.join(max(0.1, deadline - time.monotonic()))
