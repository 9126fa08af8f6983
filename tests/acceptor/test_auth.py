"""nsqmp.acceptor.auth: the auth server's answer, nsqd's checks, the request encodings."""
from __future__ import annotations

import orjson
import pytest

from nsqmp.acceptor.auth import AuthFailed, _https_endpoint, endpoint, parse_state, post_body, request_fields


def _state(authorizations, ttl=60, **extra):
    return parse_state(orjson.dumps({"ttl": ttl, "authorizations": authorizations, **extra}), now=100.0)


def test_expiry_and_identity():
    s = _state([], ttl=5, identity="i", identity_url="u")
    assert (s.expires, s.identity, s.identity_url, s.authorizations) == (105.0, "i", "u", [])


def test_null_fields_are_zero_values():
    s = parse_state(b'{"ttl": 1, "identity": null, "authorizations": null}', now=0.0)
    assert (s.identity, s.identity_url, s.authorizations) == ("", "", [])


@pytest.mark.parametrize("body", [
    b'{"ttl": 0}', b'{"ttl": -3}', b'{}', b'{"ttl": "60"}', b'{"ttl": 1.5}', b'[]', b'nope',
    b'{"ttl": 1, "identity": 7}',
    b'{"ttl": 1, "authorizations": [{"topic": ".*", "channels": [".*"], "permissions": ["read"]}]}',
    b'{"ttl": 1, "authorizations": [{"topic": "a(", "channels": [], "permissions": []}]}',
    b'{"ttl": 1, "authorizations": [{"topic": "", "channels": ["*"], "permissions": []}]}',
    b'{"ttl": 1, "authorizations": [{"topic": "", "channels": [1], "permissions": []}]}',
    b'{"ttl": 1, "authorizations": ["x"]}',
])
def test_refused_answers(body):
    with pytest.raises(AuthFailed):
        parse_state(body, now=0.0)


def test_unanchored_regexes_and_what_publish_needs():
    s = _state([{"topic": "ord", "channels": ["bill"], "permissions": ["subscribe", "publish"]}])
    assert s.allows("preorders", "rebilling")  # MatchString finds a match anywhere
    assert not s.allows("preorders", "shipping")
    assert not s.allows("orders", "")  # publish: no channel regex matches the empty string
    s = _state([{"topic": "^ord$", "channels": ["x", ""], "permissions": ["publish"]}])
    assert s.allows("ord", "") and not s.allows("orders", "") and not s.allows("ord", "x")  # no subscribe
    assert not _state([{"topic": ".*", "channels": [], "permissions": ["publish"]}]).allows("t", "")


def test_endpoints():
    assert endpoint("127.0.0.1:4181") == "http://127.0.0.1:4181/auth"
    assert endpoint("https://auth.example/check") == "https://auth.example/check"
    assert _https_endpoint("http://127.0.0.1:80/auth?x=1", b'{"https_port": 4152}') == "https://127.0.0.1:4152/auth?x=1"
    assert _https_endpoint("http://[::1]:80/auth", b'{"https_port": 443}') == "https://[::1]:443/auth"
    assert _https_endpoint("http://h:80/auth", b'{"message": "NO"}') is None


def test_post_body_is_gos_json_of_url_values():
    fields = request_fields("10.0.0.1", True, "cn", b"<&>\xff")
    assert post_body(fields) == (b'{"common_name":["cn"],"remote_ip":["10.0.0.1"],'
                                 b'"secret":["\\u003c\\u0026\\u003e\xef\xbf\xbd"],"tls":["true"]}')
