"""TLS upgrade after IDENTIFY (tls_v1), --tls-required, and pynsq over TLS."""
from __future__ import annotations

import socket
import ssl
import subprocess

import orjson
import pytest

from nsqmp.client import wire
from tests.harness import pynsq_round_trip


@pytest.fixture
def cert(tmp_path):
    """A self-signed certificate for 127.0.0.1, made by openssl for this test."""
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(crt), "-days", "1", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    return str(crt), str(key)


def _frames(sock, reader: wire.FrameReader, n: int = 1) -> list:
    got: list = []
    while len(got) < n:
        data = sock.recv(65536)
        if not data:
            raise EOFError
        got += reader.feed(data)
    return got


def _upgrade(raw, reader: wire.FrameReader) -> tuple[ssl.SSLSocket, ssl.SSLContext, wire.FrameReader]:
    """IDENTIFY with tls_v1 on raw (its magic sent), the handshake, the upgrade's OK over TLS."""
    raw.sendall(wire.identify({"feature_negotiation": True, "tls_v1": True}))
    ((ftype, body),) = _frames(raw, reader)
    assert orjson.loads(body)["tls_v1"] is True
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    reader = wire.FrameReader()
    assert _frames(tls, reader) == [(wire.FRAME_RESPONSE, b"OK")]
    return tls, ctx, reader


def test_tls_upgrade_then_publish(make_broker, cert):
    b = make_broker("--tls-cert", cert[0], "--tls-key", cert[1], "--https-address", "127.0.0.1:0")
    raw = socket.create_connection(("127.0.0.1", b.tcp_port), timeout=10)
    raw.sendall(wire.MAGIC)
    tls, ctx, reader = _upgrade(raw, wire.FrameReader())
    tls.sendall(wire.pub("secure", b"s3cret") + wire.sub("secure", "ch") + wire.rdy(1))
    frames = _frames(tls, reader, 3)
    assert frames[0] == (wire.FRAME_RESPONSE, b"OK") and frames[1] == (wire.FRAME_RESPONSE, b"OK")
    assert frames[2][0] == wire.FRAME_MESSAGE and frames[2][1][26:] == b"s3cret"
    client = b.stats(topic="secure")["topics"][0]["channels"][0]["clients"][0]
    assert client["tls"] is True
    # nsqd's names: TLS1.3's suites are not in its table, so it prints their number
    assert client["tls_version"] == {"TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}[tls.version()]
    assert client["tls_negotiated_protocol_is_mutual"] is True
    if tls.version() == "TLSv1.3":
        number = next(c["id"] & 0xFFFF for c in ctx.get_ciphers() if c["name"] == tls.cipher()[0])
        assert client["tls_cipher_suite"] == f"Unknown {number}"
    tls.close()


def test_without_a_certificate_tls_is_not_negotiated(broker):
    s = socket.create_connection(("127.0.0.1", broker.tcp_port), timeout=10)
    s.sendall(wire.MAGIC + wire.identify({"feature_negotiation": True, "tls_v1": True}))
    ((_, body),) = _frames(s, wire.FrameReader())
    assert orjson.loads(body)["tls_v1"] is False
    s.close()


def test_tls_required_refuses_plain_commands(make_broker, cert):
    b = make_broker("--tls-cert", cert[0], "--tls-key", cert[1], "--tls-required", "true",
                    "--https-address", "127.0.0.1:0")
    s = socket.create_connection(("127.0.0.1", b.tcp_port), timeout=10)
    s.sendall(wire.MAGIC + wire.pub("t", b"x"))
    assert _frames(s, wire.FrameReader()) == [(wire.FRAME_ERROR, b"E_INVALID cannot PUB in current state (TLS required)")]
    s.close()


def test_pynsq_over_tls(make_broker, cert):
    b = make_broker("--tls-cert", cert[0], "--tls-key", cert[1], "--https-address", "127.0.0.1:0")
    opts = {"tls_v1": True, "tls_options": {"cert_reqs": ssl.CERT_NONE}}
    bodies = [b"t%02d" % i for i in range(50)]
    assert sorted(pynsq_round_trip(b.tcp_address, "tlst", bodies, reader_opts=opts, writer_opts=opts)) == bodies


def _https_port(b) -> int:
    import re

    m = re.search(r"HTTPS: listening on [\d.]+:(\d+)", b.log_text())
    assert m, b.log_text()
    return int(m.group(1))


def test_https_listener_and_tls_required_http(make_broker, cert):
    import http.client

    b = make_broker("--tls-cert", cert[0], "--tls-key", cert[1], "--https-address", "127.0.0.1:0",
                    "--tls-required", "true")
    port = _https_port(b)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    conn.request("GET", "/ping")
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (200, b"OK")
    conn.request("POST", "/pub?topic=viahttps", body=b"x")
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (200, b"OK")
    conn.close()
    status, body, _ = b.http("GET", "/ping")  # plain HTTP with --tls-required=true
    assert status == 403 and orjson.loads(body) == {"message": "TLS_REQUIRED", "https_port": port}


def test_no_https_listener_without_a_certificate(broker):
    assert "HTTPS: listening" not in broker.log_text()


def test_no_heartbeat_in_the_clear_while_the_client_has_not_started_tls(make_broker, cert):
    """Between IDENTIFY's answer and the TLS handshake nothing may be written in the clear
    (nsqd's heartbeat waits for the handshake): a heartbeat there would be read as the
    start of the server's TLS records."""
    b = make_broker("--tls-cert", cert[0], "--tls-key", cert[1])
    raw = socket.create_connection(("127.0.0.1", b.tcp_port), timeout=10)
    raw.sendall(wire.MAGIC + wire.identify({"feature_negotiation": True, "tls_v1": True,
                                            "heartbeat_interval": 1000}))
    ((ftype, body),) = _frames(raw, wire.FrameReader())
    assert orjson.loads(body)["tls_v1"] is True
    raw.settimeout(2.5)  # two heartbeat intervals, inside the 5 s handshake deadline
    with pytest.raises(TimeoutError):
        raw.recv(65536)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    raw.settimeout(10)
    tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    assert _frames(tls, wire.FrameReader()) == [(wire.FRAME_RESPONSE, b"OK")]
    tls.close()


def test_a_publisher_in_the_clear_that_upgrades_keeps_its_handshake_from_the_busy_poll(make_broker, cert):
    # one acceptor: the connection that publishes is the one its busy poll spins on
    # (nsqmp.acceptor.hotspin); its TLS handshake must reach the TLS layer, not the parser
    b = make_broker("--tls-cert", cert[0], "--tls-key", cert[1], "--acceptors", "1")
    raw = socket.create_connection(("127.0.0.1", b.tcp_port), timeout=10)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = wire.FrameReader()
    raw.sendall(wire.MAGIC)
    for i in range(200):  # answered one at a time: the poll is in its window after each
        raw.sendall(wire.pub("clear_then_tls", b"clear%03d" % i))
        assert _frames(raw, reader) == [(wire.FRAME_RESPONSE, b"OK")]
    tls, _, reader = _upgrade(raw, reader)
    for i in range(200):
        tls.sendall(wire.pub("clear_then_tls", b"tls%03d" % i))
        assert _frames(tls, reader) == [(wire.FRAME_RESPONSE, b"OK")]
    tls.close()
    assert b.stats(topic="clear_then_tls")["topics"][0]["message_count"] == 400
