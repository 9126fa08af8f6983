"""nsqd's administrative HTTP API: topics and channels created, paused, emptied, deleted."""
from __future__ import annotations

import time

import pytest

from nsqmp.client import Connection
from tests.harness import Broker, wait_for


def post(b, path):
    status, body, _ = b.http("POST", path)
    return status, body


def names(b) -> dict:
    return {t["topic_name"]: sorted(c["channel_name"] for c in t["channels"]) for t in b.stats()["topics"]}


def test_create_and_delete_topics_and_channels(broker):
    assert post(broker, "/topic/create?topic=adm") == (200, b"")
    assert post(broker, "/channel/create?topic=adm&channel=c1") == (200, b"")
    assert post(broker, "/channel/create?topic=adm&channel=c2") == (200, b"")
    assert names(broker)["adm"] == ["c1", "c2"]
    assert post(broker, "/channel/delete?topic=adm&channel=c2") == (200, b"")
    assert names(broker)["adm"] == ["c1"]
    assert post(broker, "/topic/delete?topic=adm") == (200, b"")
    assert "adm" not in names(broker)
    assert not (broker.data_path / "topics" / "adm").exists()


@pytest.mark.parametrize("path,status,message", [
    ("/topic/create", 400, "MISSING_ARG_TOPIC"),
    ("/topic/create?topic=a!b", 400, "INVALID_TOPIC"),
    ("/topic/delete?topic=nope", 404, "TOPIC_NOT_FOUND"),
    ("/topic/pause?topic=nope", 404, "TOPIC_NOT_FOUND"),
    ("/topic/empty?topic=nope", 404, "TOPIC_NOT_FOUND"),
    ("/channel/create?topic=nope&channel=c", 404, "TOPIC_NOT_FOUND"),
    ("/channel/create?channel=c", 400, "MISSING_ARG_TOPIC"),
    ("/channel/create?topic=t", 400, "MISSING_ARG_CHANNEL"),
    ("/channel/create?topic=t&channel=a!b", 400, "INVALID_ARG_CHANNEL"),
    ("/channel/create?topic=a!b&channel=c", 400, "INVALID_ARG_TOPIC"),
    ("/channel/delete?topic=exists&channel=nope", 404, "CHANNEL_NOT_FOUND"),
    ("/channel/empty?topic=exists&channel=nope", 404, "CHANNEL_NOT_FOUND"),
    ("/channel/pause?topic=exists&channel=nope", 404, "CHANNEL_NOT_FOUND"),
])
def test_errors(broker, path, status, message):
    post(broker, "/topic/create?topic=exists")
    got_status, body = post(broker, path)
    assert (got_status, body) == (status, b'{"message":"%s"}' % message.encode())
    assert broker.http("GET", path)[0] == 405


def test_pause_channel_stops_delivery_and_survives_a_restart(tmp_path):
    b = Broker(tmp_path / "data").start()
    try:
        post(b, "/topic/create?topic=p")
        post(b, "/channel/create?topic=p&channel=c")
        assert post(b, "/channel/pause?topic=p&channel=c") == (200, b"")
        with Connection.connect(b.tcp_address) as p:
            p.mpub("p", [b"1", b"2", b"3"])
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("p", "c", rdy=10)
            c.sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                c.read_message()
        assert b.stop() == 0
        b = Broker(b.data_path).start()
        ch = b.stats(topic="p")["topics"][0]["channels"][0]
        assert ch["paused"] is True and ch["depth"] == 3
        assert post(b, "/channel/unpause?topic=p&channel=c") == (200, b"")
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("p", "c", rdy=10)
            assert sorted(c.read_message().body for _ in range(3)) == [b"1", b"2", b"3"]
    finally:
        if b.proc.poll() is None:
            assert b.stop() == 0


def _depths(b, topic: str) -> tuple[int, dict]:
    [t] = b.stats(topic=topic)["topics"]
    return t["depth"], {c["channel_name"]: c["depth"] for c in t["channels"]}


def test_pause_topic_holds_messages_at_the_topic(make_broker):
    """As nsqd: a paused topic stops handing messages to its channels (topic depth grows),
    its channels go on delivering what they already have, and on unpause every channel,
    including one created during the pause, gets what was held; across a kill -9 too."""
    b = make_broker()
    post(b, "/topic/create?topic=pt")
    post(b, "/channel/create?topic=pt&channel=c")
    with Connection.connect(b.tcp_address) as p:
        p.pub("pt", b"before")
    wait_for(lambda: _depths(b, "pt") == (0, {"c": 1}), what="before in the channel")
    assert post(b, "/topic/pause?topic=pt") == (200, b"")
    assert b.stats(topic="pt")["topics"][0]["paused"] is True
    with Connection.connect(b.tcp_address) as p:
        p.mpub("pt", [b"held1", b"held2"])
    wait_for(lambda: _depths(b, "pt") == (2, {"c": 1}), what="held at the topic")
    with Connection.connect(b.tcp_address) as c:
        c.identify()
        c.sub("pt", "c", rdy=10)
        m = c.read_message()
        assert m.body == b"before"  # what the channel had still flows
        c.fin(m.id)
        c.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            c.read_message()
    post(b, "/channel/create?topic=pt&channel=late")
    wait_for(lambda: _depths(b, "pt") == (2, {"c": 0, "late": 0}), what="the FIN")
    b.kill()
    b = make_broker(data=b.data_path.name)
    assert b.stats(topic="pt")["topics"][0]["paused"] is True
    assert _depths(b, "pt") == (2, {"c": 0, "late": 0})
    assert post(b, "/topic/unpause?topic=pt") == (200, b"")
    assert _depths(b, "pt") == (0, {"c": 2, "late": 2})
    for channel in ("c", "late"):
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("pt", channel, rdy=10)
            assert sorted(c.read_message().body for _ in range(2)) == [b"held1", b"held2"]


def test_empty_a_paused_topic_drops_what_it_held(make_broker):
    b = make_broker()
    post(b, "/topic/create?topic=pe")
    post(b, "/channel/create?topic=pe&channel=c")
    post(b, "/topic/pause?topic=pe")
    with Connection.connect(b.tcp_address) as p:
        p.mpub("pe", [b"x", b"y"])
    wait_for(lambda: _depths(b, "pe") == (2, {"c": 0}), what="held")
    assert post(b, "/topic/empty?topic=pe") == (200, b"")
    assert _depths(b, "pe") == (0, {"c": 0})
    with Connection.connect(b.tcp_address) as p:
        p.pub("pe", b"z")
    post(b, "/topic/unpause?topic=pe")
    wait_for(lambda: _depths(b, "pe") == (0, {"c": 1}), what="z in the channel")
    b.kill()
    b = make_broker(data=b.data_path.name)
    assert _depths(b, "pe") == (0, {"c": 1})  # x and y stay gone


def test_empty_channel_drops_everything_and_stays_empty_after_restart(tmp_path):
    b = Broker(tmp_path / "data").start()
    try:
        post(b, "/topic/create?topic=e")
        post(b, "/channel/create?topic=e&channel=c")
        with Connection.connect(b.tcp_address) as p:
            p.mpub("e", [b"%d" % i for i in range(50)])
        wait_for(lambda: b.stats(topic="e")["topics"][0]["channels"][0]["depth"] == 50, what="queued")
        assert post(b, "/channel/empty?topic=e&channel=c") == (200, b"")
        assert b.stats(topic="e")["topics"][0]["channels"][0]["depth"] == 0
        with Connection.connect(b.tcp_address) as p:
            p.pub("e", b"after")
        b.kill()
        b = Broker(b.data_path).start()
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("e", "c", rdy=100)
            assert c.read_message().body == b"after"
            c.sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                c.read_message()
    finally:
        if b.proc.poll() is None:
            assert b.stop() == 0


def test_deleting_a_channel_closes_its_consumers(broker):
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub("dc", "gone", rdy=1)
        wait_for(lambda: [ch["client_count"] for t in broker.stats(topic="dc")["topics"]
                          for ch in t["channels"]] == [1], what="the consumer in /stats")
        assert post(broker, "/channel/delete?topic=dc&channel=gone") == (200, b"")
        c.sock.settimeout(5)
        with pytest.raises((EOFError, ConnectionResetError)):
            c.read_frame()


def test_config_reads_options_by_their_file_names(make_broker):
    b = make_broker("--mem-queue-size", "123", "--lookupd-tcp-address", "127.0.0.1:4160")
    assert b.http("GET", "/config/mem_queue_size")[:2] == (200, b"123")
    assert b.http("GET", "/config/nsqlookupd_tcp_addresses")[:2] == (200, b'["127.0.0.1:4160"]')
    assert b.http("GET", "/config/no_such_option")[:2] == (400, b'{"message":"INVALID_OPTION"}')
    # durations are Go's time.Duration in JSON: nanoseconds
    assert b.http("GET", "/config/msg_timeout")[:2] == (200, b"60000000000")
    assert b.http("GET", "/config/min_output_buffer_timeout")[:2] == (200, b"25000000")


# (method, path, status, body, Content-Type or None, X-NSQ-Content-Type present): nsqd's
# V1 decorator on every endpoint but /ping (PlainText); Go sets no type for an empty body
@pytest.mark.parametrize("method, path, status, body, ctype, v1", [
    ("GET", "/ping", 200, b"OK", "text/plain; charset=utf-8", False),
    ("POST", "/ping", 405, b'{"message":"METHOD_NOT_ALLOWED"}', "application/json; charset=utf-8", True),
    ("POST", "/pub?topic=hdr", 200, b"OK", "text/plain; charset=utf-8", True),
    ("POST", "/topic/create?topic=hdr", 200, b"", None, True),
    ("POST", "/channel/create?topic=nope&channel=c", 404, b'{"message":"TOPIC_NOT_FOUND"}', "application/json; charset=utf-8", True),
    ("POST", "/topic/pause?topic=nope", 404, b'{"message":"TOPIC_NOT_FOUND"}', "application/json; charset=utf-8", True),
    ("GET", "/nope", 404, b'{"message":"NOT_FOUND"}', "application/json; charset=utf-8", True),
    ("GET", "/info", 200, None, "application/json; charset=utf-8", True),
    ("GET", "/stats", 200, None, "text/plain; charset=utf-8", True),
    ("GET", "/stats?format=json", 200, None, "application/json; charset=utf-8", True),
    ("GET", "/config/max_rdy_count", 200, b"2500", "application/json; charset=utf-8", True),
])
def test_headers_as_nsqd(broker, method, path, status, body, ctype, v1):
    got_status, got_body, headers = broker.http(method, path, b"x" if method == "POST" else None)
    assert got_status == status
    if body is not None:
        assert got_body == body
    assert headers.get("Content-Type") == ctype
    assert ("X-NSQ-Content-Type" in headers) == v1
    if v1:
        assert headers["X-NSQ-Content-Type"] == "nsq; version=1.0"


def test_info_fields(broker):
    import orjson

    info = orjson.loads(broker.http("GET", "/info")[1])
    assert list(info) == ["version", "broadcast_address", "hostname", "http_port", "tcp_port", "start_time",
                          "max_heartbeat_interval", "max_output_buffer_size", "max_output_buffer_timeout",
                          "max_deflate_level", "topology_zone", "topology_region"]
    assert info["version"] == "1.3.0"
    assert (info["tcp_port"], info["http_port"]) == (broker.tcp_port, broker.http_port)
    # durations in nanoseconds, as Go marshals time.Duration
    assert (info["max_heartbeat_interval"], info["max_output_buffer_timeout"]) == (60 * 10**9, 30 * 10**9)
    assert (info["max_output_buffer_size"], info["max_deflate_level"]) == (65536, 6)


def test_mpub_of_nothing_still_makes_the_topic(broker):
    assert broker.http("POST", "/mpub?topic=nothing", b"\n\n")[:2] == (200, b"OK")
    [t] = broker.stats(topic="nothing")["topics"]
    assert (t["topic_name"], t["message_count"]) == ("nothing", 0)


def test_empty_topic_leaves_its_channels_messages_across_a_restart(make_broker):
    """/topic/empty drains the topic's own queue only: what its channels hold stays theirs,
    after a kill -9 too."""
    b = make_broker()
    post(b, "/topic/create?topic=te")
    post(b, "/channel/create?topic=te&channel=first")  # the topic's first channel
    with Connection.connect(b.tcp_address) as p:
        p.mpub("te", [b"a", b"b", b"c"])
    wait_for(lambda: b.stats(topic="te")["topics"][0]["channels"][0]["depth"] == 3, what="queued")
    assert post(b, "/topic/empty?topic=te") == (200, b"")
    assert b.stats(topic="te")["topics"][0]["channels"][0]["depth"] == 3
    b.kill()
    b = make_broker(data=b.data_path.name)
    assert b.stats(topic="te")["topics"][0]["channels"][0]["depth"] == 3


def test_head_gets_headers_only_and_the_connection_goes_on(broker):
    import socket

    with socket.create_connection(("127.0.0.1", broker.http_port), timeout=5) as s:
        # nsqd registers GET only: HEAD is 405, and a HEAD answer never has a body
        s.sendall(b"HEAD /ping HTTP/1.1\r\nHost: x\r\n\r\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        deadline = time.monotonic() + 5
        while not data.endswith(b"\r\n\r\nOK") and time.monotonic() < deadline:
            data += s.recv(4096)
    head, rest = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 405 ") and b"Content-Length: 32" in head
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n") and rest.endswith(b"\r\n\r\nOK")
