"""Delivery guarantees of the timer process, driven by real client libraries.

Every test here talks to the broker through pynsq 0.9.1 (tornado) or gnsq (gevent), as
users do: timeouts with attempts counting, REQ with a delay and its clamp, TOUCH and its
cap, DPUB and /pub?defer= in due-time order and to the channels that existed at publish,
requeue on disconnect, CLS, kill -9 of the timer process, and /stats counters after a
concurrent run. The pynsq readers answer each message themselves (``enable_async``), so a
test reads like a transcript of what the consumer did.
"""
from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import time

import nsq
import pytest

from nsqmp.client import Connection, wire
from tests.harness import await_for, wait_for

FENCE_ID = b"0" * 16  # no message has this ID: FIN of it comes back E_FIN_FAILED, in order


class _Reader(nsq.Reader):
    """A pynsq Reader that keeps the error frames it receives (E_FIN_FAILED, ...)."""

    def __init__(self, *args, errors: list[bytes], **kwargs) -> None:
        self.error_frames = errors
        super().__init__(*args, **kwargs)

    def _on_connection_error(self, conn, error, **kwargs):
        if isinstance(error, nsq.protocol.Error) and error.args and isinstance(error.args[0], bytes):
            self.error_frames.append(error.args[0])
        return super()._on_connection_error(conn, error, **kwargs)


class Inbox:
    """A pynsq Reader on one nsqd whose messages the test answers itself."""

    def __init__(self, address: str, topic: str, channel: str, max_in_flight: int = 10, **conn) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.errors: list[bytes] = []
        self.topic, self.channel = topic, channel
        self.name = conn.setdefault("hostname", f"inbox-{random.getrandbits(32):08x}")
        self.reader = _Reader(topic, channel, self._on_message, errors=self.errors,
                              nsqd_tcp_addresses=[address], max_in_flight=max_in_flight,
                              max_tries=0, **conn)

    def _on_message(self, message: nsq.Message) -> None:
        message.enable_async()
        self.queue.put_nowait((time.monotonic(), message))

    async def get(self, timeout: float = 10.0) -> tuple[float, nsq.Message]:
        """(arrival time, message) of the next delivery."""
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def nothing_for(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # the time is what is tested: nothing may come within it
        assert self.queue.empty(), f"unexpected delivery: {self.queue.get_nowait()[1].body!r}"

    async def subscribed(self, broker, timeout: float = 10.0) -> None:
        """Wait until /stats shows this reader on its channel with credit."""
        await await_for(lambda: (c := self.client(broker)) is not None and c["ready_count"] != 0, timeout,
                        what=f"{self.name} to subscribe")

    def client(self, broker) -> dict | None:
        for c in channel_stats(broker, self.topic, self.channel, missing_ok=True).get("clients", []):
            if c["client_id"] == self.name:
                return c
        return None

    def close(self) -> None:
        self.reader.connect_to_nsqd = lambda *a, **k: None  # pynsq would reconnect after 15 s
        self.reader.close()


def channel_stats(broker, topic: str, channel: str, missing_ok: bool = False) -> dict:
    for t in broker.stats(topic=topic)["topics"]:
        for ch in t["channels"]:
            if ch["channel_name"] == channel:
                return ch
    if missing_ok:
        return {}
    raise AssertionError(f"{topic}/{channel} not in /stats")


def topic_stats(broker, topic: str) -> dict:
    (t,) = [t for t in broker.stats(topic=topic)["topics"] if t["topic_name"] == topic]
    return t


async def settle(broker, topic: str, channel: str, timeout: float = 10.0, **want) -> dict:
    """Poll the channel's /stats until every given field has the wanted value."""
    def settled() -> dict | None:
        ch = channel_stats(broker, topic, channel, missing_ok=True)
        return ch if ch and all(ch.get(k) == v for k, v in want.items()) else None

    return await await_for(settled, timeout, what=lambda: f"{topic}/{channel}: wanted {want}, have "
                           f"{channel_stats(broker, topic, channel, missing_ok=True)}")


async def publish(broker, topic: str, bodies: list[bytes], defers: list[int] | None = None) -> None:
    """Publish with a pynsq Writer (PUB, or DPUB when defers are given); every answer OK."""
    writer = nsq.Writer([broker.tcp_address])
    await await_for(lambda: writer.conns, what="the pynsq Writer's connection")
    acks: list = []

    def cb(conn, data):
        acks.append(data)

    for i, body in enumerate(bodies):
        if defers is None:
            writer.pub(topic, body, callback=cb)
        else:
            writer.dpub(topic, defers[i], body, callback=cb)
    await await_for(lambda: len(acks) >= len(bodies), interval=0.01, what=lambda: f"every answer, have {acks}")
    assert all(a == b"OK" for a in acks), acks
    for conn in writer.conns.values():
        conn.close()


def run(coro) -> None:
    asyncio.run(coro)


# -- timeouts -----------------------------------------------------------------------------------

def fire_lateness(broker) -> dict:
    """nsqmp's own /stats block: how late the routers took each kind of deadline."""
    return broker.stats(include_timer="true", include_clients="false")["nsqmp_fire_lateness"]


def test_timeout_redelivers_with_attempts_and_timeout_count(broker):
    """Not answered within msg_timeout (IDENTIFY): back with attempts + 1, timeout_count + 1."""
    async def scenario():
        inbox = Inbox(broker.tcp_address, "t_timeout", "ch", msg_timeout=1)
        await inbox.subscribed(broker)
        fired_before = fire_lateness(broker)["timeouts"]["count"]
        await publish(broker, "t_timeout", [b"a", b"b"])
        first = {}
        for _ in range(2):
            at, m = await inbox.get()
            assert m.attempts == 1
            first[m.body] = (at, m.id)
        # a: never answered twice; b: answered on its second delivery
        seen: dict[bytes, list[int]] = {b"a": [], b"b": []}
        while len(seen[b"a"]) < 2 or not seen[b"b"]:
            at, m = await inbox.get(timeout=5)
            assert m.id == first[m.body][1]
            seen[m.body].append(m.attempts)
            assert at - first[m.body][0] >= 0.9 * (m.attempts - 1), (m.body, m.attempts)
            if m.body == b"b" or m.attempts == 3:
                m.finish()
        assert seen == {b"a": [2, 3], b"b": [2]}, seen
        ch = await settle(broker, "t_timeout", "ch", in_flight_count=0, depth=0)
        assert (ch["timeout_count"], ch["requeue_count"], ch["message_count"]) == (3, 0, 2), ch
        client = inbox.client(broker)
        assert (client["message_count"], client["finish_count"], client["in_flight_count"]) == (5, 2, 0)
        # the routers count each timed-out message in /stats?include_timer=true
        late = fire_lateness(broker)["timeouts"]
        assert late["count"] - fired_before == 3, late
        assert 0 <= late["p50"] <= late["p99"] <= late["max"], late
        assert inbox.errors == []
        inbox.close()

    run(scenario())


def test_default_msg_timeout_is_the_brokers(make_broker):
    """A client that asks for no msg_timeout gets --msg-timeout."""
    b = make_broker("--msg-timeout", "1s")

    async def scenario():
        inbox = Inbox(b.tcp_address, "t_default", "ch")
        await inbox.subscribed(b)
        await publish(b, "t_default", [b"x"])
        t1, m1 = await inbox.get()
        t2, m2 = await inbox.get(timeout=5)
        assert (m2.id, m2.attempts) == (m1.id, 2) and t2 - t1 >= 0.9
        m2.finish()
        await settle(b, "t_default", "ch", in_flight_count=0, timeout_count=1)
        inbox.close()

    run(scenario())


def test_msg_timeout_above_max_msg_timeout_is_refused(make_broker):
    b = make_broker("--max-msg-timeout", "2s", "--msg-timeout", "1s")

    async def scenario():
        inbox = Inbox(b.tcp_address, "t_max", "ch", msg_timeout=3)
        await await_for(lambda: inbox.errors, what="the IDENTIFY error")
        assert inbox.errors[0] == b"E_BAD_BODY IDENTIFY msg timeout (3000) is invalid", inbox.errors
        inbox.close()

    run(scenario())


# -- REQ ------------------------------------------------------------------------------------------

def test_req_zero_at_once_and_req_with_delay_not_before_it(broker):
    async def scenario():
        inbox = Inbox(broker.tcp_address, "t_req", "ch")
        await inbox.subscribed(broker)
        await publish(broker, "t_req", [b"r"])
        _, m = await inbox.get()
        m.requeue(time_ms=0, backoff=False)
        _, m = await inbox.get(timeout=2)
        assert m.attempts == 2
        sent = time.monotonic()
        m.requeue(time_ms=800, backoff=False)
        ch = await settle(broker, "t_req", "ch", deferred_count=1)
        assert (ch["depth"], ch["in_flight_count"]) == (0, 0), ch
        at, m = await inbox.get(timeout=5)
        assert m.attempts == 3 and at - sent >= 0.8, at - sent
        m.finish()
        ch = await settle(broker, "t_req", "ch", in_flight_count=0, deferred_count=0)
        assert (ch["requeue_count"], ch["timeout_count"], ch["depth"]) == (2, 0, 0), ch
        client = inbox.client(broker)
        assert (client["requeue_count"], client["finish_count"], client["message_count"]) == (2, 1, 3)
        inbox.close()

    run(scenario())


def test_req_delay_is_clamped_to_max_req_timeout(make_broker):
    b = make_broker("--max-req-timeout", "1s")

    async def scenario():
        inbox = Inbox(b.tcp_address, "t_clamp", "ch")
        await inbox.subscribed(b)
        await publish(b, "t_clamp", [b"c"])
        _, m = await inbox.get()
        sent = time.monotonic()
        m.requeue(time_ms=3_600_000, backoff=False)  # an hour: clamped to 1 s, no error
        at, m = await inbox.get(timeout=5)
        assert m.attempts == 2 and at - sent >= 0.95
        m.finish()
        await settle(b, "t_clamp", "ch", in_flight_count=0, deferred_count=0, requeue_count=1)
        assert inbox.errors == []
        inbox.close()

    run(scenario())


# -- TOUCH ----------------------------------------------------------------------------------------

def test_touch_keeps_a_slow_message_alive_past_its_timeout(broker):
    async def scenario():
        inbox = Inbox(broker.tcp_address, "t_touch", "ch", msg_timeout=1)
        await inbox.subscribed(broker)
        await publish(broker, "t_touch", [b"slow"])
        delivered, m = await inbox.get()
        while time.monotonic() - delivered < 2.5:  # 2.5 x msg_timeout of work
            await asyncio.sleep(0.3)  # the work, touched every 0.3 s: the time is what is tested
            m.touch()
            assert inbox.queue.empty(), "redelivered although touched"
        m.finish()
        ch = await settle(broker, "t_touch", "ch", in_flight_count=0)
        assert (ch["timeout_count"], ch["requeue_count"], ch["depth"]) == (0, 0, 0), ch
        await inbox.nothing_for(1.2)
        assert inbox.errors == []
        inbox.close()

    run(scenario())


def test_touch_never_moves_the_deadline_past_max_msg_timeout(make_broker):
    b = make_broker("--max-msg-timeout", "2s")

    async def scenario():
        inbox = Inbox(b.tcp_address, "t_cap", "ch", msg_timeout=1)
        await inbox.subscribed(b)
        await publish(b, "t_cap", [b"forever"])
        delivered, m = await inbox.get()
        first_id = m.id
        again = None
        while again is None:
            assert time.monotonic() - delivered < 5, "never timed out although past max-msg-timeout"
            await asyncio.sleep(0.25)  # the work, touched every 0.25 s until the cap sends it back
            if inbox.queue.empty():
                m.touch()
            else:
                again = await inbox.get()
        at, m2 = again
        assert (m2.id, m2.attempts) == (first_id, 2)
        assert at - delivered >= 1.95, at - delivered  # not before delivery + max-msg-timeout
        m2.finish()
        await settle(b, "t_cap", "ch", in_flight_count=0, timeout_count=1)
        inbox.close()

    run(scenario())


# -- deferred ---------------------------------------------------------------------------------------

def test_dpub_messages_arrive_in_due_time_order(broker):
    async def scenario():
        inbox = Inbox(broker.tcp_address, "t_order", "ch", max_in_flight=50)
        await inbox.subscribed(broker)
        defers = [300 + 100 * i for i in range(15)]
        random.Random(4).shuffle(defers)
        bodies = [b"due-%05d" % d for d in defers]
        published = time.monotonic()
        fired_before = fire_lateness(broker)["deferred"]["count"]
        await publish(broker, "t_order", bodies, defers)
        await settle(broker, "t_order", "ch", deferred_count=len(bodies), timeout=3)
        got = []
        for _ in bodies:
            at, m = await inbox.get(timeout=5)
            got.append(m.body)
            assert at - published >= int(m.body[4:]) / 1000 - 0.005, (m.body, at - published)
            m.finish()
        assert got == sorted(bodies)
        assert fire_lateness(broker)["deferred"]["count"] - fired_before == len(bodies)
        ch = await settle(broker, "t_order", "ch", in_flight_count=0, deferred_count=0)
        assert (ch["depth"], ch["message_count"], ch["timeout_count"]) == (0, len(bodies), 0), ch
        inbox.close()

    run(scenario())


def test_deferred_reaches_the_channels_that_existed_and_stats_report_it(broker):
    """DPUB and /pub?defer=: deferred_count while held, depth once due, every channel that
    existed at publish gets a copy, a channel created afterwards does not."""
    assert broker.http("POST", "/topic/create?topic=t_fan")[0] == 200
    for ch in ("a", "b"):
        assert broker.http("POST", f"/channel/create?topic=t_fan&channel={ch}")[0] == 200

    async def scenario():
        published = time.monotonic()
        await publish(broker, "t_fan", [b"dpub"], [1500])
        status, body, _ = broker.http("POST", "/pub?topic=t_fan&defer=1500", b"http")
        assert (status, body) == (200, b"OK")
        assert broker.http("POST", "/channel/create?topic=t_fan&channel=late")[0] == 200
        for name in ("a", "b"):
            ch = channel_stats(broker, "t_fan", name)
            assert (ch["deferred_count"], ch["depth"], ch["message_count"]) == (2, 0, 2), ch
        late = channel_stats(broker, "t_fan", "late")
        assert (late["deferred_count"], late["depth"]) == (0, 0), late
        assert topic_stats(broker, "t_fan")["depth"] == 0
        # due, no consumer yet: both wait at depth
        for name in ("a", "b"):
            await settle(broker, "t_fan", name, deferred_count=0, depth=2, timeout=5)
        assert time.monotonic() - published >= 1.5
        inboxes = {name: Inbox(broker.tcp_address, "t_fan", name) for name in ("a", "b", "late")}
        for name in ("a", "b"):
            got = set()
            for _ in range(2):
                _, m = await inboxes[name].get()
                got.add(m.body)
                m.finish()
            assert got == {b"dpub", b"http"}
            await settle(broker, "t_fan", name, depth=0, in_flight_count=0)
        await inboxes["late"].subscribed(broker)
        await inboxes["late"].nothing_for(0.5)
        for inbox in inboxes.values():
            inbox.close()

    run(scenario())


def test_dpub_to_a_topic_without_channels_waits_for_the_first(broker):
    async def scenario():
        await publish(broker, "t_nochan", [b"held"], [500])
        assert topic_stats(broker, "t_nochan")["depth"] == 1
        published = time.monotonic()
        inbox = Inbox(broker.tcp_address, "t_nochan", "first")
        at, m = await inbox.get(timeout=5)
        assert m.body == b"held" and at - published >= 0.4
        m.finish()
        await settle(broker, "t_nochan", "first", in_flight_count=0, deferred_count=0, depth=0)
        inbox.close()

    run(scenario())


# -- closing --------------------------------------------------------------------------------------

def test_in_flight_of_a_closed_connection_is_requeued_at_once(broker):
    async def scenario():
        gone = Inbox(broker.tcp_address, "t_gone", "ch", max_in_flight=5)  # default 60 s timeout
        await gone.subscribed(broker)
        await publish(broker, "t_gone", [b"m%d" % i for i in range(3)])
        held = [(await gone.get())[1] for _ in range(3)]
        assert all(m.attempts == 1 for m in held)
        await settle(broker, "t_gone", "ch", in_flight_count=3)
        other = Inbox(broker.tcp_address, "t_gone", "ch", max_in_flight=5)
        await other.subscribed(broker)
        closed = time.monotonic()
        gone.close()
        got = {}
        for _ in range(3):
            at, m = await other.get(timeout=5)
            got[m.body] = m.attempts
            assert at - closed < 5  # long before the 60 s msg_timeout
            m.finish()
        assert got == {b"m0": 2, b"m1": 2, b"m2": 2}
        ch = await settle(broker, "t_gone", "ch", in_flight_count=0, client_count=1)
        assert (ch["requeue_count"], ch["timeout_count"], ch["depth"]) == (3, 0, 0), ch
        other.close()

    run(scenario())


def test_cls_stops_delivery_and_lets_in_flight_finish(broker):
    """gnsq: CLS gets CLOSE_WAIT, nothing more is delivered, the in-flight FINs count."""
    import gnsq

    conn = gnsq.NsqdTCPClient("127.0.0.1", broker.tcp_port, timeout=10.0, client_id="gnsq-cls")
    conn.connect()
    try:
        conn.identify()
        conn.subscribe("t_cls", "ch")
        assert conn.read_response() == (0, b"OK")
        conn.ready(2)
        pub = gnsq.NsqdHTTPClient("127.0.0.1", broker.http_port)
        for i in range(2):
            pub.publish("t_cls", b"before-%d" % i)
        held = []
        while len(held) < 2:
            frame, data = conn.read_response()
            if frame == 2:
                held.append(data)
        conn.close()  # CLS
        frame, data = conn.read_response()
        while frame == 0 and data == b"_heartbeat_":
            frame, data = conn.read_response()
        assert (frame, data) == (0, b"CLOSE_WAIT")
        for i in range(3):
            pub.publish("t_cls", b"after-%d" % i)
        for m in held:
            m.finish()

        def settled():
            ch = channel_stats(broker, "t_cls", "ch")
            return ch if (ch["in_flight_count"], ch["depth"]) == (0, 3) else None

        ch = wait_for(settled, what="the FINs after CLS")
        (client,) = ch["clients"]
        assert (client["state"], client["finish_count"], client["message_count"]) == (4, 2, 2), client
        conn.stream.socket.settimeout(0.5)
        with pytest.raises(Exception) as caught:  # nothing more arrives: the read times out
            conn.read_response()
        assert "timed out" in str(caught.value), caught.value
    finally:
        conn.close_stream()


@pytest.mark.parametrize("cmd", ["finish", "requeue", "touch"])
def test_only_the_connection_a_message_was_sent_to_may_answer_it(broker, cmd):
    """gnsq: FIN, REQ or TOUCH from another connection of the channel is refused with a
    non-fatal E_*_FAILED; the owner's answer still counts."""
    import gnsq

    def subscriber(name: str, rdy: int) -> gnsq.NsqdTCPClient:
        conn = gnsq.NsqdTCPClient("127.0.0.1", broker.tcp_port, timeout=10.0, client_id=name)
        conn.connect()
        conn.identify()
        conn.subscribe("t_own", "ch")
        assert conn.read_response() == (0, b"OK")
        conn.ready(rdy)
        return conn

    owner, other = subscriber("owner", 1), subscriber("other", 0)
    try:
        gnsq.NsqdHTTPClient("127.0.0.1", broker.http_port).publish("t_own", b"mine")
        frame, message = owner.read_response()
        assert frame == 2 and message.body == b"mine"
        getattr(other, cmd)(message.id)
        frame, error = other.read_response()
        code = {"finish": "FIN", "requeue": "REQ", "touch": "TOUCH"}[cmd]
        kind = {"FIN": gnsq.errors.NSQFinishFailed, "REQ": gnsq.errors.NSQRequeueFailed,
                "TOUCH": gnsq.errors.NSQTouchFailed}[code]
        assert frame == 1 and isinstance(error, kind) and not error.fatal
        assert error.args == (f"{code} {message.id.decode()} failed client does not own message".encode(),)
        other.nop()
        message.finish()  # still the owner's
        ch = wait_for(lambda: (x := channel_stats(broker, "t_own", "ch"))["in_flight_count"] == 0 and x,
                      what="the owner's FIN")
        assert (ch["depth"], ch["requeue_count"]) == (0, 0), ch
        assert {c["client_id"]: c["finish_count"] for c in ch["clients"]} == {"owner": 1, "other": 0}
    finally:
        owner.close_stream()
        other.close_stream()


# -- the timer process dies ----------------------------------------------------------------------

def test_kill_9_of_the_timer_during_deferrals_and_timeouts_loses_nothing(broker):
    """120 deferred messages and 60 in-flight ones that time out once: the timer is killed
    twice on the way; every message is finished, none is left anywhere."""
    deferred = [b"d%03d" % i for i in range(120)]
    timed = [b"t%03d" % i for i in range(60)]

    def kill_timer() -> None:
        old = broker.children()["nsqmp timer"]
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: broker.children().get("nsqmp timer") not in (None, old), what="a new timer")

    async def scenario():
        inbox = Inbox(broker.tcp_address, "t_kill", "ch", max_in_flight=200, msg_timeout=1)
        await inbox.subscribed(broker)
        defers = [300 + (i * 37) % 2500 for i in range(len(deferred))]
        await publish(broker, "t_kill", deferred, defers)
        await publish(broker, "t_kill", timed)
        finished: dict[bytes, int] = {}
        attempts: dict[bytes, int] = {}
        kills = [time.monotonic() + 0.5, time.monotonic() + 1.6]
        deadline = time.monotonic() + 30
        while len(finished) < len(deferred) + len(timed):
            assert time.monotonic() < deadline, sorted(set(deferred + timed) - set(finished))
            if kills and time.monotonic() >= kills[0]:
                kills.pop(0)
                await asyncio.to_thread(kill_timer)
            try:
                _, m = await inbox.get(timeout=0.1)
            except asyncio.TimeoutError:
                continue
            attempts[m.body] = max(attempts.get(m.body, 0), m.attempts)
            if m.body.startswith(b"t") and m.attempts == 1:
                continue  # let it time out
            finished[m.body] = finished.get(m.body, 0) + 1
            m.finish()
        assert not kills
        assert set(finished) == set(deferred) | set(timed)
        assert all(attempts[b] >= 2 for b in timed)
        ch = await settle(broker, "t_kill", "ch", in_flight_count=0, deferred_count=0, depth=0)
        assert ch["timeout_count"] >= len(timed), ch
        assert not [e for e in inbox.errors if e.startswith(b"E_FIN_FAILED")], inbox.errors
        inbox.close()

    run(scenario())


# -- counters under concurrency ----------------------------------------------------------------------

def test_stats_counters_are_exact_after_a_concurrent_run(broker):
    """Three pynsq readers share a channel while a writer publishes; each message's fate
    is fixed by its number: REQ 0, REQ 100 ms, one timeout, or FIN. Every per-channel and
    per-client counter must match what the clients did."""
    n = 300
    fate = {b"%04d" % i: ("req0", "reqd", "timeout", "fin", "fin")[i % 5] for i in range(n)}

    async def scenario():
        inboxes = [Inbox(broker.tcp_address, "t_count", "ch", max_in_flight=20, msg_timeout=1,
                         hostname=f"counter-{k}") for k in range(3)]
        for inbox in inboxes:
            await inbox.subscribed(broker)
        did = {inbox.name: {"messages": 0, "fin": 0, "req": 0} for inbox in inboxes}
        finished: set[bytes] = set()
        timeouts = 0
        publisher = asyncio.ensure_future(publish(broker, "t_count", list(fate)))
        deadline = time.monotonic() + 30
        while len(finished) < n:
            assert time.monotonic() < deadline, len(finished)
            for inbox in inboxes:
                while not inbox.queue.empty():
                    _, m = inbox.queue.get_nowait()
                    mine = did[inbox.name]
                    mine["messages"] += 1
                    what = fate[m.body] if m.attempts == 1 else "fin"
                    if what == "timeout":
                        timeouts += 1
                    elif what == "fin":
                        m.finish()
                        mine["fin"] += 1
                        finished.add(m.body)
                    else:
                        m.requeue(time_ms=0 if what == "req0" else 100, backoff=False)
                        mine["req"] += 1
            await asyncio.sleep(0.01)  # the clients' own loop: pynsq runs between looks at the inboxes
        await publisher
        ch = await settle(broker, "t_count", "ch", in_flight_count=0, depth=0, deferred_count=0)
        assert ch["message_count"] == n
        assert ch["requeue_count"] == sum(d["req"] for d in did.values()) == 2 * n // 5
        assert ch["timeout_count"] == timeouts == n // 5
        for inbox in inboxes:
            c = inbox.client(broker)
            mine = did[inbox.name]
            assert (c["message_count"], c["finish_count"], c["requeue_count"], c["in_flight_count"]) == \
                (mine["messages"], mine["fin"], mine["req"], 0), (inbox.name, c, mine)
        assert sum(d["messages"] for d in did.values()) == n + 3 * n // 5
        assert sum(d["fin"] for d in did.values()) == n
        for inbox in inboxes:
            assert inbox.errors == [], inbox.errors
            inbox.close()

    run(scenario())


# -- administration meets deadlines -----------------------------------------------------------------

def test_paused_channel_holds_due_and_timed_out_messages_until_unpaused(broker):
    async def scenario():
        inbox = Inbox(broker.tcp_address, "t_pause", "ch", msg_timeout=1)
        await inbox.subscribed(broker)
        await publish(broker, "t_pause", [b"timeout"])
        _, m = await inbox.get()  # never answered: times out while the channel is paused
        await publish(broker, "t_pause", [b"deferred"], [500])
        assert broker.http("POST", "/channel/pause?topic=t_pause&channel=ch")[0] == 200
        await inbox.nothing_for(1.6)
        ch = await settle(broker, "t_pause", "ch", depth=2, deferred_count=0, in_flight_count=0)
        assert (ch["timeout_count"], ch["paused"]) == (1, True), ch
        assert broker.http("POST", "/channel/unpause?topic=t_pause&channel=ch")[0] == 200
        got = {}
        for _ in range(2):
            _, m = await inbox.get(timeout=5)
            got[m.body] = m.attempts
            m.finish()
        assert got == {b"timeout": 2, b"deferred": 1}
        await settle(broker, "t_pause", "ch", depth=0, in_flight_count=0)
        inbox.close()

    run(scenario())


def test_emptied_channel_forgets_its_deferred_and_in_flight_messages(broker):
    async def scenario():
        inbox = Inbox(broker.tcp_address, "t_empty", "ch", msg_timeout=1)
        await inbox.subscribed(broker)
        await publish(broker, "t_empty", [b"in-flight"])
        _, held = await inbox.get()
        await publish(broker, "t_empty", [b"deferred"], [800])
        await publish(broker, "t_empty", [b"req"])
        _, r = await inbox.get()
        r.requeue(time_ms=800, backoff=False)
        await settle(broker, "t_empty", "ch", deferred_count=2, in_flight_count=1)
        assert broker.http("POST", "/channel/empty?topic=t_empty&channel=ch")[0] == 200
        ch = channel_stats(broker, "t_empty", "ch")
        assert (ch["depth"], ch["deferred_count"], ch["in_flight_count"]) == (0, 0, 0), ch
        assert inbox.client(broker)["in_flight_count"] == 0
        await inbox.nothing_for(1.5)  # no deadline of the emptied messages fires
        held.finish()
        await await_for(lambda: inbox.errors, 5, what="the refusal of the FIN of an emptied message")
        assert inbox.errors == [b"E_FIN_FAILED FIN %s failed ID not in flight" % held.id]
        ch = channel_stats(broker, "t_empty", "ch")
        assert ch["timeout_count"] == 0, ch
        # the channel works on afterwards
        await publish(broker, "t_empty", [b"after"])
        _, m = await inbox.get()
        assert (m.body, m.attempts) == (b"after", 1)
        m.finish()
        await settle(broker, "t_empty", "ch", in_flight_count=0, depth=0)
        inbox.close()

    run(scenario())


@pytest.mark.slow
def test_kill_9_of_the_timer_holding_tens_of_thousands_of_deadlines(broker):
    """20,000 DPUBs due over one second, half of them left to time out once, the timer
    killed before they are due and again mid-way: every message is finished exactly once,
    timeout_count is exactly the half, and no FIN is refused. (The raw wire client: pynsq
    is too slow for this many messages on a shared machine.)"""
    n = 20_000

    def kill_timer() -> None:
        old = broker.children()["nsqmp timer"]
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: broker.children().get("nsqmp timer") not in (None, old), what="a new timer")

    c = Connection.connect(broker.tcp_address, timeout=30)
    c.identify(msg_timeout=2000)
    c.sub("t_many", "ch", rdy=2500)
    with Connection.connect(broker.tcp_address, timeout=30) as p:
        p.send(b"".join(wire.dpub("t_many", 2000 + i % 1000, b"%06d" % i) for i in range(n)))
        for _ in range(n):
            p.expect_ok()
    kill_timer()
    finished: set[int] = set()
    ignored = 0
    killed_again = False
    c.sock.settimeout(0.5)
    deadline = time.monotonic() + 120
    while len(finished) < n:
        assert time.monotonic() < deadline, f"{len(finished)} of {n} finished"
        try:
            frame = c.read_frame()
        except socket.timeout:
            continue
        assert frame.type == wire.FRAME_MESSAGE, frame.data
        m = frame.message
        k = int(m.body)
        if m.attempts == 1 and k % 2 == 0:
            ignored += 1
            if ignored == n // 4 and not killed_again:
                kill_timer()
                killed_again = True
            continue
        assert k not in finished, k
        c.fin(m.id)
        finished.add(k)
    ch = wait_for(lambda: (x := channel_stats(broker, "t_many", "ch"))["in_flight_count"] == 0 and x,
                  what="the last FINs")
    assert (ch["depth"], ch["deferred_count"], ch["timeout_count"], ch["message_count"]) == \
        (0, 0, n // 2, n), ch
    c.send(wire.fin(FENCE_ID))  # every earlier answer comes before this refusal
    frame = c.read_frame()
    assert frame.data == b"E_FIN_FAILED FIN %s failed ID not in flight" % FENCE_ID, frame.data
    c.close()
