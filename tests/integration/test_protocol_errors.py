"""Bad input over TCP and HTTP: nsqd's exact error texts, the connection closed exactly
where nsqd closes it, and the broker never taken down.

The texts are nsqd 1.3.0's (nsqd/protocol_v2.go, nsqd/http.go; reference sections 1-2).
One broker serves the whole module, with small limits so "too big" is cheap to send.
"""
from __future__ import annotations

import socket
import struct
import time

import orjson
import pytest

from nsqmp.client import Connection
from nsqmp.client import wire
from tests.harness import Broker, wait_for

MAX_MSG = 1024
MAX_BODY = 8192
MAX_RDY = 2500
I32 = struct.Struct(">i")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("protocol") / "data", "--acceptors", "2", "--routers", "2",
               "--max-msg-size", str(MAX_MSG), "--max-body-size", str(MAX_BODY)).start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        assert b.stop() == 0, b.log_text()[-4000:]


def _conn(broker, *, identify: dict | None = None, sub: tuple[str, str] | None = None) -> Connection:
    c = Connection.connect(broker.tcp_address, timeout=5)
    if identify is not None:
        c.identify(**identify)
    if sub is not None:
        c.sub(*sub)
    return c


def _assert_alive(broker) -> None:
    """The broker still answers /ping and a fresh connection can publish."""
    assert broker.http("GET", "/ping")[:2] == (200, b"OK")
    with _conn(broker) as c:
        c.pub("alive", b"still here")
    assert broker.proc.poll() is None


def _assert_fatal(broker, c: Connection, data: bytes, text: str) -> None:
    """Send data: exactly one error frame with this text, then the server closes."""
    c.send(data)
    frame = c.read_frame()
    assert (frame.type, frame.data.decode()) == (wire.FRAME_ERROR, text)
    with pytest.raises((EOFError, ConnectionResetError)):
        extra = c.read_frame()
        pytest.fail(f"the connection stayed open and sent {extra}")
    c.close()
    _assert_alive(broker)


def _assert_silent(c: Connection, seconds: float = 0.3) -> None:
    """Nothing arrives (no response, no error) for a while; heartbeats would count as frames."""
    c.sock.settimeout(seconds)
    try:
        with pytest.raises(socket.timeout):
            frame = c.read_frame()
            pytest.fail(f"unexpected frame {frame}")
    finally:
        c.sock.settimeout(5)


def _identify_raw(body: bytes) -> bytes:
    return b"IDENTIFY\n" + I32.pack(len(body)) + body


def _mpub_raw(topic: bytes, payload: bytes) -> bytes:
    return b"MPUB " + topic + b"\n" + I32.pack(len(payload)) + payload


def _mpub_payload(*sizes_and_bodies: bytes, count: int | None = None) -> bytes:
    n = len(sizes_and_bodies) if count is None else count
    return I32.pack(n) + b"".join(I32.pack(len(b)) + b for b in sizes_and_bodies)


LONG = b"x" * 65


# -- magic ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("magic", [b"  V1", b"V2  ", b"GET / HTTP/1.1\r\n\r\n"])
def test_bad_magic(broker, magic):
    with socket.create_connection(("127.0.0.1", broker.tcp_port), timeout=5) as s:
        s.sendall(magic)
        reader = wire.FrameReader()
        frames = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            frames += reader.feed(data)
    assert frames == [(wire.FRAME_ERROR, b"E_BAD_PROTOCOL")]
    _assert_alive(broker)


def test_short_magic_then_eof_just_closes(broker):
    with socket.create_connection(("127.0.0.1", broker.tcp_port), timeout=5) as s:
        s.sendall(b"  V")
        s.shutdown(socket.SHUT_WR)
        assert s.recv(4096) == b""
    _assert_alive(broker)


# -- fatal errors: (set-up, bytes sent, exact error text) ---------------------------------------------

SUBSCRIBED = {"identify": {}, "sub": ("errs", "ch")}
FATAL = [
    # unknown commands (names are case-sensitive)
    ({}, b"BOGUS\n", "E_INVALID invalid command BOGUS"),
    ({}, b"pub errs\n", "E_INVALID invalid command pub"),
    ({}, b"\n", "E_INVALID invalid command "),
    # SUB
    (SUBSCRIBED, b"SUB errs ch\n", "E_INVALID cannot SUB in current state"),
    ({}, b"SUB errs\n", "E_INVALID SUB insufficient number of parameters"),
    ({}, b"SUB a*b ch\n", 'E_BAD_TOPIC SUB topic name "a*b" is not valid'),
    ({}, b"SUB " + LONG + b" ch\n", f'E_BAD_TOPIC SUB topic name "{LONG.decode()}" is not valid'),
    ({}, b"SUB t#eph ch\n", 'E_BAD_TOPIC SUB topic name "t#eph" is not valid'),
    ({}, b"SUB errs c!\n", 'E_BAD_CHANNEL SUB channel name "c!" is not valid'),
    ({}, b"SUB errs \n", 'E_BAD_CHANNEL SUB channel name "" is not valid'),
    ({"identify": {"heartbeat_interval": -1}}, b"SUB errs ch\n", "E_INVALID cannot SUB with heartbeats disabled"),
    # PUB
    ({}, b"PUB\n", "E_INVALID PUB insufficient number of parameters"),
    ({}, b"PUB a*b\n" + I32.pack(1) + b"x", 'E_BAD_TOPIC PUB topic name "a*b" is not valid'),
    ({}, b"PUB errs\n" + I32.pack(0), "E_BAD_MESSAGE PUB invalid message body size 0"),
    ({}, b"PUB errs\n" + I32.pack(-1), "E_BAD_MESSAGE PUB invalid message body size -1"),
    ({}, b"PUB errs\n" + I32.pack(MAX_MSG + 1), f"E_BAD_MESSAGE PUB message too big {MAX_MSG + 1} > {MAX_MSG}"),
    # MPUB (the bad-topic text repeats the code in nsqd)
    ({}, b"MPUB\n", "E_INVALID MPUB insufficient number of parameters"),
    ({}, _mpub_raw(b"a*b", _mpub_payload(b"x")), 'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "a*b" is not valid'),
    ({}, b"MPUB errs\n" + I32.pack(0), "E_BAD_BODY MPUB invalid body size 0"),
    ({}, b"MPUB errs\n" + I32.pack(MAX_BODY + 1), f"E_BAD_BODY MPUB body too big {MAX_BODY + 1} > {MAX_BODY}"),
    ({}, _mpub_raw(b"errs", _mpub_payload(count=0)), "E_BAD_BODY MPUB invalid message count 0"),
    ({}, _mpub_raw(b"errs", _mpub_payload(count=-1)), "E_BAD_BODY MPUB invalid message count -1"),
    ({}, _mpub_raw(b"errs", _mpub_payload(count=(MAX_BODY - 4) // 5 + 1)),
     f"E_BAD_BODY MPUB invalid message count {(MAX_BODY - 4) // 5 + 1}"),
    ({}, _mpub_raw(b"errs", _mpub_payload(b"ok", b"")), "E_BAD_MESSAGE MPUB invalid message(1) body size 0"),
    ({}, _mpub_raw(b"errs", _mpub_payload(b"y" * (MAX_MSG + 1))),
     f"E_BAD_MESSAGE MPUB message too big {MAX_MSG + 1} > {MAX_MSG}"),
    # RDY
    ({}, b"RDY 1\n", "E_INVALID cannot RDY in current state"),
    (SUBSCRIBED, b"RDY %d\n" % (MAX_RDY + 1), f"E_INVALID RDY count {MAX_RDY + 1} out of range 0-{MAX_RDY}"),
    (SUBSCRIBED, b"RDY abc\n", "E_INVALID RDY could not parse count abc"),
    (SUBSCRIBED, b"RDY -1\n", "E_INVALID RDY could not parse count -1"),
    # FIN
    ({}, b"FIN 0123456789abcdef\n", "E_INVALID cannot FIN in current state"),
    (SUBSCRIBED, b"FIN\n", "E_INVALID FIN insufficient number of params"),
    (SUBSCRIBED, b"FIN 0123456789abcde\n", "E_INVALID Invalid Message ID"),
    (SUBSCRIBED, b"FIN 0123456789abcdef0\n", "E_INVALID Invalid Message ID"),
    # CLS
    ({}, b"CLS\n", "E_INVALID cannot CLS in current state"),
    # IDENTIFY
    (SUBSCRIBED, _identify_raw(b"{}"), "E_INVALID cannot IDENTIFY in current state"),
    ({}, _identify_raw(b"{not json"), "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ({}, _identify_raw(b'{"heartbeat_interval": "fast"}'), "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ({}, _identify_raw(b'{"msg_timeout": 1500.5}'), "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ({}, _identify_raw(b'{"feature_negotiation": "yes"}'), "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ({}, b"IDENTIFY\n" + I32.pack(0), "E_BAD_BODY IDENTIFY invalid body size 0"),
    ({}, b"IDENTIFY\n" + I32.pack(MAX_BODY + 1), f"E_BAD_BODY IDENTIFY body too big {MAX_BODY + 1} > {MAX_BODY}"),
    ({}, _identify_raw(b'{"heartbeat_interval": 999}'), "E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid"),
    ({}, _identify_raw(b'{"heartbeat_interval": 60001}'),
     "E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid"),
    ({}, _identify_raw(b'{"heartbeat_interval": -2}'), "E_BAD_BODY IDENTIFY heartbeat interval (-2) is invalid"),
    ({}, _identify_raw(b'{"msg_timeout": 999}'), "E_BAD_BODY IDENTIFY msg timeout (999) is invalid"),
    ({}, _identify_raw(b'{"msg_timeout": 900001}'), "E_BAD_BODY IDENTIFY msg timeout (900001) is invalid"),
    ({}, _identify_raw(b'{"output_buffer_size": 63}'), "E_BAD_BODY IDENTIFY output buffer size (63) is invalid"),
    ({}, _identify_raw(b'{"output_buffer_timeout": 24}'),
     "E_BAD_BODY IDENTIFY output buffer timeout (24) is invalid"),
    ({}, _identify_raw(b'{"sample_rate": 100}'), "E_BAD_BODY IDENTIFY sample rate (100) is invalid"),
]


@pytest.mark.parametrize("setup, data, text", FATAL, ids=[t for _, _, t in FATAL])
def test_fatal_error_then_close(broker, setup, data, text):
    c = _conn(broker, **setup)
    _assert_fatal(broker, c, data, text)


def test_valid_names_at_the_limits_are_accepted(broker):
    name64 = "n" * 64
    for topic, channel in [(name64, name64), ("a.b_c-D9", "x#ephemeral"), ("t" * 54 + "#ephemeral", "c")]:
        with _conn(broker, identify={}, sub=(topic, channel)) as c:
            c.pub(topic, b"ok")


def test_pipelined_commands_before_a_fatal_one_are_answered(broker):
    with _conn(broker) as c:
        c.send(wire.pub("errs", b"one") + wire.pub("errs", b"two") + b"BOGUS\n" + wire.pub("errs", b"never"))
        frames = [c.read_frame() for _ in range(3)]
        assert [(f.type, f.data) for f in frames] == [
            (wire.FRAME_RESPONSE, b"OK"), (wire.FRAME_RESPONSE, b"OK"),
            (wire.FRAME_ERROR, b"E_INVALID invalid command BOGUS")]
        with pytest.raises((EOFError, ConnectionResetError)):
            c.read_frame()


def test_a_burst_of_pipelined_pubs_does_not_stall_the_connection(broker):
    # regression: more than 256 commands in one read used to pause reading for good
    with _conn(broker) as c:
        c.send(b"".join(wire.pub("burst", b"b%d" % i) for i in range(2000)))
        for _ in range(2000):
            c.expect_ok()
        c.pub("burst", b"after the burst")
    # the hand-off to the router is asynchronous: every OK'd message arrives there
    wait_for(lambda: [t["message_count"] for t in broker.stats(topic="burst")["topics"]] == [2001],
             what="2001 messages at the router")


# -- non-fatal errors and the states that ignore input --------------------------------------------

def test_fin_of_unknown_id_is_not_fatal(broker):
    with _conn(broker, identify={}, sub=("finfail", "ch")) as c:
        c.send(b"FIN 0123456789abcdef\n")
        frame = c.read_frame()
        assert (frame.type, frame.data) == (wire.FRAME_ERROR, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight")
        c.pub("finfail", b"after")  # the connection keeps working: the next PUB gets OK
        c.send(wire.rdy(1))
        m = c.read_message()
        assert m.body == b"after"
        c.fin(m.id)
        c.send(wire.NOP)
        _assert_silent(c)


def test_fin_of_another_clients_message_is_not_fatal(broker):
    with _conn(broker, identify={}, sub=("owned", "ch")) as owner, \
            _conn(broker, identify={}, sub=("owned", "ch")) as other:
        owner.send(wire.rdy(1))
        other.pub("owned", b"mine")
        m = owner.read_message()
        other.send(wire.fin(m.id))
        frame = other.read_frame()
        assert (frame.type, frame.data.decode()) == (
            wire.FRAME_ERROR, f"E_FIN_FAILED FIN {m.id.decode()} failed client does not own message")
        other.pub("elsewhere", b"still open")  # the connection keeps working
        owner.fin(m.id)
        _assert_silent(owner)


def test_empty_rdy_count_is_zero(broker):
    with _conn(broker, identify={}, sub=("rdyzero", "ch")) as c:
        c.send(b"RDY \n")
        c.pub("rdyzero", b"held")
        _assert_silent(c)  # RDY 0: nothing is delivered, and no error
        client = broker.stats(topic="rdyzero")["topics"][0]["channels"][0]["clients"][0]
        assert client["ready_count"] == 0
        c.send(b"RDY\n")  # no count at all means 1
        assert c.read_message().body == b"held"


def test_cls_then_rdy_is_ignored(broker):
    with _conn(broker, identify={}, sub=("closing", "ch")) as c:
        c.send(wire.rdy(1))
        c.pub("closing", b"first")
        first = c.read_message()
        c.send(wire.CLS)
        frame = c.read_frame()
        assert (frame.type, frame.data) == (wire.FRAME_RESPONSE, b"CLOSE_WAIT")
        c.send(wire.rdy(5))  # ignored in the closing state: no error, no delivery
        with _conn(broker) as p:
            p.pub("closing", b"second")
        _assert_silent(c, 0.5)
        client = broker.stats(topic="closing")["topics"][0]["channels"][0]["clients"][0]
        assert client["state"] == 4, client
        # FIN is still accepted for what is in flight, and the connection stays open
        c.fin(first.id)
        c.pub("closing", b"third")
        # (FIN has no reply and the hand-off of "third" is asynchronous: poll until both landed)
        def landed():
            x = broker.stats(topic="closing")["topics"][0]["channels"][0]
            return x if (x["in_flight_count"], x["depth"]) == (0, 2) else None
        ch = wait_for(landed, what="the FIN after CLS and the third message")
        assert ch["clients"][0]["finish_count"] == 1, ch
        # a second CLS is refused: the connection is no longer in the subscribed state
        _assert_fatal(broker, c, wire.CLS, "E_INVALID cannot CLS in current state")


def test_nop_has_no_answer(broker):
    with _conn(broker, identify={}) as c:
        c.send(wire.NOP + wire.NOP)
        _assert_silent(c)
        c.pub("nop", b"x")


# -- heartbeats ----------------------------------------------------------------------------------------

def test_heartbeats_and_the_silent_client_is_disconnected(broker):
    with _conn(broker) as c:
        answer = c.identify(heartbeat_interval=1000)
        assert answer is not None and answer["max_rdy_count"] == MAX_RDY
        start = time.monotonic()
        beats = []
        with pytest.raises((EOFError, ConnectionResetError)):
            while time.monotonic() - start < 10:
                frame = c.read_frame(skip_heartbeats=False)  # never answered
                assert (frame.type, frame.data) == (wire.FRAME_RESPONSE, b"_heartbeat_")
                beats.append(time.monotonic() - start)
        closed_after = time.monotonic() - start
    print(f"\nheartbeats at {[round(b, 2) for b in beats]}, closed after {closed_after:.2f}s")
    assert beats and 0.8 <= beats[0] <= 1.5
    assert 1.8 <= closed_after <= 3.5
    _assert_alive(broker)


def test_the_read_deadline_is_two_intervals_after_the_last_command(broker):
    """As nsqd's read deadline: a client silent since a NOP sent between two beats is
    closed two intervals after that NOP, not at the beat after (which would be later)."""
    with _conn(broker) as c:
        c.identify(heartbeat_interval=1000)
        frame = c.read_frame(skip_heartbeats=False)  # the first beat, at ~1 s
        assert (frame.type, frame.data) == (wire.FRAME_RESPONSE, b"_heartbeat_")
        time.sleep(0.25)
        c.send(wire.NOP)  # mid-interval; nothing after it
        last_command = time.monotonic()
        with pytest.raises((EOFError, ConnectionResetError)):
            while time.monotonic() - last_command < 10:
                c.read_frame(skip_heartbeats=False)
        silent_for = time.monotonic() - last_command
    print(f"\nclosed {silent_for:.2f}s after the last command (heartbeat 1 s)")
    # two intervals; closing at the next beat instead would take 2.75 s
    assert 1.9 <= silent_for <= 2.5
    _assert_alive(broker)


def test_a_client_that_answers_heartbeats_stays_connected(broker):
    with _conn(broker, identify={"heartbeat_interval": 1000}, sub=("beats", "ch")) as c:
        start = time.monotonic()
        beats = 0
        while time.monotonic() - start < 3.5:
            frame = c.read_frame(skip_heartbeats=False)
            assert (frame.type, frame.data) == (wire.FRAME_RESPONSE, b"_heartbeat_")
            beats += 1
            c.send(wire.NOP)
        assert beats >= 3
        c.send(wire.rdy(1))
        c.pub("beats", b"alive")
        frame = c.read_frame()  # skips (and answers) heartbeats
        assert frame.type == wire.FRAME_MESSAGE and frame.message.body == b"alive"


def test_heartbeats_disabled_allow_publishing(broker):
    with _conn(broker, identify={"heartbeat_interval": -1}) as c:
        c.pub("nobeats", b"fine")
        _assert_silent(c, 0.3)


# -- HTTP ------------------------------------------------------------------------------------------------

def _http_error(broker, method: str, path: str, body: bytes | None, status: int, message: str) -> None:
    got_status, got_body, headers = broker.http(method, path, body)
    assert (got_status, orjson.loads(got_body)) == (status, {"message": message}), got_body
    assert headers.get("Content-Type") == "application/json; charset=utf-8"
    assert headers.get("X-NSQ-Content-Type") == "nsq; version=1.0"


def test_http_ping(broker):
    status, body, headers = broker.http("GET", "/ping")
    assert (status, body) == (200, b"OK")


@pytest.mark.parametrize("method, path, body, status, message", [
    ("POST", "/pub", b"x", 400, "MISSING_ARG_TOPIC"),
    ("POST", "/pub?topic=a*b", b"x", 400, "INVALID_TOPIC"),
    ("POST", "/pub?topic=" + "x" * 65, b"x", 400, "INVALID_TOPIC"),
    ("POST", "/pub?topic=web", b"", 400, "MSG_EMPTY"),
    ("POST", "/pub?topic=web", b"z" * (MAX_MSG + 1), 413, "MSG_TOO_BIG"),
    ("POST", "/pub?topic=web&defer=soon", b"x", 400, "INVALID_DEFER"),
    ("POST", "/mpub", b"x", 400, "MISSING_ARG_TOPIC"),
    ("POST", "/mpub?topic=a*b", b"x", 400, "INVALID_TOPIC"),
    ("POST", "/mpub?topic=web", b"z" * (MAX_BODY + 1), 413, "BODY_TOO_BIG"),
    ("POST", "/mpub?topic=web", b"ok\n" + b"z" * (MAX_MSG + 1), 413, "MSG_TOO_BIG"),
    ("POST", "/mpub?topic=web&binary=true", I32.pack(0), 413, "BAD_BODY"),
    ("POST", "/mpub?topic=web&binary=true", _mpub_payload(b"z" * (MAX_MSG + 1)), 413, "BAD_MESSAGE"),
    ("POST", "/mpub?topic=web&binary=1", _mpub_payload(b"ok", b""), 413, "BAD_MESSAGE"),
    ("GET", "/nope", None, 404, "NOT_FOUND"),
    ("POST", "/topic/nonsense", b"", 404, "NOT_FOUND"),
    ("GET", "/pub?topic=web", None, 405, "METHOD_NOT_ALLOWED"),
    ("PUT", "/pub?topic=web", b"x", 405, "METHOD_NOT_ALLOWED"),
    ("PUT", "/mpub?topic=web", b"x", 405, "METHOD_NOT_ALLOWED"),
    ("POST", "/ping", b"", 405, "METHOD_NOT_ALLOWED"),
    ("POST", "/stats", b"", 405, "METHOD_NOT_ALLOWED"),
])
def test_http_errors(broker, method, path, body, status, message):
    _http_error(broker, method, path, body, status, message)
    _assert_alive(broker)


def test_http_pub_at_the_size_limit_and_mpub_binary(broker):
    assert broker.http("POST", "/pub?topic=httpok", b"m" * MAX_MSG)[:2] == (200, b"OK")
    bodies = [b"bin-1", b"bin two", b"line\nbreak is fine in binary mode"]
    assert broker.http("POST", "/mpub?topic=httpok&binary=true", _mpub_payload(*bodies))[:2] == (200, b"OK")
    assert broker.http("POST", "/mpub?topic=httpok", b"text-1\n\ntext-2\n")[:2] == (200, b"OK")
    with _conn(broker, identify={}, sub=("httpok", "ch")) as c:
        c.send(wire.rdy(10))
        got = sorted(c.read_message().body for _ in range(6))
    assert got == sorted([b"m" * MAX_MSG, *bodies, b"text-1", b"text-2"])
    # a rejected request published nothing
    topic = broker.stats(topic="web")["topics"]
    assert topic == [] or topic[0]["message_count"] == 0, topic


def test_http_stats_json(broker):
    with _conn(broker, identify={"client_id": "stats-reader"}, sub=("statst", "c1")) as c:
        for i in range(3):
            assert broker.http("POST", "/pub?topic=statst", b"s%d" % i)[:2] == (200, b"OK")
        assert broker.http("POST", "/pub?topic=lonely", b"waiting")[:2] == (200, b"OK")
        c.send(wire.rdy(1))
        c.read_message()

        def settled():
            t = {x["topic_name"]: x for x in broker.stats()["topics"]}
            ch = t.get("statst", {}).get("channels", [{}])[0]
            lonely = t.get("lonely", {}).get("message_count")
            return t if (ch.get("in_flight_count"), ch.get("depth"), lonely) == (1, 2, 1) else None
        topics = wait_for(settled, what="stats to show the delivery")
        stats = broker.stats()
    assert stats["version"] == "1.3.0" and stats["health"] == "OK"
    assert isinstance(stats["start_time"], int) and isinstance(stats["producers"], list)
    names = [t["topic_name"] for t in stats["topics"]]
    assert names == sorted(names)  # sorted by name, as nsqd does

    t = topics["statst"]
    assert (t["message_count"], t["depth"], t["paused"]) == (3, 0, False)
    assert {"backend_depth", "message_bytes", "e2e_processing_latency"} <= t.keys()
    [ch] = t["channels"]
    assert ch["channel_name"] == "c1"
    assert (ch["depth"], ch["in_flight_count"], ch["message_count"], ch["client_count"]) == (2, 1, 3, 1)
    assert {"deferred_count", "requeue_count", "timeout_count", "paused", "clients", "backend_depth"} <= ch.keys()
    [client] = ch["clients"]
    assert client["client_id"] == "stats-reader" and client["version"] == "V2"
    assert (client["state"], client["ready_count"], client["in_flight_count"], client["message_count"]) == (3, 1, 1, 1)
    assert client["nsqmp_acceptor"] in (0, 1)

    lonely = topics["lonely"]
    assert (lonely["channels"], lonely["depth"], lonely["message_count"]) == ([], 1, 1)

    # the filters: one topic, one channel, and clients left out
    only = broker.stats(topic="statst", channel="c1", include_clients="false")
    assert [x["topic_name"] for x in only["topics"]] == ["statst"]
    assert only["topics"][0]["channels"][0]["clients"] in ([], None)
    assert broker.stats(topic="no-such-topic")["topics"] in ([], None)
