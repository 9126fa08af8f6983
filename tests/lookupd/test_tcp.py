"""Protocol V1 transcripts against the real daemon: what a broker sends, what it gets back."""
from __future__ import annotations

import socket
import struct
import time

import orjson

from tests.harness import wait_for
from tests.lookupd.helpers import V1, broker, peer


def test_identify_answers_the_lookupds_own_ports_and_names(make_lookupd):
    d = make_lookupd("-broadcast-address=lookupd-1.example")
    with V1(d.tcp_port) as c:
        info = c.identify()
        assert info == {"broadcast_address": "lookupd-1.example", "hostname": socket.gethostname(),
                        "http_port": d.http_port, "tcp_port": d.tcp_port, "version": "1.3.0"}
        # nsqlookupd marshals a Go map: keys sorted
        assert c.cmd("PING") == b"OK"
        c.send(b"IDENTIFY\n")
        assert c.read() == b"E_INVALID cannot IDENTIFY again"
        assert c.closed()


def test_identify_body_errors_are_fatal(lookupd):
    cases = [
        (orjson.dumps({"tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}), b"E_BAD_BODY IDENTIFY missing fields"),
        (orjson.dumps(peer(port=0)), b"E_BAD_BODY IDENTIFY missing fields"),
        (orjson.dumps(peer(version="")), b"E_BAD_BODY IDENTIFY missing fields"),
        (b"{not json", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (b"[1, 2]", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (orjson.dumps(peer(port="4150")), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (orjson.dumps(peer(port=4150.5)), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (orjson.dumps(peer(hostname=7)), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (b"null", b"E_BAD_BODY IDENTIFY missing fields"),
        (b"", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ]
    for body, expected in cases:
        with V1(lookupd.tcp_port) as c:
            assert c.identify_raw(body) == expected, body
            assert c.closed()
    assert lookupd.get("/nodes") == {"producers": []}


def test_identify_json_like_go(lookupd):
    """Keys match case-insensitively, unknown keys are ignored, remote_address is ours."""
    body = orjson.dumps({"BROADCAST_ADDRESS": "b1", "Tcp_Port": 4150, "http_port": 4151, "version": "1.3.0",
                         "remote_address": "spoofed:1", "extra": {"nested": [1, 2]}, "hostname": None,
                         "topology_zone": "z1", "topology_region": "r1"})
    with V1(lookupd.tcp_port) as c:
        assert c.identify_raw(body).startswith(b"{")
        assert c.cmd("REGISTER t") == b"OK"
        (producer,) = lookupd.get("/lookup?topic=t")["producers"]
        local = "{}:{}".format(*c.sock.getsockname()[:2])
        assert producer == {"remote_address": local, "hostname": "", "broadcast_address": "b1", "tcp_port": 4150,
                            "http_port": 4151, "version": "1.3.0", "topology_zone": "z1", "topology_region": "r1"}


def test_identify_body_bounds(lookupd):
    with V1(lookupd.tcp_port) as c:
        c.send(b"IDENTIFY\n" + struct.pack(">i", 2 << 20))
        assert c.read() == b"E_BAD_BODY IDENTIFY body too big 2097152 > 1048576"
        assert c.closed()
    with V1(lookupd.tcp_port) as c:
        c.send(b"IDENTIFY\n" + struct.pack(">i", -5))
        assert c.read() == b"E_BAD_BODY IDENTIFY invalid body size -5"
        assert c.closed()


def test_identify_dribbled_byte_by_byte(lookupd):
    body = orjson.dumps(peer())
    data = b"  V1IDENTIFY\n" + struct.pack(">i", len(body)) + body + b"REGISTER slow ch\n"
    with V1(lookupd.tcp_port, magic=None) as c:
        for i in range(len(data)):
            c.send(data[i:i + 1])
            time.sleep(0.001)  # pacing: each byte in a read of its own
        assert orjson.loads(c.read())["version"] == "1.3.0"
        assert c.read() == b"OK"
    # the connection is gone: the registration went with it, the keys stay
    wait_for(lambda: lookupd.get("/lookup?topic=slow") == {"channels": ["ch"], "producers": []})


def test_commands_need_identify_first(lookupd):
    for line in ("REGISTER t", "UNREGISTER t", "REGISTER t c"):
        with V1(lookupd.tcp_port) as c:
            assert c.cmd("PING") == b"OK"  # PING is allowed (and a no-op) before IDENTIFY
            assert c.cmd(line) == b"E_INVALID client must IDENTIFY"
            assert c.closed()


def test_register_and_unregister_argument_errors(lookupd):
    cases = [
        ("REGISTER", b"E_INVALID REGISTER insufficient number of params"),
        ("REGISTER ", b"E_INVALID REGISTER insufficient number of params"),  # trimmed first
        ("UNREGISTER", b"E_INVALID UNREGISTER insufficient number of params"),
        ("REGISTER bad!topic", b"E_BAD_TOPIC REGISTER topic name 'bad!topic' is not valid"),
        ("REGISTER " + "t" * 65, b"E_BAD_TOPIC REGISTER topic name '" + b"t" * 65 + b"' is not valid"),
        ("REGISTER good bad*chan", b"E_BAD_CHANNEL REGISTER channel name 'bad*chan' is not valid"),
        ("REGISTER  two-spaces", b"E_BAD_TOPIC REGISTER topic name '' is not valid"),  # split on single spaces
        ("UNREGISTER x#y", b"E_BAD_TOPIC UNREGISTER topic name 'x#y' is not valid"),
        ("UNREGISTER good c#ephemeral#ephemeral",
         b"E_BAD_CHANNEL UNREGISTER channel name 'c#ephemeral#ephemeral' is not valid"),
    ]
    for line, expected in cases:
        with V1(lookupd.tcp_port) as c:
            c.identify()
            assert c.cmd(line) == expected, line
            assert c.closed()
    assert lookupd.get("/topics") == {"topics": []}


def test_unknown_commands_and_bad_magic(lookupd):
    with V1(lookupd.tcp_port) as c:
        assert c.cmd("SUB t c") == b"E_INVALID invalid command SUB"
        assert c.closed()
    with V1(lookupd.tcp_port) as c:
        assert c.cmd("") == b"E_INVALID invalid command "
        assert c.closed()
    with V1(lookupd.tcp_port) as c:
        assert c.cmd("ping") == b"E_INVALID invalid command ping"  # case matters
    with V1(lookupd.tcp_port, magic=b"  V2") as c:  # nsqd's magic, not nsqlookupd's
        assert c.read() == b"E_BAD_PROTOCOL"
        assert c.closed()
    with V1(lookupd.tcp_port) as c:
        c.send(b"A" * 5000)  # no newline: a line is at most 4096 bytes
        assert c.read() == b"E_INVALID command line longer than 4096 bytes"
        assert c.closed()
    with V1(lookupd.tcp_port) as c:  # the daemon is fine
        assert c.cmd("  PING\t") == b"OK"  # lines are whitespace-trimmed


def test_register_unregister_topic_and_channel(lookupd):
    with broker(lookupd.tcp_port) as b:
        # pipelined: answers come back in order
        b.send(b"REGISTER t1\nREGISTER t1 c1\nREGISTER t1 c2\nREGISTER t2 c9\nREGISTER t1 c1\n")
        assert [b.read() for _ in range(5)] == [b"OK"] * 5
        assert lookupd.get("/topics") == {"topics": ["t1", "t2"]}
        assert lookupd.get("/channels?topic=t1") == {"channels": ["c1", "c2"]}
        assert len(lookupd.get("/lookup?topic=t2")["producers"]) == 1  # REGISTER t c registers t too

        assert b.cmd("UNREGISTER t1 c1") == b"OK"
        lookup = lookupd.get("/lookup?topic=t1")
        assert lookup["channels"] == ["c1", "c2"]  # a non-ephemeral channel's key stays
        assert len(lookup["producers"]) == 1
        assert [k for k in lookupd.get("/debug") if k.startswith("channel:t1:")] == ["channel:t1:c2"]

        assert b.cmd("UNREGISTER t1") == b"OK"  # the topic, and whatever channels it still had
        assert lookupd.get("/lookup?topic=t1") == {"channels": ["c1", "c2"], "producers": []}
        assert "channel:t1:c2" not in lookupd.get("/debug")
        assert b.cmd("UNREGISTER never-registered") == b"OK"
        assert b.cmd("UNREGISTER never-registered ch") == b"OK"
        assert lookupd.get("/nodes")["producers"][0]["topics"] == ["t2"]


def test_ephemeral_unregister_rules(lookupd):
    with broker(lookupd.tcp_port, tcp_port=1) as a, broker(lookupd.tcp_port, tcp_port=2) as b:
        for c in (a, b):
            assert c.cmd("REGISTER t c#ephemeral") == b"OK"
            assert c.cmd("REGISTER t durable") == b"OK"
            assert c.cmd("REGISTER e#ephemeral") == b"OK"
        assert a.cmd("UNREGISTER t c#ephemeral") == b"OK"
        assert a.cmd("UNREGISTER e#ephemeral") == b"OK"
        # another producer still has them
        assert lookupd.get("/channels?topic=t") == {"channels": ["c#ephemeral", "durable"]}
        assert "e#ephemeral" in lookupd.get("/topics")["topics"]
        assert b.cmd("UNREGISTER t c#ephemeral") == b"OK"
        assert b.cmd("UNREGISTER e#ephemeral") == b"OK"
        assert b.cmd("UNREGISTER t durable") == b"OK"
        assert a.cmd("UNREGISTER t durable") == b"OK"
        # the last producer left: ephemeral registrations go, durable ones stay
        assert lookupd.get("/channels?topic=t") == {"channels": ["durable"]}
        assert lookupd.get("/topics") == {"topics": ["t"]}
        status, body, _ = lookupd.http("GET", "/lookup?topic=e%23ephemeral")
        assert (status, body) == (404, b'{"message":"TOPIC_NOT_FOUND"}')


def test_disconnect_removes_the_peers_registrations(lookupd):
    a = broker(lookupd.tcp_port, tcp_port=1, registrations=("t", "t c"))
    b = broker(lookupd.tcp_port, tcp_port=2, registrations=("t",))
    assert sorted(p["tcp_port"] for p in lookupd.get("/lookup?topic=t")["producers"]) == [1, 2]
    a.close()
    wait_for(lambda: len(lookupd.get("/lookup?topic=t")["producers"]) == 1)
    assert [p["tcp_port"] for p in lookupd.get("/lookup?topic=t")["producers"]] == [2]
    assert [n["tcp_port"] for n in lookupd.get("/nodes")["producers"]] == [2]
    debug = lookupd.get("/debug")
    assert "channel:t:c" not in debug  # no producers left: not in /debug, but the key stays:
    assert lookupd.get("/channels?topic=t") == {"channels": ["c"]}
    b.close()


def test_a_broker_reconnecting_is_a_new_peer(lookupd):
    for _ in range(3):
        with broker(lookupd.tcp_port, registrations=("t",)):
            assert len(lookupd.get("/lookup?topic=t")["producers"]) == 1
    wait_for(lambda: lookupd.get("/nodes") == {"producers": []})
