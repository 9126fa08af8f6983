"""locust Users that speak the NSQ TCP protocol V2 through nsqmp.client.

The wire format comes from nsqmp.client (wire.py encodes, sync.Connection reads frames and
answers heartbeats with NOP); this module only decides what to send and what to report.
locust runs every User in a gevent greenlet and monkey-patches the socket module before
this file is imported, so the blocking Connection yields instead of blocking.

What each User reports to locust's request event (one row per request_type and name):

| request_type | name | response_time | response_length |
|---|---|---|---|
| CONNECT | address | connect + IDENTIFY (+ SUB + RDY for consumers), ms | 0 |
| PUB, MPUB | topic | command sent until OK read, ms | message body bytes in the command |
| MSG | topic (first delivery), "topic redelivered" (attempts > 1) | message timestamp (set by the broker at publish) to the recv() that read it, ms | body bytes |
| FIN, REQ | topic/channel, or "topic/channel late" | failures only (these commands have no success reply) | 0 |
| CORRUPT | topic/channel | failure: a body this load test published came back altered | body bytes |

A FIN or REQ the broker refuses (E_FIN_FAILED, E_REQ_FAILED: "ID not in flight") is named
"topic/channel late" when this consumer sent it more than msg_timeout after the message
arrived (the client was too slow: the broker rightly timed it out), and "topic/channel"
otherwise (sent in time by the client's clock). The error text names how long after
arrival the command was sent.
"""
from __future__ import annotations

import random
import re
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass

from locust import User, constant, constant_throughput, task

from nsq_address import broker_address
from nsqmp.client import Connection, NSQError, wire

USER_AGENT = "nsqmp-locust/1"

# Bodies published here are: MAGIC, crc32 of the rest as 8 hex digits, a 16-hex-digit
# counter, filler. Consumers check the crc of every body that starts with MAGIC.
MAGIC = b"LCST"
_HEAD = len(MAGIC) + 8
MIN_MSG_SIZE = _HEAD + 16
_FILLER = bytes(random.Random(4150).getrandbits(8) for _ in range(1 << 16))


@dataclass
class Settings:
    """The custom command-line options, read once per User from parsed_options."""

    address: str = "127.0.0.1:4150"
    topic: str = "loadtest"
    channel: str = "loadtest"
    msg_size: int = 200
    batch_size: int = 10
    mpub_ratio: float = 0.5
    pub_rate: float = 20.0
    rdy: int = 10
    process_ms: float = 2.0
    req_ratio: float = 0.0
    req_delay_ms: int = 0
    timeout_ratio: float = 0.0
    msg_timeout_ms: int = 2000
    heartbeat_ms: int = 5000
    connect_timeout: float = 10.0

    @classmethod
    def from_options(cls, opts, host: str | None = None) -> Settings:
        """The settings of parsed_options; the broker is --nsqd-tcp-address if given, else
        locust's host (--host tcp://HOST:PORT, or the web UI's Host field)."""
        s = cls(
            address=broker_address(getattr(opts, "nsqd_tcp_address", None), host),
            topic=opts.topic, channel=opts.channel,
            msg_size=opts.msg_size, batch_size=opts.batch_size, mpub_ratio=opts.mpub_ratio,
            pub_rate=opts.pub_rate, rdy=opts.rdy, process_ms=opts.process_ms,
            req_ratio=opts.req_ratio, req_delay_ms=opts.req_delay_ms,
            timeout_ratio=opts.timeout_ratio, msg_timeout_ms=opts.msg_timeout_ms,
            heartbeat_ms=opts.heartbeat_ms,
        )
        s.check()
        return s

    def check(self) -> None:
        if self.msg_size < MIN_MSG_SIZE:
            raise ValueError(f"--msg-size must be at least {MIN_MSG_SIZE}")
        if self.batch_size < 1:
            raise ValueError("--batch-size must be at least 1")
        for name in ("mpub_ratio", "req_ratio", "timeout_ratio"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be between 0 and 1")
        if self.req_ratio + self.timeout_ratio > 1.0:
            raise ValueError("--req-ratio + --timeout-ratio must not exceed 1")
        if self.msg_timeout_ms < 1000:
            raise ValueError("--msg-timeout-ms must be at least 1000 (nsqd's lower bound)")
        if self.heartbeat_ms < 1000:
            raise ValueError("--heartbeat-ms must be at least 1000 (nsqd's lower bound)")


def make_body(size: int, counter: int) -> bytes:
    rest = b"%016x" % (counter & 0xFFFF_FFFF_FFFF_FFFF)
    need = size - _HEAD - len(rest)
    while need > 0:
        chunk = _FILLER[:need]
        rest += chunk
        need -= len(chunk)
    return MAGIC + b"%08x" % zlib.crc32(rest) + rest


def body_ok(body: bytes) -> bool:
    """False only for a body of this load test whose checksum does not match."""
    if not body.startswith(MAGIC):
        return True
    try:
        want = int(body[len(MAGIC):_HEAD], 16)
    except ValueError:
        return False
    return zlib.crc32(body[_HEAD:]) == want


class NSQUser(User):
    """Common part: settings, the connection, and reporting to locust."""

    abstract = True
    wait_time = constant(0)

    def __init__(self, environment) -> None:
        super().__init__(environment)
        opts = environment.parsed_options
        # self.host: locust's --host (or the web UI's), which the runner sets on the class
        if opts is not None:
            self.cfg = Settings.from_options(opts, self.host)
        else:
            self.cfg = Settings(address=broker_address(None, self.host))
        self.conn: Connection | None = None

    # -- reporting ------------------------------------------------------------------------
    def report(self, request_type: str, name: str, response_time: float, length: int = 0,
               exception: BaseException | None = None) -> None:
        self.environment.events.request.fire(
            request_type=request_type, name=name, response_time=response_time,
            response_length=length, exception=exception, context={},
        )

    # -- connection -----------------------------------------------------------------------
    def handshake(self, conn: Connection) -> None:
        conn.identify(user_agent=USER_AGENT, heartbeat_interval=self.cfg.heartbeat_ms,
                      msg_timeout=self.cfg.msg_timeout_ms)

    def connection(self) -> Connection | None:
        """The open connection, or a new one (reported as CONNECT); None if that failed."""
        if self.conn is not None:
            return self.conn
        start = time.perf_counter()
        conn = None
        try:
            conn = Connection.connect(self.cfg.address, timeout=self.cfg.connect_timeout)
            self.handshake(conn)
        except (OSError, EOFError, NSQError) as exc:
            if conn is not None:
                conn.close()
            self.report("CONNECT", self.cfg.address, _ms(start), exception=exc)
            time.sleep(1.0)  # don't spin on a broker that is down
            return None
        self.report("CONNECT", self.cfg.address, _ms(start))
        self.conn = conn
        return conn

    def drop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None

    def on_stop(self) -> None:
        self.drop()


class Publisher(NSQUser):
    """PUB one message, or MPUB --batch-size messages (a --mpub-ratio share of publishes),
    --pub-rate publish commands per second (0: as fast as the broker answers)."""

    abstract = True  # the locustfile declares the concrete classes and their weights

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self.counter = random.getrandbits(32) << 24
        self._pace = constant_throughput(self.cfg.pub_rate) if self.cfg.pub_rate > 0 else constant(0)

    def wait_time(self):  # type: ignore[override]
        return self._pace(self)

    def on_start(self) -> None:
        self.connection()

    @task
    def publish(self) -> None:
        conn = self.connection()
        if conn is None:
            return
        cfg = self.cfg
        mpub = cfg.batch_size > 1 and random.random() < cfg.mpub_ratio
        count = cfg.batch_size if mpub else 1
        bodies = []
        for _ in range(count):
            self.counter += 1
            bodies.append(make_body(cfg.msg_size, self.counter))
        start = time.perf_counter()
        exception = None
        try:
            if mpub:
                conn.mpub(cfg.topic, bodies)
            else:
                conn.pub(cfg.topic, bodies[0])
        except (NSQError, OSError, EOFError) as exc:
            exception = exc
            self.drop()  # E_* errors on PUB/MPUB are fatal: the broker closes the connection
        self.report("MPUB" if mpub else "PUB", cfg.topic, _ms(start), count * cfg.msg_size, exception)


class Consumer(NSQUser):
    """SUB --topic --channel with RDY --rdy; for each message sleep --process-ms, then FIN
    it, REQ it (--req-ratio share), or leave it to time out (--timeout-ratio share)."""

    abstract = True

    READ_TIMEOUT = 1.0

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self.pair = f"{self.cfg.topic}/{self.cfg.channel}"
        self.let_time_out = 0
        # message id -> (arrived, FIN/REQ sent), monotonic seconds; only to explain refusals
        self.answered: OrderedDict[bytes, tuple[float, float]] = OrderedDict()
        self.keep_answered = 3 * self.cfg.msg_timeout_ms / 1000 + 10
        self.recv_ns, self.recv_mono = 0, 0.0

    def handshake(self, conn: Connection) -> None:
        super().handshake(conn)
        conn.sub(self.cfg.topic, self.cfg.channel, rdy=self.cfg.rdy)
        conn.sock.settimeout(self.READ_TIMEOUT)

    def on_start(self) -> None:
        self.connection()

    @task
    def consume(self) -> None:
        conn = self.connection()
        if conn is None:
            return
        fresh = not conn.pending  # else the frame came with an earlier recv()
        try:
            frame = conn.read_frame()  # answers _heartbeat_ with NOP itself
        except TimeoutError:
            return  # nothing to read for a while: not a failure
        except (OSError, EOFError) as exc:
            self.report("CONNECT", self.cfg.address, 0, exception=exc)
            self.drop()
            return
        if fresh:
            self.recv_ns, self.recv_mono = time.time_ns(), time.monotonic()
        if frame.type == wire.FRAME_MESSAGE:
            self.handle(conn, frame.message)
        elif frame.type == wire.FRAME_ERROR:
            self.handle_error(frame.data.decode(errors="replace"))
        # other responses (CLOSE_WAIT, a stray OK) need nothing

    def handle(self, conn: Connection, msg: wire.Message) -> None:
        """Report, check, "process", then FIN, REQ or nothing (left to time out)."""
        cfg = self.cfg
        arrived = self.recv_mono  # when recv() returned the bytes of this frame
        name = cfg.topic if msg.attempts <= 1 else f"{cfg.topic} redelivered"
        latency_ms = max(0, self.recv_ns - msg.timestamp) / 1e6
        self.report("MSG", name, latency_ms, len(msg.body))
        if not body_ok(msg.body):
            self.report("CORRUPT", self.pair, 0, len(msg.body),
                        ValueError(f"body checksum mismatch in message {msg.id.decode(errors='replace')}"))
        if cfg.process_ms > 0:
            time.sleep(cfg.process_ms / 1000)
        roll = random.random()
        if roll < cfg.timeout_ratio:
            self.let_time_out += 1  # neither FIN nor REQ: the broker requeues it after msg_timeout
            return
        if roll < cfg.timeout_ratio + cfg.req_ratio:
            kind, data = "REQ", wire.req(msg.id, cfg.req_delay_ms)
        else:
            kind, data = "FIN", wire.fin(msg.id)
        try:
            conn.send(data)
        except OSError as exc:
            self.report(kind, self.pair, 0, exception=exc)
            self.drop()
            return
        now = time.monotonic()
        self.answered[msg.id] = (arrived, now)
        self.answered.move_to_end(msg.id)
        while self.answered:
            oldest = next(iter(self.answered.values()))
            if now - oldest[1] < self.keep_answered:
                break
            self.answered.popitem(last=False)

    def handle_error(self, text: str) -> None:
        code = text.split(" ", 1)[0]
        if code in ("E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"):
            # non-fatal: the connection stays open; one failure row per kind, not per ID
            kind = code[2:].split("_", 1)[0]
            words = text.split(" ")
            msg_id = words[2].encode() if len(words) > 2 else b""
            generic = _ID.sub("<id>", text)
            name = self.pair
            times = self.answered.pop(msg_id, None)
            if times is not None:
                held_ms = (times[1] - times[0]) * 1000
                if held_ms > self.cfg.msg_timeout_ms:
                    name = f"{self.pair} late"
                generic += f" (sent {_bucket(held_ms)} after arrival)"
            self.report(kind, name, 0, exception=NSQError(generic))
            return
        # every other error is fatal: the broker closes the connection
        self.report("CONNECT", self.cfg.address, 0, exception=NSQError(text))
        self.drop()


_ID = re.compile(r"\b[0-9a-f]{16}\b")


def _bucket(ms: float) -> str:
    """A coarse duration, so that locust groups the failures into a few rows."""
    for limit in (10, 100, 500, 1000, 2000, 5000, 10000):
        if ms < limit:
            return f"< {limit} ms"
    return ">= 10 s"


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000
