"""AUTH with every library that has it, against a real auth server (nsqd's contract).

The auth server grants publish and subscribe on one topic (``^allowed-``) to one
secret. Each library, given that secret, must be let through on that topic and refused
with E_UNAUTHORIZED on another (the broker runs with --auth-http-address).

ansq 0.3.0 cannot use AUTH with any nsqd: it sends AUTH and gets the broker's answer,
but never marks the connection authorized, so it refuses every later command itself.
Its test shows the broker's side is right and the refusal is ansq's own.
"""
from __future__ import annotations

import orjson
import pytest

from tests.auth_server import AuthServer
from tests.compat.driving import Driver
from tests.harness import Broker

SECRET = "compat-s3cret"
LIBRARIES = ["pynsq", "gnsq", "nsqjs"]


@pytest.fixture(scope="module")
def auth_server():
    server = AuthServer().start()
    server.grant(SECRET, [{"topic": "^allowed-", "channels": [".*"], "permissions": ["subscribe", "publish"]}],
                 identity="compat-user")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory, auth_server):
    b = Broker(tmp_path_factory.mktemp("auth-broker") / "data", "--auth-http-address", auth_server.address).start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        code = b.stop()
        assert code == 0, b.log_text()[-4000:]


def run_auth(broker, library: str) -> dict:
    d = Driver(library, broker.tcp_address, "auth", f"allowed-{library}", denied_topic=f"denied-{library}",
               auth_secret=SECRET, deadline=30)
    try:
        result = d.expect("auth", 60)
        d.finish()
    finally:
        d.stop()
    return result


@pytest.mark.parametrize("library", LIBRARIES)
def test_auth_allows_one_topic_and_refuses_another(auth_broker, auth_server, library):
    denied = f"denied-{library}"
    result = run_auth(auth_broker, library)
    assert "OK" in result["pub_allowed"], result
    assert "E_UNAUTHORIZED" in result["pub_denied"], result
    assert result["sub_allowed"] == {"received": ["secret-body"], "errors": []}, result
    assert result["sub_denied"]["received"] == [], result
    assert any("E_UNAUTHORIZED" in e for e in result["sub_denied"]["errors"]), result
    # the broker asked the auth server with the library's secret
    queries = auth_server.queries_for(SECRET)
    assert queries and all(q.fields["tls"] == "false" and q.fields["remote_ip"] == "127.0.0.1" for q in queries)
    # nothing reached the refused topic
    assert [t["topic_name"] for t in auth_broker.stats(topic=denied)["topics"] if t["message_count"]] == []


def test_ansq_authenticates_but_then_refuses_itself(auth_broker, auth_server):
    """unsupported-by-client: the broker requires AUTH and answers it as nsqd does;
    ansq 0.3.0 then refuses to send PUB/SUB (its own NSQUnauthorized, nothing sent)."""
    result = run_auth(auth_broker, "ansq")
    assert result["auth_required"] is True, result
    assert orjson.loads(result["auth"]) == {"identity": "compat-user", "identity_url": "", "permission_count": 1}
    client_side = "NSQUnauthorized: NSQ server requires client authorization"
    assert result["pub_allowed"] == result["pub_denied"] == client_side, result
    assert result["sub_allowed"] == result["sub_denied"] == {"received": [], "errors": [client_side]}, result
    assert auth_server.queries_for(SECRET)
