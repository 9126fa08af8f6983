"""AUTH against real authorization servers (tests/auth_server.py: HTTP on 127.0.0.1, port 0).

Wire transcripts carry nsqd 1.3.0's exact texts (nsqd/protocol_v2.go AUTH and CheckAuth,
internal/auth): every AUTH error is fatal, and so are E_AUTH_FIRST, E_UNAUTHORIZED and
E_AUTH_FAILED on SUB/PUB/MPUB/DPUB.
"""
from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import subprocess
import time

import orjson
import pytest

from nsqmp.client import Connection, wire
from tests.auth_server import AuthServer, dead_address
from tests.harness import Broker, assert_fatal, await_for, wait_for
from tests.integration.test_tls import _frames

I32 = struct.Struct(">i")
MAX_BODY = 4096

# orders*: subscribe on channels starting with "billing" (no channel regex matches "", so no publish);
# logs*: publish anywhere (.* matches "")
RULES = [
    {"topic": "orders", "channels": ["^billing"], "permissions": ["subscribe"]},
    {"topic": "^logs", "channels": [".*"], "permissions": ["publish"]},
]


@pytest.fixture(scope="module")
def authd():
    a = AuthServer().start()
    a.grant("good", RULES, identity="alice", identity_url="https://people.example/alice")
    a.grant("all", [{"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}])
    a.grant("none", [], identity="nobody")
    a.grant("badperm", [{"topic": ".*", "channels": [".*"], "permissions": ["admin"]}])
    a.grant("badregex", [{"topic": "(", "channels": [".*"], "permissions": ["publish"]}])
    a.grant("badchannel", [{"topic": ".*", "channels": ["[z-a]"], "permissions": ["publish"]}])
    a.grant("zerottl", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], ttl=0)
    a.answer("notjson", 200, b"<html>hello</html>")
    a.answer("error500", 500, {"message": "boom"})
    yield a
    a.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, authd):
    b = Broker(tmp_path_factory.mktemp("auth") / "data", "--acceptors", "1", "--routers", "2",
               "--max-body-size", str(MAX_BODY), "--auth-http-address", authd.address).start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        assert b.stop() == 0, b.log_text()[-4000:]


def _conn(broker, secret: str | None = None) -> Connection:
    c = Connection.connect(broker.tcp_address, timeout=5)
    c.identify()
    if secret is not None:
        c.auth(secret)
    return c


def _auth_raw(body: bytes) -> bytes:
    return b"AUTH\n" + I32.pack(len(body)) + body


# -- IDENTIFY and AUTH itself -------------------------------------------------------------

def test_identify_says_auth_required(broker):
    with Connection.connect(broker.tcp_address, timeout=5) as c:
        assert c.identify()["auth_required"] is True


def test_auth_answers_identity_and_sends_nsqds_query(broker, authd):
    with _conn(broker) as c:
        assert c.auth("good") == {"identity": "alice", "identity_url": "https://people.example/alice",
                                  "permission_count": 2}
        c.pub("logs.app", b"line")  # the connection stays usable
    (q,) = authd.queries_for("good")[-1:]
    assert (q.method, q.path) == ("GET", "/auth")
    assert q.fields == {"remote_ip": "127.0.0.1", "tls": "false", "secret": "good", "common_name": ""}
    assert q.headers["accept"] == "application/vnd.nsq; version=1.0"


def test_secret_with_reserved_characters_arrives_intact(broker, authd):
    secret = "s p&c=ö+%/?#"
    authd.grant(secret, [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], identity="odd")
    with _conn(broker) as c:
        assert c.auth(secret.encode())["identity"] == "odd"


@pytest.mark.parametrize("setup, data, text", [
    (None, _auth_raw(b""), "E_BAD_BODY AUTH invalid body size 0"),
    (None, _auth_raw(b"x" * (MAX_BODY + 1)), f"E_BAD_BODY AUTH body too big {MAX_BODY + 1} > {MAX_BODY}"),
    (None, b"AUTH extra\n" + I32.pack(4) + b"good", "E_INVALID AUTH invalid number of parameters"),
    ("good", _auth_raw(b"good"), "E_INVALID AUTH already set"),
    ("all", wire.sub("orders", "billing") + _auth_raw(b"all"), "E_INVALID cannot AUTH in current state"),
    (None, _auth_raw(b"unknown-secret"), "E_AUTH_FAILED AUTH failed"),  # the server said 403
    (None, _auth_raw(b"error500"), "E_AUTH_FAILED AUTH failed"),
    (None, _auth_raw(b"notjson"), "E_AUTH_FAILED AUTH failed"),
    (None, _auth_raw(b"badperm"), "E_AUTH_FAILED AUTH failed"),  # unknown permission
    (None, _auth_raw(b"badregex"), "E_AUTH_FAILED AUTH failed"),  # topic regex does not compile
    (None, _auth_raw(b"badchannel"), "E_AUTH_FAILED AUTH failed"),  # channel regex does not compile
    (None, _auth_raw(b"zerottl"), "E_AUTH_FAILED AUTH failed"),  # ttl must be > 0
    (None, _auth_raw(b"none"), "E_UNAUTHORIZED AUTH no authorizations found"),
])
def test_auth_errors_are_fatal(broker, setup, data, text):
    c = _conn(broker, setup)
    if data.startswith(b"SUB"):
        # the SUB's OK comes first, then the AUTH error
        c.send(data)
        assert c.read_frame().data == b"OK"
        data = b""
    assert_fatal(c, data, text)


@pytest.mark.parametrize("data, text", [
    (wire.pub("logs", b"x"), "E_AUTH_FIRST AUTH required before PUB"),
    (wire.mpub("logs", [b"x", b"y"]), "E_AUTH_FIRST AUTH required before MPUB"),
    (wire.dpub("logs", 10, b"x"), "E_AUTH_FIRST AUTH required before DPUB"),
    (wire.sub("orders", "billing"), "E_AUTH_FIRST AUTH required before SUB"),
])
def test_commands_before_auth(broker, data, text):
    assert_fatal(_conn(broker), data, text)


def test_mpub_is_checked_before_its_body_arrives(broker):
    """nsqd checks MPUB's authorization before reading the body: the error comes at once."""
    c = _conn(broker)
    assert_fatal(c, b"MPUB logs\n", "E_AUTH_FIRST AUTH required before MPUB")


def test_auth_disabled(tmp_path):
    b = Broker(tmp_path / "data").start()
    try:
        c = Connection.connect(b.tcp_address, timeout=5)
        assert c.identify()["auth_required"] is False
        assert_fatal(c, _auth_raw(b"secret"), "E_AUTH_DISABLED AUTH disabled")
        c = Connection.connect(b.tcp_address, timeout=5)
        c.pub("free", b"no auth needed")  # and nothing asks for it
        c.close()
    finally:
        assert b.stop() == 0


# -- permissions --------------------------------------------------------------------------

@pytest.mark.parametrize("cmd, data", [
    ("SUB orders billing", wire.sub("orders", "billing")),
    ("SUB preorders2 billing-eu (unanchored topic)", wire.sub("preorders2", "billing-eu")),
    ("PUB logs", wire.pub("logs", b"x")),
    ("PUB logs-2 (unanchored channel .*)", wire.pub("logs-2", b"x")),
    ("MPUB logs", wire.mpub("logs", [b"a", b"b"])),
    ("DPUB logs", wire.dpub("logs", 5, b"x")),
])
def test_allowed(broker, cmd, data):
    with _conn(broker, "good") as c:
        c.send(data)
        c.expect_ok()


@pytest.mark.parametrize("data, text", [
    (wire.sub("orders", "shipping"), 'E_UNAUTHORIZED AUTH failed for SUB on "orders" "shipping"'),
    (wire.sub("logs", "billing"), 'E_UNAUTHORIZED AUTH failed for SUB on "logs" "billing"'),  # publish only
    (wire.pub("orders", b"x"), 'E_UNAUTHORIZED AUTH failed for PUB on "orders" ""'),  # no channel regex matches ""
    (wire.pub("mylogs", b"x"), 'E_UNAUTHORIZED AUTH failed for PUB on "mylogs" ""'),  # ^logs is anchored
    (wire.mpub("mylogs", [b"x"]), 'E_UNAUTHORIZED AUTH failed for MPUB on "mylogs" ""'),
    (wire.dpub("orders", 5, b"x"), 'E_UNAUTHORIZED AUTH failed for DPUB on "orders" ""'),
])
def test_refused(broker, data, text):
    assert_fatal(_conn(broker, "good"), data, text)


def test_pipelined_auth_then_commands(broker):
    """AUTH and what follows it in one write: parsing waits for the auth server, then goes on in order."""
    with Connection.connect(broker.tcp_address, timeout=5) as c:
        c.send(wire.identify({"feature_negotiation": True}) + _auth_raw(b"good")
               + wire.pub("logs", b"1") + wire.sub("orders", "billing") + wire.pub("logs", b"2"))
        frames = [c.read_frame() for _ in range(5)]
        assert orjson.loads(frames[0].data)["auth_required"] is True
        assert orjson.loads(frames[1].data)["identity"] == "alice"
        assert [f.data for f in frames[2:]] == [b"OK", b"OK", b"OK"]


def test_a_slow_auth_server_does_not_hold_up_other_clients(broker, authd):
    """One acceptor: while an AUTH waits 1.5 s for its answer, another client's PUB is answered."""
    authd.grant("slow", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], delay=1.5)
    slow = _conn(broker)
    slow.send(_auth_raw(b"slow"))
    wait_for(lambda: authd.queries_for("slow"), what="the query under way")
    with _conn(broker, "all") as fast:
        fast.pub("logs", b"meanwhile")
        fast.pub("logs", b"and again")
    slow.sock.settimeout(0.05)
    with pytest.raises(socket.timeout):
        slow.read_frame()  # the slow AUTH is still unanswered after the other client's OKs
    slow.sock.settimeout(10)
    assert orjson.loads(slow.read_frame().data)["permission_count"] == 1
    slow.pub("anything", b"x")
    slow.close()


def test_waiting_for_the_auth_server_is_not_client_silence(broker, authd):
    """nsqd's read deadline (two heartbeat intervals) does not run while AUTH is being served."""
    authd.grant("slow-hb", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], delay=2.5)
    with Connection.connect(broker.tcp_address, timeout=10) as c:
        c.identify(heartbeat_interval=1000)
        c.send(_auth_raw(b"slow-hb"))
        assert orjson.loads(c.read_frame().data)["permission_count"] == 1  # heartbeats are skipped
        c.pub("logs", b"still connected")


def test_auth_fields_in_stats(broker):
    with _conn(broker, "good") as c:
        c.sub("orders", "billing")
        with _conn(broker, "all") as anonymous:
            anonymous.sub("orders", "billing")
            clients = broker.stats(topic="orders")["topics"][0]["channels"][0]["clients"]
            assert len(clients) == 2
            by_identity = {cl.get("auth_identity"): cl for cl in clients}
            alice = by_identity["alice"]
            assert alice["authed"] is True
            assert alice["auth_identity_url"] == "https://people.example/alice"
            # an empty identity and url are left out, as nsqd's omitempty does
            other = by_identity[None]
            assert other["authed"] is True
            assert "auth_identity" not in other and "auth_identity_url" not in other


# -- ttl ----------------------------------------------------------------------------------

def test_ttl_expiry_asks_again(broker, authd):
    authd.grant("short", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], ttl=1)
    with _conn(broker, "short") as c:
        c.pub("logs", b"a")
        assert len(authd.queries_for("short")) == 1  # cached within the ttl
        time.sleep(1.2)  # the ttl (1 s) runs out: the time is what is tested
        c.pub("logs", b"b")  # re-asked with the stored secret, still allowed
        assert len(authd.queries_for("short")) == 2
        c.pub("logs", b"c")
        assert len(authd.queries_for("short")) == 2


def test_ttl_expiry_with_a_failing_server_is_fatal(broker, authd):
    authd.grant("revoked", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], ttl=1)
    c = _conn(broker, "revoked")
    c.pub("logs", b"a")
    authd.answer("revoked", 403, {"message": "REVOKED"})
    time.sleep(1.2)  # the ttl (1 s) runs out: the time is what is tested
    assert_fatal(c, wire.pub("logs", b"b"), "E_AUTH_FAILED AUTH failed")
    assert len(authd.queries_for("revoked")) == 2


def test_ttl_expiry_with_narrower_rights(broker, authd):
    authd.grant("narrow", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], ttl=1)
    c = _conn(broker, "narrow")
    c.pub("events", b"a")
    authd.grant("narrow", [{"topic": "^logs$", "channels": [".*"], "permissions": ["publish"]}], ttl=1)
    time.sleep(1.2)  # the ttl (1 s) runs out: the time is what is tested
    assert_fatal(c, wire.mpub("events", [b"b"]), 'E_UNAUTHORIZED AUTH failed for MPUB on "events" ""')


# -- methods, endpoints, fail-over ----------------------------------------------------------

def test_post_method_and_url_endpoint(make_broker):
    a = AuthServer().start()
    try:
        a.grant("p", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], identity="poster")
        b = make_broker("--auth-http-address", a.url("/v1/nsq-auth"), "--auth-http-request-method", "post")
        with _conn(b, "p") as c:
            c.pub("t", b"x")
        (q,) = a.queries
        assert (q.method, q.path) == ("POST", "/v1/nsq-auth")
        assert q.headers["content-type"] == "application/json"
        assert q.headers["accept"] == "application/vnd.nsq; version=1.0"
        # json.Marshal(url.Values): sorted keys, each value an array of strings
        assert q.body == b'{"common_name":[""],"remote_ip":["127.0.0.1"],"secret":["p"],"tls":["false"]}'
        odd = 'a<b>&"c" ö'
        a.grant(odd, [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], identity="odd")
        with _conn(b) as c:
            assert c.auth(odd.encode())["identity"] == "odd"
        assert a.queries[-1].body == (b'{"common_name":[""],"remote_ip":["127.0.0.1"],'
                                      b'"secret":["a\\u003cb\\u003e\\u0026\\"c\\" \xc3\xb6"],"tls":["false"]}')
    finally:
        a.stop()


def test_redirects_are_followed_as_gos_client_does(make_broker):
    a = AuthServer().start()
    try:
        a.grant("r", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], identity="moved")
        a.redirects["/auth"] = (302, "/auth-v2")
        a.redirects["/auth-v2"] = (307, f"http://127.0.0.1:{a.port}/auth-v3")
        b = make_broker("--auth-http-address", a.address)
        with _conn(b, "r") as c:
            c.pub("t", b"x")
        assert a.redirected == [("GET", "/auth"), ("GET", "/auth-v2")]
        assert [(q.method, q.path) for q in a.queries] == [("GET", "/auth-v3")]
        # POST: 307 keeps the method and body, 303 goes on as a GET without them
        a.redirected.clear()
        a.queries.clear()
        a.redirects["/post"] = (307, "/post-2")
        b = make_broker("--auth-http-address", a.url("/post"), "--auth-http-request-method", "post")
        with _conn(b, "r") as c:
            c.pub("t", b"y")
        assert [(q.method, q.path, q.fields["secret"]) for q in a.queries] == [("POST", "/post-2", "r")]
        a.redirects["/post-2"] = (303, "/after-303")
        with _conn(b) as c:
            assert_fatal(c, _auth_raw(b"r"), "E_AUTH_FAILED AUTH failed")  # the GET has no secret: 403
        assert (a.queries[-1].method, a.queries[-1].path, a.queries[-1].fields) == ("GET", "/after-303", {})
    finally:
        a.stop()


def test_a_redirect_loop_fails(make_broker):
    a = AuthServer().start()
    try:
        a.redirects["/auth"] = (302, "/auth")
        b = make_broker("--auth-http-address", a.address)
        assert_fatal(_conn(b), _auth_raw(b"r"), "E_AUTH_FAILED AUTH failed")
        assert len(a.redirected) == 11  # the first request and 10 redirects, as Go's client
    finally:
        a.stop()


def test_fail_over_to_the_next_server(make_broker):
    a = AuthServer().start()
    try:
        a.grant("s", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}])
        down = dead_address()
        b = make_broker("--auth-http-address", down, "--auth-http-address", a.address)
        for i in range(6):  # the first server tried is random: each AUTH ends at the live one
            with _conn(b, "s") as c:
                c.pub("t", b"%d" % i)
        assert len(a.queries_for("s")) == 6
    finally:
        a.stop()


def test_every_server_down_fails_the_auth(make_broker):
    b = make_broker("--auth-http-address", dead_address(), "--auth-http-address", dead_address())
    assert_fatal(_conn(b), _auth_raw(b"s"), "E_AUTH_FAILED AUTH failed")
    assert b.http("GET", "/ping")[:2] == (200, b"OK")


def test_a_server_that_never_answers_times_out(make_broker):
    a = AuthServer().start()
    try:
        a.grant("hang", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], delay=10.0)
        b = make_broker("--auth-http-address", a.address, "--http-client-request-timeout", "500ms")
        c = _conn(b)
        started = time.monotonic()
        assert_fatal(c, _auth_raw(b"hang"), "E_AUTH_FAILED AUTH failed")
        assert time.monotonic() - started < 8.0  # gave up long before the server would answer
    finally:
        a.stop()


# -- TLS: common_name, and an https auth server trusted through --tls-root-ca-file ----------

def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path):
    """A CA, a server certificate for 127.0.0.1 and a client certificate (CN=alice-client)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca_key, ca = tmp_path / "ca.key", tmp_path / "ca.pem"
    _openssl("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "1", "-subj", "/CN=test-ca")
    out = {"ca": str(ca)}
    for name, cn, ext in (("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1"),
                          ("client", "alice-client", "extendedKeyUsage=clientAuth")):
        key, csr, crt, extfile = (tmp_path / f"{name}{s}" for s in (".key", ".csr", ".pem", ".ext"))
        extfile.write_text(ext + "\n")
        _openssl("req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={cn}")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
                 "-out", str(crt), "-days", "1", "-extfile", str(extfile))
        out[name] = (str(crt), str(key))
    return out


def test_tls_client_certificate_and_https_auth_server(make_broker, pki):
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(*pki["server"])
    a = AuthServer(ssl_context=server_ctx).start()
    try:
        a.grant("tls-secret", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], identity="alice")
        b = make_broker("--tls-cert", pki["server"][0], "--tls-key", pki["server"][1], "--https-address", "127.0.0.1:0",
                        "--tls-client-auth-policy", "require-verify", "--tls-root-ca-file", pki["ca"],
                        "--auth-http-address", a.url())
        raw = socket.create_connection(("127.0.0.1", b.tcp_port), timeout=10)
        raw.sendall(wire.MAGIC + wire.identify({"feature_negotiation": True, "tls_v1": True}))
        reader = wire.FrameReader()
        ((_, body),) = _frames(raw, reader)
        assert orjson.loads(body)["auth_required"] is True
        ctx = ssl.create_default_context(cafile=pki["ca"])
        ctx.load_cert_chain(*pki["client"])
        tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        reader = wire.FrameReader()
        assert _frames(tls, reader) == [(wire.FRAME_RESPONSE, b"OK")]
        tls.sendall(_auth_raw(b"tls-secret") + wire.pub("secure", b"x"))
        frames = _frames(tls, reader, 2)
        assert orjson.loads(frames[0][1])["identity"] == "alice"
        assert frames[1] == (wire.FRAME_RESPONSE, b"OK")
        tls.close()
        (q,) = a.queries
        assert q.fields == {"remote_ip": "127.0.0.1", "tls": "true", "secret": "tls-secret",
                            "common_name": "alice-client"}
    finally:
        a.stop()


def test_https_auth_server_not_trusted_fails(make_broker, pki):
    """Without the CA in --tls-root-ca-file the auth server's certificate is not trusted."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(*pki["server"])
    a = AuthServer(ssl_context=server_ctx).start()
    try:
        a.grant("s", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}])
        b = make_broker("--auth-http-address", a.url())
        assert_fatal(_conn(b), _auth_raw(b"s"), "E_AUTH_FAILED AUTH failed")
        assert a.queries == []
    finally:
        a.stop()


def test_403_with_an_https_port_is_retried_over_https(make_broker, pki):
    """nsqd's HTTP client follows a 403 {"https_port": N} from a plain endpoint to https on N."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(*pki["server"])
    secure = AuthServer(ssl_context=server_ctx).start()
    plain = AuthServer().start()
    try:
        secure.grant("s", [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}], identity="via-https")
        plain.answer("s", 403, {"message": "TLS_REQUIRED", "https_port": secure.port})
        b = make_broker("--auth-http-address", plain.address, "--tls-root-ca-file", pki["ca"])
        with _conn(b) as c:
            assert c.auth("s")["identity"] == "via-https"
        assert [q.path for q in plain.queries] == ["/auth"] and [q.path for q in secure.queries] == ["/auth"]
    finally:
        plain.stop()
        secure.stop()


# -- pynsq ---------------------------------------------------------------------------------

def test_pynsq_with_auth_secret(broker, authd):
    """pynsq's Writer and Reader send AUTH (auth_secret) after IDENTIFY: allowed on one
    topic, refused on another."""
    import nsq

    authd.grant("pynsq", [
        {"topic": "^granted$", "channels": [".*"], "permissions": ["publish", "subscribe"]},
    ], identity="pynsq-user")

    async def scenario() -> tuple[list, list, list]:
        got: list[bytes] = []
        arrived = asyncio.Event()

        def handler(message) -> bool:
            got.append(message.body)
            if len(got) >= 3:
                arrived.set()
            return True

        reader = nsq.Reader("granted", "ch", handler, nsqd_tcp_addresses=[broker.tcp_address],
                            max_in_flight=10, auth_secret="pynsq")
        writer = nsq.Writer([broker.tcp_address], auth_secret="pynsq")
        await await_for(lambda: writer.conns, what="the pynsq Writer's connection")
        acks: list = []
        refused: list = []
        writer.mpub("granted", [b"1", b"2", b"3"], callback=lambda conn, data: acks.append(data))
        await asyncio.wait_for(arrived.wait(), 20)
        writer.pub("forbidden", b"nope", callback=lambda conn, data: refused.append(data))
        await await_for(lambda: refused, what="the refusal")
        reader.connect_to_nsqd = lambda *a, **k: None  # no reconnect after close
        reader.close()
        writer.connect_to_nsqd = lambda *a, **k: None
        for conn in list(writer.conns.values()):
            conn.close()
        await await_for(lambda: not reader.conns and not writer.conns, what="pynsq to see its connections closed")
        return got, acks, refused

    got, acks, refused = asyncio.run(scenario())
    assert sorted(got) == [b"1", b"2", b"3"]
    assert acks == [b"OK"]
    assert len(refused) == 1 and "E_UNAUTHORIZED" in str(refused[0])
    topics = {t["topic_name"] for t in broker.stats()["topics"]}
    assert "forbidden" not in topics
