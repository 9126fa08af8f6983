"""Bad input over TCP and HTTP: nsqd's exact error texts, the connection closed exactly
where nsqd closes it, and the broker never taken down.

The texts are nsqd 1.3.0's (nsqd/protocol_v2.go, nsqd/http.go; reference sections 1-2).
One broker serves the whole module, with small limits so "too big" is cheap to send, and a
certificate so that a TLS upgrade can be abused.

BAD_INPUT is the one table of malformed traffic on the TCP port (and of NSQ bytes on the
HTTP port): per row the set-up, the bytes sent, the exact frames that come back and
whether the connection is closed afterwards. It is wrapped by the ledger: messages
published and acknowledged before any abuse are all delivered afterwards, counted exactly,
by the same supervisor and children (same PIDs).
"""
from __future__ import annotations

import random
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import pytest

from nsqmp.client import Connection
from nsqmp.client import wire
from tests.harness import Broker, assert_fatal, wait_for

MAX_MSG = 1024
MAX_BODY = 8192
MAX_RDY = 2500
MAX_REQ_MS = 3_600_000  # --max-req-timeout 1h, nsqd's default
I32 = struct.Struct(">i")
LEDGER_TOPIC = "ledger"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("protocol")
    key, crt = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(crt), "-days", "1", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    b = Broker(tmp / "data", "--acceptors", "2", "--routers", "2",
               "--max-msg-size", str(MAX_MSG), "--max-body-size", str(MAX_BODY),
               "--tls-cert", str(crt), "--tls-key", str(key), "--https-address", "127.0.0.1:0").start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        assert b.stop() == 0, b.log_text()[-4000:]


@dataclass
class Ledger:
    """What was acknowledged before the abuse, and who was running then."""
    bodies: list[bytes]
    pids: dict[str, int]


@pytest.fixture(scope="module")
def ledger(broker) -> Ledger:
    """PUB, MPUB and DPUB to a topic nobody reads yet, every one answered OK, before any row."""
    bodies = [b"pub-%d" % i for i in range(40)]
    with _conn(broker) as c:
        for body in bodies:
            c.pub(LEDGER_TOPIC, body)
        for j in range(4):
            batch = [b"mpub-%d-%d" % (j, k) for k in range(50)]
            c.mpub(LEDGER_TOPIC, batch)
            bodies += batch
        c.send(wire.dpub(LEDGER_TOPIC, 1, b"dpub-0"))
        c.expect_ok()
        bodies.append(b"dpub-0")
    return Ledger(bodies, _pids(broker))


def _pids(broker) -> dict[str, int]:
    return {"nsqmp supervisor": broker.proc.pid, **broker.children()}


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
    """Send data: exactly one error frame with this text, then the server closes; the
    broker lives on."""
    assert_fatal(c, data, text)
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
MSG_ID = b"0123456789abcdef"


# -- the table ------------------------------------------------------------------------------------

@dataclass
class Ctx:
    """What a row's set-up made: the socket under test, and anything the row refers to."""
    broker: Broker
    sock: socket.socket | None = None
    reader: wire.FrameReader = field(default_factory=wire.FrameReader)
    pending: list = field(default_factory=list)
    msg_id: bytes = b""
    others: list[Connection] = field(default_factory=list)

    def frames(self, n: int, timeout: float = 5.0) -> list[tuple[int, bytes]]:
        assert self.sock is not None
        self.sock.settimeout(timeout)
        while len(self.pending) < n:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError(f"closed after {self.pending}")
            self.pending += self.reader.feed(data)
        got, self.pending = self.pending[:n], self.pending[n:]
        return got

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        for c in self.others:
            c.close()


@dataclass(frozen=True)
class Case:
    name: str
    setup: str                       # raw, magic, identified, subscribed, tls, owned, http
    send: bytes | Callable[[Ctx], bytes]
    frames: list | bytes | Callable[[Ctx], list]   # the exact frames (the exact bytes on HTTP)
    closed: bool                     # the server closes the connection afterwards
    eof: bool = False                # we shut our side after sending: the stream ends there


def err(text: str | bytes) -> tuple[int, bytes]:
    return (wire.FRAME_ERROR, text.encode() if isinstance(text, str) else text)


OK = (wire.FRAME_RESPONSE, b"OK")


def fatal(name: str, send: bytes, text: str | bytes, setup: str = "magic", eof: bool = False) -> Case:
    return Case(name, setup, send, [err(text)], closed=True, eof=eof)


def _fin_owned(ctx: Ctx) -> list:
    return [err(f"E_FIN_FAILED FIN {ctx.msg_id.decode()} failed client does not own message")]


GO_400 = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
          b"Connection: close\r\n\r\n400 Bad Request")
GARBAGE = random.Random(20261123).randbytes(200)
if GARBAGE[0] in (0x15, 0x16, 0x80):  # keep it garbage to Go's record-header check
    GARBAGE = b"\x00" + GARBAGE[1:]
NOT_TLS = "E_IDENTIFY_FAILED IDENTIFY failed tls: first record does not look like a TLS handshake"

BAD_INPUT = [
    # -- magic: anything but "  V2" gets E_BAD_PROTOCOL and a close
    fatal("magic V1", b"  V1", "E_BAD_PROTOCOL", setup="raw"),
    fatal("magic reversed", b"V2  ", "E_BAD_PROTOCOL", setup="raw"),
    fatal("HTTP request on the TCP port", b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n", "E_BAD_PROTOCOL", setup="raw"),
    fatal("TLS ClientHello on the TCP port", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + GARBAGE,
          "E_BAD_PROTOCOL", setup="raw"),
    Case("short magic then EOF just closes", "raw", b"  V", [], closed=True, eof=True),
    # -- unknown commands (names are case-sensitive)
    fatal("unknown command", b"BOGUS\n", "E_INVALID invalid command BOGUS"),
    fatal("lower-case command", b"pub errs\n", "E_INVALID invalid command pub"),
    fatal("empty line", b"\n", "E_INVALID invalid command "),
    fatal("binary command", b"\xff\xfe\x00 x\n", b"E_INVALID invalid command \xff\xfe\x00"),
    Case("pipelined commands before a bad one are answered", "magic",
         wire.pub("errs", b"one") + wire.pub("errs", b"two") + b"BOGUS\n" + wire.pub("errs", b"never"),
         [OK, OK, err("E_INVALID invalid command BOGUS")], closed=True),
    # -- the command line: nsqd's 16 KiB bufio buffer
    Case("line of 16384 bytes with its newline is read", "magic", b"NOP" + b" " * 16380 + b"\n", [], closed=False),
    Case("line too long closes without a word", "magic", b"PUB " + b"x" * 16384, [], closed=True),
    Case("partial line then EOF just closes", "magic", b"PUB errs", [], closed=True, eof=True),
    # -- SUB
    fatal("SUB twice", b"SUB errs ch\n", "E_INVALID cannot SUB in current state", setup="subscribed"),
    fatal("SUB without channel", b"SUB errs\n", "E_INVALID SUB insufficient number of parameters"),
    fatal("SUB bad topic", b"SUB a*b ch\n", 'E_BAD_TOPIC SUB topic name "a*b" is not valid'),
    fatal("SUB topic too long", b"SUB " + LONG + b" ch\n", f'E_BAD_TOPIC SUB topic name "{LONG.decode()}" is not valid'),
    fatal("SUB bad ephemeral suffix", b"SUB t#eph ch\n", 'E_BAD_TOPIC SUB topic name "t#eph" is not valid'),
    fatal("SUB non-UTF-8 topic", b"SUB t\xff\x01 ch\n", 'E_BAD_TOPIC SUB topic name "t\\xff\\x01" is not valid'),
    fatal("SUB bad channel", b"SUB errs c!\n", 'E_BAD_CHANNEL SUB channel name "c!" is not valid'),
    fatal("SUB empty channel", b"SUB errs \n", 'E_BAD_CHANNEL SUB channel name "" is not valid'),
    Case("SUB with heartbeats disabled", "magic", wire.identify({"heartbeat_interval": -1}) + b"SUB errs ch\n",
         [OK, err("E_INVALID cannot SUB with heartbeats disabled")], closed=True),
    # -- PUB: the command's checks come before its body is read
    fatal("PUB without topic", b"PUB\n", "E_INVALID PUB insufficient number of parameters"),
    fatal("PUB bad topic", b"PUB a*b\n" + I32.pack(1) + b"x", 'E_BAD_TOPIC PUB topic name "a*b" is not valid'),
    fatal("PUB bad topic, no body sent", b"PUB a*b\n", 'E_BAD_TOPIC PUB topic name "a*b" is not valid'),
    fatal("PUB size 0", b"PUB errs\n" + I32.pack(0), "E_BAD_MESSAGE PUB invalid message body size 0"),
    fatal("PUB negative size", b"PUB errs\n" + I32.pack(-1), "E_BAD_MESSAGE PUB invalid message body size -1"),
    fatal("PUB most negative size", b"PUB errs\n" + I32.pack(-2 ** 31),
          f"E_BAD_MESSAGE PUB invalid message body size {-2 ** 31}"),
    fatal("PUB oversized", b"PUB errs\n" + I32.pack(MAX_MSG + 1),
          f"E_BAD_MESSAGE PUB message too big {MAX_MSG + 1} > {MAX_MSG}"),
    fatal("PUB size cut by EOF", b"PUB errs\n\x00\x00", "E_BAD_MESSAGE PUB failed to read message body size", eof=True),
    fatal("PUB body cut by EOF", b"PUB errs\n" + I32.pack(10) + b"abc", "E_BAD_MESSAGE PUB failed to read message body",
          eof=True),
    # -- DPUB
    fatal("DPUB without timeout", b"DPUB errs\n", "E_INVALID DPUB insufficient number of parameters"),
    fatal("DPUB bad topic", b"DPUB a*b 10\n", 'E_BAD_TOPIC DPUB topic name "a*b" is not valid'),
    fatal("DPUB bad timeout", b"DPUB errs soon\n", "E_INVALID DPUB could not parse timeout soon"),
    fatal("DPUB negative timeout", b"DPUB errs -5\n", "E_INVALID DPUB could not parse timeout -5"),
    fatal("DPUB timeout out of range", b"DPUB errs %d\n" % (MAX_REQ_MS + 1),
          f"E_INVALID DPUB timeout {MAX_REQ_MS + 1} out of range 0-{MAX_REQ_MS}"),
    fatal("DPUB negative size", b"DPUB errs 10\n" + I32.pack(-3), "E_BAD_MESSAGE DPUB invalid message body size -3"),
    fatal("DPUB oversized", b"DPUB errs 10\n" + I32.pack(MAX_MSG + 1),
          f"E_BAD_MESSAGE DPUB message too big {MAX_MSG + 1} > {MAX_MSG}"),
    fatal("DPUB body cut by EOF", b"DPUB errs 10\n" + I32.pack(5) + b"ab",
          "E_BAD_MESSAGE DPUB failed to read message body", eof=True),
    # -- MPUB (the bad-topic text repeats the code in nsqd)
    fatal("MPUB without topic", b"MPUB\n", "E_INVALID MPUB insufficient number of parameters"),
    fatal("MPUB bad topic", _mpub_raw(b"a*b", _mpub_payload(b"x")), 'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "a*b" is not valid'),
    fatal("MPUB size 0", b"MPUB errs\n" + I32.pack(0), "E_BAD_BODY MPUB invalid body size 0"),
    fatal("MPUB negative size", b"MPUB errs\n" + I32.pack(-100), "E_BAD_BODY MPUB invalid body size -100"),
    fatal("MPUB oversized", b"MPUB errs\n" + I32.pack(MAX_BODY + 1), f"E_BAD_BODY MPUB body too big {MAX_BODY + 1} > {MAX_BODY}"),
    fatal("MPUB count 0", _mpub_raw(b"errs", _mpub_payload(count=0)), "E_BAD_BODY MPUB invalid message count 0"),
    fatal("MPUB negative count", _mpub_raw(b"errs", _mpub_payload(count=-1)), "E_BAD_BODY MPUB invalid message count -1"),
    fatal("MPUB count over the limit", _mpub_raw(b"errs", _mpub_payload(count=(MAX_BODY - 4) // 5 + 1)),
          f"E_BAD_BODY MPUB invalid message count {(MAX_BODY - 4) // 5 + 1}"),
    fatal("MPUB message size 0", _mpub_raw(b"errs", _mpub_payload(b"ok", b"")),
          "E_BAD_MESSAGE MPUB invalid message(1) body size 0"),
    fatal("MPUB negative message size", _mpub_raw(b"errs", I32.pack(2) + I32.pack(1) + b"a" + I32.pack(-9)),
          "E_BAD_MESSAGE MPUB invalid message(1) body size -9"),
    fatal("MPUB oversized message", _mpub_raw(b"errs", _mpub_payload(b"y" * (MAX_MSG + 1))),
          f"E_BAD_MESSAGE MPUB message too big {MAX_MSG + 1} > {MAX_MSG}"),
    fatal("MPUB message runs past the body", _mpub_raw(b"errs", I32.pack(1) + I32.pack(50) + b"short"),
          "E_BAD_MESSAGE MPUB failed to read message body"),
    fatal("MPUB count runs past the body", _mpub_raw(b"errs", _mpub_payload(b"one", count=3)),
          "E_BAD_MESSAGE MPUB failed to read message(1) body size"),
    fatal("MPUB size cut by EOF", b"MPUB errs\n\x00\x00\x00", "E_BAD_BODY MPUB failed to read body size", eof=True),
    fatal("MPUB count cut by EOF", b"MPUB errs\n" + I32.pack(100) + b"\x00\x00",
          "E_BAD_BODY MPUB failed to read message count", eof=True),
    fatal("MPUB message cut by EOF", b"MPUB errs\n" + I32.pack(100) + _mpub_payload(b"one", count=2),
          "E_BAD_MESSAGE MPUB failed to read message(1) body size", eof=True),
    fatal("MPUB body cut by EOF", b"MPUB errs\n" + I32.pack(100) + I32.pack(1) + I32.pack(10) + b"abc",
          "E_BAD_MESSAGE MPUB failed to read message body", eof=True),
    # nsqd reads an MPUB's messages from the stream: all there before the end is a publish
    Case("MPUB size bigger than its messages, then EOF", "magic",
         b"MPUB errs\n" + I32.pack(100) + _mpub_payload(b"one", b"two"), [OK], closed=True, eof=True),
    # -- RDY
    fatal("RDY before SUB", b"RDY 1\n", "E_INVALID cannot RDY in current state"),
    fatal("RDY out of range", b"RDY %d\n" % (MAX_RDY + 1), f"E_INVALID RDY count {MAX_RDY + 1} out of range 0-{MAX_RDY}",
          setup="subscribed"),
    fatal("RDY far out of range", b"RDY 99999999999\n", f"E_INVALID RDY count 99999999999 out of range 0-{MAX_RDY}",
          setup="subscribed"),
    fatal("RDY not a number", b"RDY abc\n", "E_INVALID RDY could not parse count abc", setup="subscribed"),
    fatal("RDY negative", b"RDY -1\n", "E_INVALID RDY could not parse count -1", setup="subscribed"),
    # -- FIN, REQ, TOUCH
    fatal("FIN before SUB", b"FIN " + MSG_ID + b"\n", "E_INVALID cannot FIN in current state"),
    fatal("FIN without ID", b"FIN\n", "E_INVALID FIN insufficient number of params", setup="subscribed"),
    fatal("FIN short ID", b"FIN 0123456789abcde\n", "E_INVALID Invalid Message ID", setup="subscribed"),
    fatal("FIN long ID", b"FIN 0123456789abcdef0\n", "E_INVALID Invalid Message ID", setup="subscribed"),
    Case("FIN of a message not in flight", "subscribed", b"FIN " + MSG_ID + b"\n",
         [err(b"E_FIN_FAILED FIN " + MSG_ID + b" failed ID not in flight")], closed=False),
    Case("FIN of a message owned by another connection", "owned", lambda ctx: b"FIN " + ctx.msg_id + b"\n",
         _fin_owned, closed=False),
    Case("REQ of a message not in flight", "subscribed", b"REQ " + MSG_ID + b" 0\n",
         [err(b"E_REQ_FAILED REQ " + MSG_ID + b" failed ID not in flight")], closed=False),
    Case("TOUCH of a message not in flight", "subscribed", b"TOUCH " + MSG_ID + b"\n",
         [err(b"E_TOUCH_FAILED TOUCH " + MSG_ID + b" failed ID not in flight")], closed=False),
    fatal("REQ before SUB", b"REQ " + MSG_ID + b" 0\n", "E_INVALID cannot REQ in current state"),
    fatal("REQ without timeout", b"REQ " + MSG_ID + b"\n", "E_INVALID REQ insufficient number of params",
          setup="subscribed"),
    fatal("REQ bad timeout", b"REQ " + MSG_ID + b" later\n", "E_INVALID REQ could not parse timeout later",
          setup="subscribed"),
    fatal("TOUCH without ID", b"TOUCH\n", "E_INVALID TOUCH insufficient number of params", setup="subscribed"),
    fatal("TOUCH short ID", b"TOUCH abc\n", "E_INVALID Invalid Message ID", setup="subscribed"),
    # -- CLS
    fatal("CLS before SUB", b"CLS\n", "E_INVALID cannot CLS in current state"),
    # -- IDENTIFY: bad JSON, out-of-range fields, sizes, state
    fatal("IDENTIFY after SUB", _identify_raw(b"{}"), "E_INVALID cannot IDENTIFY in current state", setup="subscribed"),
    fatal("IDENTIFY bad JSON", _identify_raw(b"{not json"), "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    fatal("IDENTIFY JSON not an object", _identify_raw(b"[1, 2]"), "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    fatal("IDENTIFY string for an int", _identify_raw(b'{"heartbeat_interval": "fast"}'),
          "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    fatal("IDENTIFY float for an int", _identify_raw(b'{"msg_timeout": 1500.5}'),
          "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    fatal("IDENTIFY string for a bool", _identify_raw(b'{"feature_negotiation": "yes"}'),
          "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    fatal("IDENTIFY size 0", b"IDENTIFY\n" + I32.pack(0), "E_BAD_BODY IDENTIFY invalid body size 0"),
    fatal("IDENTIFY negative size", b"IDENTIFY\n" + I32.pack(-1), "E_BAD_BODY IDENTIFY invalid body size -1"),
    fatal("IDENTIFY oversized", b"IDENTIFY\n" + I32.pack(MAX_BODY + 1),
          f"E_BAD_BODY IDENTIFY body too big {MAX_BODY + 1} > {MAX_BODY}"),
    fatal("IDENTIFY size cut by EOF", b"IDENTIFY\n\x00", "E_BAD_BODY IDENTIFY failed to read body size", eof=True),
    fatal("IDENTIFY body cut by EOF", b"IDENTIFY\n" + I32.pack(40) + b'{"client_id"',
          "E_BAD_BODY IDENTIFY failed to read body", eof=True),
    fatal("IDENTIFY heartbeat too short", _identify_raw(b'{"heartbeat_interval": 999}'),
          "E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid"),
    fatal("IDENTIFY heartbeat too long", _identify_raw(b'{"heartbeat_interval": 60001}'),
          "E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid"),
    fatal("IDENTIFY heartbeat -2", _identify_raw(b'{"heartbeat_interval": -2}'),
          "E_BAD_BODY IDENTIFY heartbeat interval (-2) is invalid"),
    fatal("IDENTIFY msg timeout too short", _identify_raw(b'{"msg_timeout": 999}'),
          "E_BAD_BODY IDENTIFY msg timeout (999) is invalid"),
    fatal("IDENTIFY msg timeout too long", _identify_raw(b'{"msg_timeout": 900001}'),
          "E_BAD_BODY IDENTIFY msg timeout (900001) is invalid"),
    fatal("IDENTIFY output buffer too small", _identify_raw(b'{"output_buffer_size": 63}'),
          "E_BAD_BODY IDENTIFY output buffer size (63) is invalid"),
    fatal("IDENTIFY output buffer timeout too short", _identify_raw(b'{"output_buffer_timeout": 24}'),
          "E_BAD_BODY IDENTIFY output buffer timeout (24) is invalid"),
    fatal("IDENTIFY sample rate 100", _identify_raw(b'{"sample_rate": 100}'),
          "E_BAD_BODY IDENTIFY sample rate (100) is invalid"),
    # -- compression and TLS negotiation
    fatal("IDENTIFY snappy and deflate together",
          wire.identify({"feature_negotiation": True, "snappy": True, "deflate": True}),
          "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"),
    Case("IDENTIFY snappy and deflate without feature negotiation is a plain OK", "magic",
         wire.identify({"snappy": True, "deflate": True}), [OK], closed=False),
    fatal("TLS garbage after tls_v1", GARBAGE, NOT_TLS, setup="tls"),
    fatal("TLS record of a version from the future", b"\x16\x30\x01\x00\x10" + GARBAGE[:16], NOT_TLS, setup="tls"),
    fatal("plain commands after tls_v1", wire.pub("errs", b"in the clear"), NOT_TLS, setup="tls"),
    # -- NSQ bytes on the HTTP port: Go's net/http answers them
    Case("NSQ magic and PUB on the HTTP port", "http", wire.MAGIC + wire.pub("errs", b"x"), GO_400, closed=True),
    Case("NSQ IDENTIFY on the HTTP port", "http", wire.MAGIC + wire.identify({}), GO_400, closed=True),
]


def _setup(ctx: Ctx, kind: str) -> None:
    broker = ctx.broker
    port = broker.http_port if kind == "http" else broker.tcp_port
    ctx.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if kind in ("raw", "http"):
        return
    ctx.sock.sendall(wire.MAGIC)
    if kind == "magic":
        return
    if kind == "tls":
        ctx.sock.sendall(wire.identify({"feature_negotiation": True, "tls_v1": True}))
        [(ftype, data)] = ctx.frames(1)
        assert ftype == wire.FRAME_RESPONSE and orjson.loads(data)["tls_v1"] is True
        return
    ctx.sock.sendall(wire.identify({"feature_negotiation": True}))
    [(ftype, _)] = ctx.frames(1)
    assert ftype == wire.FRAME_RESPONSE
    if kind == "identified":
        return
    topic = "owned" if kind == "owned" else "errs"
    if kind == "owned":
        # another consumer of the same channel holds a message in flight
        owner = _conn(broker, identify={}, sub=(topic, "ch"))
        ctx.others.append(owner)
        owner.send(wire.rdy(1))
        with _conn(broker) as p:
            p.pub(topic, b"owned by the other")
        ctx.msg_id = owner.read_message().id
    ctx.sock.sendall(wire.sub(topic, "ch"))
    assert ctx.frames(1) == [OK]


def _assert_closed(ctx: Ctx) -> None:
    """Nothing more comes, then the server closes (EOF or reset)."""
    assert ctx.sock is not None
    ctx.sock.settimeout(5)
    extra = b""
    try:
        while True:
            data = ctx.sock.recv(65536)
            if not data:
                break
            extra += data
    except ConnectionResetError:
        pass
    except socket.timeout:
        pytest.fail("the connection stayed open")
    assert extra == b"" and ctx.pending == [], (extra, ctx.pending)


def _assert_open(ctx: Ctx) -> None:
    """The connection still works: a PUB gets its OK (and nothing else came first)."""
    assert ctx.sock is not None
    ctx.sock.sendall(wire.pub("errs-open", b"still open"))
    assert ctx.frames(1) == [OK]


@pytest.mark.parametrize("case", BAD_INPUT, ids=[c.name for c in BAD_INPUT])
def test_bad_input(broker, ledger, case: Case):
    ctx = Ctx(broker)
    try:
        _setup(ctx, case.setup)
        assert ctx.sock is not None
        ctx.sock.sendall(case.send(ctx) if callable(case.send) else case.send)
        if case.eof:
            ctx.sock.shutdown(socket.SHUT_WR)
        if case.setup == "http":
            ctx.sock.settimeout(5)
            got = b""
            while data := ctx.sock.recv(65536):
                got += data
            assert got == case.frames
            return
        expected = case.frames(ctx) if callable(case.frames) else case.frames
        assert isinstance(expected, list)
        got = ctx.frames(len(expected)) if expected else []
        assert got == expected
        if case.closed:
            _assert_closed(ctx)
        else:
            _assert_open(ctx)
    finally:
        ctx.close()
    _assert_alive(broker)


def test_valid_names_at_the_limits_are_accepted(broker):
    name64 = "n" * 64
    for topic, channel in [(name64, name64), ("a.b_c-D9", "x#ephemeral"), ("t" * 54 + "#ephemeral", "c")]:
        with _conn(broker, identify={}, sub=(topic, channel)) as c:
            c.pub(topic, b"ok")


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


def test_a_command_split_at_every_byte_is_read_whole(broker):
    data = wire.identify({"client_id": "bytewise"}) + wire.pub("bytewise", b"b" * 300) + wire.mpub(
        "bytewise", [b"m1", b"m2"]) + wire.dpub("bytewise", 5, b"d") + wire.NOP
    with _conn(broker) as c:
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(data)):
            c.send(data[i:i + 1])
        for _ in range(4):  # IDENTIFY, PUB, MPUB, DPUB
            c.expect_ok()
        _assert_silent(c)
    wait_for(lambda: [t["message_count"] for t in broker.stats(topic="bytewise")["topics"]] == [4],
             what="4 messages at the router")


# -- the states that ignore input ------------------------------------------------------------------

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
        assert (client["state"], client["ready_count"]) == (4, 0), client
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


def test_pipelined_fins_before_a_bad_line_count_and_the_rest_is_requeued(broker):
    """A consumer's FINs in one write go through the acceptor's FIN-run path (plain lines,
    \n or \r\n, mixed with other commands): those before a bad FIN take effect, the bad
    one gets nsqd's fatal error, and what was still in flight is requeued on the close."""
    topic = "fin_run"
    with _conn(broker, identify={}, sub=(topic, "ch")) as c:
        with _conn(broker) as p:
            p.mpub(topic, [b"m%d" % i for i in range(40)])
        c.send(wire.rdy(40))
        ids = [c.read_message().id for _ in range(40)]
        burst = b"".join(b"FIN " + i + (b"\r\n" if n % 3 else b"\n") for n, i in enumerate(ids[:30]))
        burst += b"NOP\n" + b"FIN " + ids[30] + b"\n" + b"FIN 0123456789abcde\n" + b"FIN " + ids[31] + b"\n"
        _assert_fatal(broker, c, burst, "E_INVALID Invalid Message ID")

    def settled():
        x = broker.stats(topic=topic)["topics"][0]["channels"][0]
        return x if (x["in_flight_count"], x["depth"]) == (0, 9) else None
    ch = wait_for(settled, what="31 FINs taken and 9 messages requeued")
    assert ch["requeue_count"] == 9, ch
    with _conn(broker, identify={}, sub=(topic, "ch")) as c:
        c.send(wire.rdy(20))
        again = sorted(c.read_message().id for _ in range(9))
        assert again == sorted(ids[31:])
        _assert_silent(c, 0.3)


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
        time.sleep(0.25)  # the time is what is tested: a NOP a quarter into the interval
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
    ("POST", "/pub?topic=web%0A", b"x", 400, "INVALID_TOPIC"),  # Go's "$" is the very end
    # what Go's url.ParseQuery refuses
    ("POST", "/pub?topic=web;x=1", b"x", 400, "INVALID_REQUEST"),
    ("POST", "/pub?topic=web&defer=%zz", b"x", 400, "INVALID_REQUEST"),
    ("POST", "/pub?topic=w%e", b"", 400, "MSG_EMPTY"),  # the body is checked first
    ("POST", "/mpub?topic=web%", b"x", 400, "INVALID_REQUEST"),
    ("GET", "/stats?format=json&topic=%zz", None, 400, "INVALID_REQUEST"),
    ("POST", "/topic/create?topic=%1", b"", 400, "INVALID_REQUEST"),
    ("POST", "/channel/pause?topic=web;channel=c", b"", 400, "INVALID_REQUEST"),
    ("POST", "/channel/create?topic=web&channel=c%0A", b"", 400, "INVALID_ARG_CHANNEL"),
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
    assert isinstance(stats["start_time"], int) and stats["producers"] is None  # none open: nsqd says null
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
    assert only["topics"][0]["channels"][0]["clients"] is None  # nsqd's nil slice
    assert only["producers"] is None
    # nsqd's GetStats returns its empty Stats for a topic it does not have
    status, body, _ = broker.http("GET", "/stats?format=json&topic=no-such-topic")
    missing = orjson.loads(body)
    assert (status, missing["topics"], missing["producers"]) == (200, None, None)
    # a channel filter leaves out the topics without that channel
    assert broker.stats(channel="c1")["topics"] == [
        t for t in broker.stats()["topics"] if [c["channel_name"] for c in t["channels"]] == ["c1"]]


# -- after all of it ------------------------------------------------------------------------------------

def test_what_was_acknowledged_before_the_abuse_is_all_delivered(broker, ledger):
    """Last in the module: every message OK'd before the bad input arrives, exactly once, and
    the supervisor and its children are the very processes that were running before."""
    expected = sorted(ledger.bodies)
    got: list[bytes] = []
    with _conn(broker, identify={}, sub=(LEDGER_TOPIC, "keep")) as c:
        c.send(wire.rdy(len(expected) + 10))
        deadline = time.monotonic() + 30
        while len(got) < len(expected) and time.monotonic() < deadline:
            m = c.read_message()
            got.append(m.body)
            c.fin(m.id)
        _assert_silent(c, 0.5)  # and nothing more: no duplicate
    assert len(got) == len(expected) == 241
    assert sorted(got) == expected

    def finished():
        ch = broker.stats(topic=LEDGER_TOPIC)["topics"][0]["channels"][0]
        return ch if (ch["depth"], ch["in_flight_count"], ch["message_count"]) == (0, 0, 241) else None
    wait_for(finished, what="every ledger message finished")
    assert _pids(broker) == ledger.pids
