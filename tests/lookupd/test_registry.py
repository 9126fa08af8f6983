"""The registration DB and Go-style JSON, in process (nsqlookupd's registration_db_test, our way)."""
from __future__ import annotations

import pytest

from nsqmp.lookupd.gojson import decode_peer_fields, dumps
from nsqmp.lookupd.registry import (
    CHANNEL, CLIENT_REGISTRATION, TOPIC, PeerInfo, Producer, Registration, RegistrationDB, filter_by_active,
)

S = 10**9


def _peer(pid: str, last_update: int = 100 * S) -> PeerInfo:
    return PeerInfo(pid, pid, broadcast_address=pid, tcp_port=1, http_port=2, version="v", last_update=last_update)


def test_add_remove_and_the_indexes():
    db = RegistrationDB()
    a, b = _peer("a"), _peer("b")
    t = Registration(TOPIC, "t", "")
    c1, c2 = Registration(CHANNEL, "t", "c1"), Registration(CHANNEL, "t", "c2")
    assert db.add_producer(CLIENT_REGISTRATION, Producer(a))
    assert db.add_producer(t, Producer(a)) and db.add_producer(t, Producer(b))
    assert not db.add_producer(t, Producer(a))  # already there: kept as it was
    assert db.add_producer(c1, Producer(a)) and db.add_producer(c2, Producer(b))
    assert db.find_registrations(CHANNEL, "t", "*") == [c1, c2]
    assert db.find_registrations(TOPIC, "*", "") == [t]
    assert db.find_registrations(TOPIC, "nope", "") == []
    assert [p.peer.id for p in db.find_producers(TOPIC, "t", "")] == ["a", "b"]
    assert [p.peer.id for p in db.find_producers(CHANNEL, "t", "*")] == ["a", "b"]  # each peer once
    assert set(db.lookup_registrations("a")) == {CLIENT_REGISTRATION, t, c1}

    assert db.remove_producer(t, "a") == (True, 1)
    assert db.remove_producer(t, "a") == (False, 1)
    assert db.remove_producer(Registration(TOPIC, "nope", ""), "a") == (False, 0)
    assert db.remove_producer(t, "b") == (True, 0)
    assert db.find_registrations(TOPIC, "t", "") == [t]  # the key stays with no producers
    db.remove_registration(c1)
    db.remove_registration(c1)  # removing twice is harmless
    assert db.find_registrations(CHANNEL, "t", "*") == [c2]
    assert set(db.lookup_registrations("a")) == {CLIENT_REGISTRATION}
    db.remove_registration(c2)
    assert db.lookup_registrations("b") == []
    assert db.find_registrations(CHANNEL, "*", "*") == []


def test_wildcards_match_like_is_match():
    db = RegistrationDB()
    for k in (Registration(TOPIC, "a", ""), Registration(TOPIC, "b", ""), Registration(CHANNEL, "a", "x"),
              Registration(CHANNEL, "b", "x"), Registration(CHANNEL, "b", "y")):
        db.add_registration(k)
    assert [k.key for k in db.find_registrations(CHANNEL, "*", "x")] == ["a", "b"]
    assert [k.subkey for k in db.find_registrations(CHANNEL, "b", "*")] == ["x", "y"]
    assert db.find_registrations(CHANNEL, "b", "x") == [Registration(CHANNEL, "b", "x")]
    assert len(db.find_registrations(CHANNEL, "*", "*")) == 3


def test_filter_by_active_and_tombstones():
    fresh, stale = _peer("fresh", last_update=100 * S), _peer("stale", last_update=50 * S)
    tomb = Producer(_peer("tomb", last_update=100 * S))
    tomb.tombstone(now_ns=99 * S)
    producers = [Producer(fresh), Producer(stale), tomb]
    now = 100 * S
    assert [p.peer.id for p in filter_by_active(producers, 10 * S, 5 * S, now)] == ["fresh"]
    assert [p.peer.id for p in filter_by_active(producers, 60 * S, 1 * S, now)] == ["fresh", "stale", "tomb"]
    assert [p.peer.id for p in filter_by_active(producers, 50 * S, 0, now)] == ["fresh", "stale", "tomb"]
    assert not Producer(fresh).is_tombstoned(10 * S, now)


def test_go_json():
    assert dumps({"b": 1, "a": "<&>\u2028"}, sort_keys=True) == b'{"a":"\\u003c\\u0026\\u003e\\u2028","b":1}'
    assert _peer("x").json == (b'{"remote_address":"x","hostname":"","broadcast_address":"x","tcp_port":1,'
                               b'"http_port":2,"version":"v","topology_zone":"","topology_region":""}')
    assert decode_peer_fields(b'{"Version":"a","version":null,"TCP_PORT":3,"x":[{}]}') == {"version": "a", "tcp_port": 3}
    assert decode_peer_fields(b'{"hostname":"\\ud800\xff"}') == {"hostname": "\ufffd\ufffd"}
    assert decode_peer_fields(b" null ") == {}
    for bad in (b"[]", b'"s"', b"1", b'{"tcp_port":1.0}', b'{"tcp_port":1e2}', b'{"tcp_port":true}',
                b'{"tcp_port":99999999999999999999}', b'{"version":NaN}', b'{"version":1}', b"{} {}", b"[" * 5000):
        with pytest.raises(ValueError):
            decode_peer_fields(bad)
