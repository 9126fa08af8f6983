"""The delivery soak: at-least-once under everything a consumer may do, at random.

Two producers publish uniquely numbered messages (PUB, MPUB, DPUB with defers up to
1.5 s) for ``--soak-seconds`` (15 s by default so ``make test`` stays short; the full
soak is ``.venv/bin/python -m pytest -s tests/integration/test_soak.py --soak-seconds 60``).
Four raw-wire consumers (the project's client, one thread each) and one pynsq Reader share
one channel with msg_timeout 1 s and, message by message, FIN, REQ 0, REQ with a small
delay, TOUCH through a hold longer than msg_timeout and then FIN, let it time out, or
disconnect with messages in flight and reconnect. Every 4 s the timer process gets
kill -9 (with ``--soak-kill-routers``, every other kill hits a router instead; the /stats
counter checks are then skipped, as a killed router's counters start again). Then everyone FINs until the channel is empty, and the tally must show every
published message finished at least once.

Whether a FIN, REQ or TOUCH was accepted is known exactly: a refusal is an error frame
naming the message ID, and a FIN of an ID that is never in flight (the fence) comes back
E_FIN_FAILED after every earlier answer of that connection, since one router handles a
connection's commands and answers in order.
"""
from __future__ import annotations

import asyncio
import collections
import os
import random
import signal
import socket
import threading
import time

import nsq
import pytest

from nsqmp.client import Connection, NSQError
from nsqmp.client import wire
from tests.harness import await_for, wait_for

TOPIC, CHANNEL = "soak", "ch"
PRODUCERS = 2
RAW_CONSUMERS = 4
RATE = 150  # messages per second per producer
MAX_PER_PRODUCER = 50_000  # count bound, whatever the run length
MSG_TIMEOUT_MS = 1000  # the least IDENTIFY accepts
RDY = 20
TIMER_KILL_EVERY = 4.0  # seconds between kill -9 of the timer process while publishing
DRAIN_LIMIT = 60.0  # seconds to empty the channel once publishing has stopped
FENCE_ID = b"0" * 16


class Tally:
    """Everything the clients saw and did, merged across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.published: set[int] = set()
        self.ops = collections.Counter()  # PUB / MPUB / DPUB commands answered OK
        self.deliveries = collections.Counter()  # number -> times delivered
        self.fin_ok = collections.Counter()  # number -> FINs the broker accepted
        self.actions = collections.Counter()  # what consumers chose
        self.refused = collections.Counter()  # E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED
        self.req_ok = 0
        self.disconnects = 0
        self.timer_kills = 0
        self.router_kills = 0
        self.errors: list[str] = []  # anything unexpected, reported at the end
        self.final_sessions: list["Session"] = []


class Session:
    """One connection's accounting: what it received and which answers were accepted."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.messages = 0
        self.numbers: dict[bytes, int] = {}  # message ID -> number
        self.sent: collections.Counter = collections.Counter()  # (cmd, id) -> sent
        self.failed: collections.Counter = collections.Counter()  # (cmd, id) -> refused

    def refusal(self, data: bytes) -> bool:
        """Record an E_FIN/REQ/TOUCH_FAILED frame; True if it was the fence."""
        code, cmd, msg_id = data.split(b" ", 3)[:3]
        if code not in (b"E_FIN_FAILED", b"E_REQ_FAILED", b"E_TOUCH_FAILED"):
            raise AssertionError(f"{self.name}: unexpected error {data!r}")
        if msg_id == FENCE_ID:
            return True
        self.failed[(cmd.decode(), msg_id)] += 1
        return False

    def ok(self, cmd: str) -> collections.Counter:
        """Accepted commands of this kind, by message number."""
        out: collections.Counter = collections.Counter()
        for (c, msg_id), n in self.sent.items():
            if c == cmd:
                out[self.numbers[msg_id]] += n - self.failed[(c, msg_id)]
        return out

    def settle_into(self, tally: Tally) -> None:
        with tally.lock:
            tally.fin_ok.update(self.ok("FIN"))
            tally.req_ok += sum(self.ok("REQ").values())
            for (cmd, _), n in self.failed.items():
                tally.refused[cmd] += n


class Run:
    """The clock and the phases every thread follows."""

    def __init__(self, seconds: float) -> None:
        self.publish_until = time.monotonic() + seconds
        self.draining = threading.Event()  # publishing is over: FIN everything
        self.fence = threading.Event()  # the channel is empty: fence, report, wait
        self.done = threading.Event()  # stats compared: close

    def publishing(self) -> bool:
        return time.monotonic() < self.publish_until


def producer(address: str, index: int, run: Run, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    seq = 0
    started = time.monotonic()
    try:
        with Connection.connect(address) as c:
            c.identify()
            while run.publishing() and seq < MAX_PER_PRODUCER:
                op = rng.choices(("PUB", "MPUB", "DPUB"), (5, 3, 2))[0]
                count = rng.randint(2, 20) if op == "MPUB" else 1
                count = min(count, MAX_PER_PRODUCER - seq)
                numbers = [index * 10_000_000 + seq + i for i in range(count)]
                bodies = [b"%010d" % n for n in numbers]
                if op == "PUB":
                    c.pub(TOPIC, bodies[0])
                elif op == "MPUB":
                    c.mpub(TOPIC, bodies)
                else:
                    c.send(wire.dpub(TOPIC, rng.randint(10, 1500), bodies[0]))
                    c.expect_ok()
                seq += count
                with tally.lock:
                    tally.published.update(numbers)
                    tally.ops[op] += 1
                ahead = seq / RATE - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(min(ahead, 0.5))  # pacing: RATE messages a second
    except Exception as exc:  # reported by the test, not lost in a thread
        with tally.lock:
            tally.errors.append(f"producer {index}: {exc!r}")


def killer(broker, run: Run, tally: Tally, routers: bool) -> None:
    """kill -9 the timer process now and then (its replacement must rebuild every deadline),
    and with ``routers`` every other time a router (rebuilt from its files)."""
    try:
        kills = 0
        while run.publishing():
            # pacing: a kill every TIMER_KILL_EVERY seconds while publishing
            time.sleep(min(TIMER_KILL_EVERY, max(0.0, run.publish_until - time.monotonic())))
            if not run.publishing():
                return
            victim = "nsqmp timer" if not routers or kills % 2 == 0 else f"nsqmp router {kills // 2 % 2}"
            kills += 1
            old = broker.children()[victim]
            os.kill(old, signal.SIGKILL)
            wait_for(lambda: broker.children().get(victim) not in (None, old), 15, interval=0.02,
                     what=f"a new {victim}")
            with tally.lock:
                if victim == "nsqmp timer":
                    tally.timer_kills += 1
                else:
                    tally.router_kills += 1
    except Exception as exc:
        with tally.lock:
            tally.errors.append(f"timer killer: {exc!r}")


class RawConsumer(threading.Thread):
    """A consumer on the project's wire client that does something random with each message."""

    def __init__(self, address: str, index: int, run: Run, tally: Tally, seed: int) -> None:
        super().__init__(name=f"soak-raw-{index}", daemon=True)
        self.address, self.index, self.run_, self.tally = address, index, run, tally
        self.rng = random.Random(seed)
        self.generation = 0
        self.last_disconnect = time.monotonic()

    def run(self) -> None:
        try:
            while not self.run_.done.is_set():
                if self.session():
                    return
        except Exception as exc:
            with self.tally.lock:
                self.tally.errors.append(f"{self.name}: {exc!r}")

    def _choose(self) -> str:
        if self.run_.draining.is_set():
            return "fin"
        if time.monotonic() - self.last_disconnect > 1.0 and self.rng.random() < 0.01:
            return "disconnect"
        return self.rng.choices(("fin", "req0", "req_delay", "touch_fin", "timeout"),
                                (60, 8, 8, 8, 12))[0]

    def session(self) -> bool:
        """One connection, until it disconnects (False) or the run ends (True)."""
        name = f"raw{self.index}-{self.generation}"
        self.generation += 1
        s = Session(name)
        c = Connection.connect(self.address)
        try:
            c.identify(client_id=name, hostname=name, msg_timeout=MSG_TIMEOUT_MS)
            c.sub(TOPIC, CHANNEL, rdy=RDY)
            c.sock.settimeout(0.05)
            held: dict[bytes, list[float]] = {}  # id -> [next touch, fin at]
            while True:
                now = time.monotonic()
                for msg_id, (touch_at, fin_at) in list(held.items()):
                    if now >= fin_at or self.run_.draining.is_set():
                        del held[msg_id]
                        self._send(c, s, "FIN", msg_id)
                    elif now >= touch_at:
                        held[msg_id][0] = now + 0.4
                        self._send(c, s, "TOUCH", msg_id)
                if self.run_.fence.is_set():
                    self._fence(c, s)
                    s.settle_into(self.tally)
                    with self.tally.lock:
                        self.tally.final_sessions.append(s)
                    self.run_.done.wait(DRAIN_LIMIT)
                    return True
                frame = self._read(c)
                if frame is None:
                    continue
                if frame.type == wire.FRAME_ERROR:
                    s.refusal(frame.data)
                    continue
                m = frame.message
                self._delivered(s, m)
                action = self._choose()
                with self.tally.lock:
                    self.tally.actions[action] += 1
                if action == "fin":
                    self._send(c, s, "FIN", m.id)
                elif action == "req0":
                    self._send(c, s, "REQ", m.id, 0)
                elif action == "req_delay":
                    self._send(c, s, "REQ", m.id, self.rng.randint(20, 300))
                elif action == "touch_fin":  # a hold longer than msg_timeout, kept alive by TOUCH
                    held[m.id] = [now + 0.4, now + self.rng.uniform(1.1, 1.6)]
                elif action == "disconnect":
                    c.send(wire.rdy(0))
                    self._fence(c, s)  # what arrives meanwhile stays in flight
                    s.settle_into(self.tally)
                    with self.tally.lock:
                        self.tally.disconnects += 1
                    self.last_disconnect = time.monotonic()
                    return False
                # "timeout": no answer at all
        finally:
            c.close()

    def _delivered(self, s: Session, m: wire.Message) -> None:
        n = int(m.body)
        s.numbers[m.id] = n
        s.messages += 1
        with self.tally.lock:
            self.tally.deliveries[n] += 1

    @staticmethod
    def _send(c: Connection, s: Session, cmd: str, msg_id: bytes, delay: int = 0) -> None:
        s.sent[(cmd, msg_id)] += 1
        c.send(wire.fin(msg_id) if cmd == "FIN" else wire.touch(msg_id) if cmd == "TOUCH"
               else wire.req(msg_id, delay))

    @staticmethod
    def _read(c: Connection):
        try:
            return c.read_frame()
        except socket.timeout:
            return None

    def _fence(self, c: Connection, s: Session) -> None:
        """FIN an ID never in flight and read until its refusal: every earlier answer is in."""
        c.send(wire.fin(FENCE_ID))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            frame = self._read(c)
            if frame is None:
                continue
            if frame.type == wire.FRAME_ERROR:
                if s.refusal(frame.data):
                    return
            else:
                self._delivered(s, frame.message)
        raise AssertionError(f"{s.name}: the fence never came back")


class _FenceReader(nsq.Reader):
    """pynsq Reader that hands error frames to its session."""

    def __init__(self, *args, session: Session, fenced: threading.Event, tally: Tally, **kwargs) -> None:
        self.session, self.fenced, self.tally = session, fenced, tally
        super().__init__(*args, **kwargs)

    def _on_connection_error(self, conn, error, **kwargs):
        data = error.args[0] if error.args else b""
        if isinstance(error, nsq.protocol.Error) and isinstance(data, bytes) and data.startswith(b"E_"):
            try:
                if self.session.refusal(data):
                    self.fenced.set()
                    return None
            except AssertionError as exc:  # an unexpected error frame: the test reports it
                with self.tally.lock:
                    self.tally.errors.append(f"pynsq consumer: {exc}")
        return super()._on_connection_error(conn, error, **kwargs)


def pynsq_consumer(address: str, run: Run, tally: Tally, seed: int) -> None:
    """A pynsq Reader (one connection, never disconnected) doing the same at random."""
    rng = random.Random(seed)
    s = Session("pynsq-soak")
    fenced = threading.Event()
    holding: set[bytes] = set()  # ids of the touch-and-holds not finished yet

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def on_message(m: nsq.Message) -> None:
            m.enable_async()
            n = int(m.body)
            s.numbers[m.id] = n
            s.messages += 1
            action = "fin" if run.draining.is_set() else \
                rng.choices(("fin", "req0", "req_delay", "touch_fin", "timeout"), (60, 8, 8, 8, 12))[0]
            with tally.lock:
                tally.deliveries[n] += 1
                tally.actions[action] += 1
            if action == "fin":
                s.sent[("FIN", m.id)] += 1
                m.finish()
            elif action in ("req0", "req_delay"):
                s.sent[("REQ", m.id)] += 1
                m.requeue(time_ms=0 if action == "req0" else rng.randint(20, 300), backoff=False)
            elif action == "touch_fin":
                def touch() -> None:
                    if not m.has_responded():
                        s.sent[("TOUCH", m.id)] += 1
                        m.touch()

                def finish() -> None:
                    s.sent[("FIN", m.id)] += 1
                    m.finish()
                    holding.discard(m.id)
                holding.add(m.id)
                for t in (0.4, 0.8):
                    loop.call_later(t, touch)
                loop.call_later(rng.uniform(1.1, 1.5), finish)

        reader = _FenceReader(TOPIC, CHANNEL, on_message, session=s, fenced=fenced, tally=tally,
                              nsqd_tcp_addresses=[address], max_in_flight=RDY, max_tries=0,
                              msg_timeout=MSG_TIMEOUT_MS / 1000, hostname=s.name)
        await await_for(run.fence.is_set, run.publish_until - time.monotonic() + DRAIN_LIMIT + 30,
                        what="pynsq: the fence")
        await await_for(lambda: not holding, what="pynsq: the touch-and-holds to end with their FINs")
        (conn,) = reader.conns.values()
        conn.send(nsq.protocol.finish(FENCE_ID))
        await await_for(fenced.is_set, 15, interval=0.02, what="pynsq: the fence to come back")
        s.settle_into(tally)
        with tally.lock:
            tally.final_sessions.append(s)
        await await_for(run.done.is_set, DRAIN_LIMIT, what="pynsq: the end of the run")
        reader.connect_to_nsqd = lambda *a, **k: None
        reader.close()
        await await_for(lambda: not reader.conns, what="pynsq to see its connection closed")

    try:
        asyncio.run(main())
    except Exception as exc:
        with tally.lock:
            tally.errors.append(f"pynsq consumer: {exc!r}")


def _channel(broker) -> dict | None:
    for t in broker.stats(topic=TOPIC)["topics"]:
        for ch in t["channels"]:
            if ch["channel_name"] == CHANNEL:
                return ch | {"topic_depth": t["depth"]}
    return None


def _check_exact(ch: dict, tally: Tally, published: set[int], deliveries: int, duplicate_fins: int) -> None:
    """Without router kills, the broker's counters must match the clients exactly."""
    # a FIN is accepted once per message: the message leaves the channel with it
    assert duplicate_fins == 0
    # /stats agrees with the clients
    assert ch["message_count"] == len(published), ch["message_count"]
    # every delivery ended exactly one way: FIN, REQ or disconnect (requeue_count), timeout
    assert ch["requeue_count"] + ch["timeout_count"] + sum(tally.fin_ok.values()) == deliveries, ch
    assert ch["requeue_count"] >= tally.req_ok
    clients = {c["client_id"]: c for c in ch["clients"]}
    assert set(clients) == {s.name for s in tally.final_sessions}, clients.keys()
    for s in tally.final_sessions:
        c = clients[s.name]
        got = (c["message_count"], c["finish_count"], c["requeue_count"], c["in_flight_count"])
        want = (s.messages, sum(s.ok("FIN").values()), sum(s.ok("REQ").values()), 0)
        assert got == want, (s.name, got, want)


@pytest.mark.slow
def test_soak_every_published_message_is_finished(broker, request):
    seconds = request.config.getoption("--soak-seconds")
    kill_routers = request.config.getoption("--soak-kill-routers")
    tally = Tally()
    seed = random.randrange(1 << 30)
    print(f"\nsoak: {seconds:.0f} s of publishing, seed {seed}")
    assert broker.http("POST", f"/topic/create?topic={TOPIC}")[0] == 200
    assert broker.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")[0] == 200
    started = time.monotonic()
    run = Run(seconds)
    consumers = [RawConsumer(broker.tcp_address, k, run, tally, seed + k) for k in range(RAW_CONSUMERS)]
    consumers.append(threading.Thread(target=pynsq_consumer, name="soak-pynsq", daemon=True,
                                      args=(broker.tcp_address, run, tally, seed + 100)))
    producers = [threading.Thread(target=producer, name=f"soak-producer-{p}", daemon=True,
                                  args=(broker.tcp_address, p, run, tally, seed + 200 + p))
                 for p in range(PRODUCERS)]
    producers.append(threading.Thread(target=killer, name="soak-killer", daemon=True,
                                      args=(broker, run, tally, kill_routers)))
    for t in consumers + producers:
        t.start()
    for t in producers:
        t.join(seconds + 30)
        assert not t.is_alive(), "a producer did not stop"
    published_at = time.monotonic()
    run.draining.set()

    # drain: the channel is empty, nothing in flight or deferred, twice in a row
    empty = 0
    deadline = time.monotonic() + DRAIN_LIMIT
    while empty < 2:
        assert not tally.errors, tally.errors
        assert time.monotonic() < deadline, f"not drained after {DRAIN_LIMIT}s: {_channel(broker)}"
        ch = _channel(broker)
        quiet = ch is not None and (ch["depth"], ch["in_flight_count"], ch["deferred_count"],
                                    ch["topic_depth"]) == (0, 0, 0, 0)
        empty = empty + 1 if quiet else 0
        time.sleep(0.2)  # polling: quiet twice in a row, 0.2 s apart, is the condition
    drained_at = time.monotonic()
    run.fence.set()
    wait_for(lambda: len(tally.final_sessions) >= len(consumers) or tally.errors, 30,
             what="the consumers to fence")
    assert not tally.errors, tally.errors

    # the tally
    published = tally.published
    finished = {n for n, k in tally.fin_ok.items() if k > 0}
    lost = published - finished
    unknown = finished - published
    duplicate_fins = sum(k - 1 for k in tally.fin_ok.values() if k > 1)
    delivered_twice = sum(1 for n in published if tally.deliveries[n] > 1)
    deliveries = sum(tally.deliveries.values())
    ch = _channel(broker)
    print(f"soak tally: published {len(published)} ({dict(tally.ops)}), finished {len(finished)}, "
          f"lost {len(lost)}, duplicate FINs accepted {duplicate_fins}; deliveries {deliveries}, "
          f"messages delivered more than once {delivered_twice} (redeliveries "
          f"{deliveries - len(published)}); actions {dict(tally.actions)}; disconnects "
          f"{tally.disconnects}; timer kills {tally.timer_kills}, router kills {tally.router_kills}; refused {dict(tally.refused)}; channel requeue_count "
          f"{ch['requeue_count']} timeout_count {ch['timeout_count']}; publish {published_at - started:.1f}s, "
          f"drain {drained_at - published_at:.1f}s, total {time.monotonic() - started:.1f}s")
    try:
        assert published and not lost, f"lost {len(lost)}: {sorted(lost)[:20]}"
        assert not unknown, sorted(unknown)[:20]
        assert tally.disconnects > 0 and tally.actions["timeout"] > 0 and tally.actions["touch_fin"] > 0
        assert tally.timer_kills + tally.router_kills >= int(seconds // TIMER_KILL_EVERY) - 1
        assert (ch["depth"], ch["in_flight_count"], ch["deferred_count"], ch["topic_depth"]) == (0, 0, 0, 0)
        # after a router kill, FINs not yet in its ack log are redelivered (allowed) and
        # its counters start again: only the no-loss checks above apply
        if not kill_routers:
            _check_exact(ch, tally, published, deliveries, duplicate_fins)
    finally:
        run.done.set()
        for t in consumers:
            t.join(10)
    assert not tally.errors, tally.errors
