"""The V2 connection's state machine, driven without sockets or processes: bytes in through
data_received, frames out of an in-memory transport, ring records and publishes out of a
recording acceptor (tests/acceptor/seams.py). The error texts are nsqd's, the same as
tests/integration/test_protocol_errors.py checks against a real broker."""
from __future__ import annotations

import zlib

import orjson
import pytest

from nsqmp.acceptor import flow
from nsqmp.acceptor.flow import RingHold
from nsqmp.acceptor.session import STATE_CLOSING, STATE_SUBSCRIBED
from nsqmp.client import wire
from nsqmp.ipc import records
from nsqmp.protocol.errors import ClientError
from nsqmp.protocol.frames import FRAME_RESPONSE, HEARTBEAT
from tests.acceptor.seams import CONN_ID, I32, AnsweringAuth, MemoryTransport, RecordingAcceptor, connect, frames, responses

MSG_ID = b"0123456789abcdef"


def subscribed(*flags: str):
    """A connection subscribed to t/ch, its SUB answered, its records taken."""
    conn, transport, host = connect(*flags)
    conn.data_received(wire.sub("t", "ch"))
    assert responses(transport) == []  # SUB waits for the router's SUB_OK
    conn.sub_confirmed()
    assert responses(transport) == [b"OK"]
    host.take_records()
    return conn, transport, host


# -- magic and IDENTIFY ---------------------------------------------------------------
def test_a_wrong_magic_is_refused_and_closes():
    host = RecordingAcceptor()
    from nsqmp.acceptor.tcp import V2Connection

    conn, transport = V2Connection(host), MemoryTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(b"  V")
    assert transport.out == b"" and not transport.closed  # not all here yet
    conn.data_received(b"1")
    assert responses(transport) == [b"E_BAD_PROTOCOL"]
    assert transport.closed and host.connections == {CONN_ID: conn}
    conn.connection_lost(None)
    assert host.connections == {}


def test_identify_with_feature_negotiation_answers_the_negotiated_settings():
    conn, transport, _ = connect()
    conn.data_received(wire.identify({"feature_negotiation": True, "client_id": "c1", "heartbeat_interval": 5000,
                                      "msg_timeout": 40000, "tls_v1": True, "deflate_level": 3}))
    (kind, data), = frames(transport.take())
    assert kind == FRAME_RESPONSE
    answer = orjson.loads(data)
    assert answer["max_rdy_count"] == 2500 and answer["msg_timeout"] == 40000
    # asked for TLS, but no certificate here; nothing asked for compression
    assert (answer["tls_v1"], answer["snappy"], answer["deflate"], answer["deflate_level"]) == (False, False, False, 3)
    assert conn.settings.client_id == "c1" and conn.settings.heartbeat_interval_ms == 5000


def test_identify_without_feature_negotiation_is_a_plain_ok():
    conn, transport, _ = connect()
    conn.data_received(wire.identify({"client_id": "c1"}))
    assert responses(transport) == [b"OK"]


def test_deflate_negotiated_then_the_stream_is_compressed_both_ways():
    conn, transport, host = connect()
    inflate = zlib.decompressobj(-15)
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    # the PUB after IDENTIFY in the same write is already compressed
    conn.data_received(wire.identify({"feature_negotiation": True, "deflate": True})
                       + deflate.compress(wire.pub("t", b"hi")) + deflate.flush(zlib.Z_SYNC_FLUSH))
    head = frames(transport.out[:transport.out.index(b"}") + 1])  # the IDENTIFY answer, in the clear
    assert orjson.loads(head[0][1])["deflate"] is True
    rest = bytes(transport.out[transport.out.index(b"}") + 1:])
    assert [d for _, d in frames(inflate.decompress(rest))] == [b"OK", b"OK"]  # the upgrade's, the PUB's
    assert host.publishes == [(b"t", [b"hi"], 0)]


def test_identify_after_sub_is_fatal():
    conn, transport, _ = subscribed()
    conn.data_received(wire.identify({}))
    assert responses(transport) == [b"E_INVALID cannot IDENTIFY in current state"]
    assert transport.closed


# -- publishing -----------------------------------------------------------------------
def test_pubs_to_one_topic_in_one_read_are_one_publish_and_an_ok_each():
    conn, transport, host = connect()
    conn.data_received(wire.pub("t", b"a") + wire.pub("t", b"bb") + wire.pub("u", b"c"))
    assert host.publishes == [(b"t", [b"a", b"bb"], 0), (b"u", [b"c"], 0)]
    assert responses(transport) == [b"OK"] * 3
    assert conn.pub_counts == {b"t": 2, b"u": 1}


def test_a_pub_split_across_reads_waits_for_its_body():
    conn, transport, host = connect()
    data = wire.pub("t", b"hello")
    conn.data_received(data[:10])
    assert host.publishes == [] and transport.out == b""
    conn.data_received(data[10:])
    assert host.publishes == [(b"t", [b"hello"], 0)] and responses(transport) == [b"OK"]


def test_dpub_carries_its_delay_and_mpub_its_bodies():
    conn, transport, host = connect()
    conn.data_received(wire.dpub("t", 1500, b"later") + wire.dpub("t", 10, b"soon") + wire.mpub("t", [b"x", b"yy"]))
    assert host.publishes == [(b"t", [b"later", b"soon"], [1500, 10]), (b"t", [b"x", b"yy"], 0)]
    assert responses(transport) == [b"OK"] * 3


def test_a_failed_disk_write_is_the_first_commands_error():
    conn, transport, host = connect()
    host.failure = OSError(28, "No space left on device")
    conn.data_received(wire.pub("t", b"a") + wire.pub("t", b"b"))
    assert responses(transport) == [b"E_PUB_FAILED PUB failed No space left on device"]
    assert transport.closed


BAD_INPUT = [
    # (sent after the magic, the error, closed afterwards)
    (b"BOGUS\n", "E_INVALID invalid command BOGUS"),
    (b"PUB a*b\n" + I32.pack(1) + b"x", 'E_BAD_TOPIC PUB topic name "a*b" is not valid'),
    (b"PUB\n", "E_INVALID PUB insufficient number of parameters"),
    (b"PUB errs\n" + I32.pack(0), "E_BAD_MESSAGE PUB invalid message body size 0"),
    (b"PUB errs\n" + I32.pack(1025) + b"x" * 1025, "E_BAD_MESSAGE PUB message too big 1025 > 1024"),
    (b"DPUB errs x1\n", "E_INVALID DPUB could not parse timeout x1"),
    (b"DPUB errs 3600001\n", "E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
    (b"MPUB a*b\n" + I32.pack(9) + I32.pack(1) + I32.pack(1) + b"x",
     'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "a*b" is not valid'),
    (b"MPUB errs\n" + I32.pack(8) + I32.pack(0) + I32.pack(0), "E_BAD_BODY MPUB invalid message count 0"),
    (b"MPUB errs\n" + I32.pack(8193), "E_BAD_BODY MPUB body too big 8193 > 8192"),
    (b"SUB t#eph ch\n", 'E_BAD_TOPIC SUB topic name "t#eph" is not valid'),
    (b"SUB t c*h\n", 'E_BAD_CHANNEL SUB channel name "c*h" is not valid'),
    (b"IDENTIFY\n" + I32.pack(3) + b"{x}", "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"RDY 1\n", "E_INVALID cannot RDY in current state"),
    (b"FIN " + MSG_ID + b"\n", "E_INVALID cannot FIN in current state"),
    (b"CLS\n", "E_INVALID cannot CLS in current state"),
    (b"AUTH\n" + I32.pack(1) + b"s", "E_AUTH_DISABLED AUTH disabled"),
]


@pytest.mark.parametrize("sent, text", BAD_INPUT, ids=[t.split()[0] + " " + s[:12].decode("latin-1")
                                                       for s, t in BAD_INPUT])
def test_bad_input_gets_nsqds_error_and_closes(sent, text):
    conn, transport, host = connect()
    conn.data_received(sent)
    assert responses(transport) == [text.encode()]
    assert transport.closed and host.publishes == []


def test_commands_before_the_bad_one_are_answered_first():
    conn, transport, host = connect()
    conn.data_received(wire.pub("t", b"a") + wire.NOP + b"PUB a*b\n")
    assert host.publishes == [(b"t", [b"a"], 0)]
    assert responses(transport) == [b"OK", b'E_BAD_TOPIC PUB topic name "a*b" is not valid']


def test_a_body_cut_by_the_end_of_the_stream_gets_nsqds_error():
    conn, transport, _ = connect()
    conn.data_received(b"PUB errs\n" + I32.pack(10) + b"abc")
    assert transport.out == b""
    conn.eof_received()
    assert responses(transport) == [b"E_BAD_MESSAGE PUB failed to read message body"]


def test_an_error_from_the_router_keeps_the_connection_unless_fatal():
    conn, transport, _ = subscribed()
    conn.send_error(ClientError("E_FIN_FAILED", "FIN x failed ID not in flight"))
    assert responses(transport) == [b"E_FIN_FAILED FIN x failed ID not in flight"] and not transport.closed


# -- AUTH -----------------------------------------------------------------------------
ALLOW_T = {"ttl": 3600, "identity": "me", "identity_url": "",
           "authorizations": [{"topic": "^t$", "channels": [".*"], "permissions": ["publish"]}]}


def test_auth_then_publish_where_allowed_only():
    service = AnsweringAuth(ALLOW_T)
    conn, transport, host = connect(auth=service)
    conn.data_received(wire.pub("t", b"early"))
    assert responses(transport) == [b"E_AUTH_FIRST AUTH required before PUB"] and transport.closed

    conn, transport, host = connect(auth=service)
    conn.data_received(wire.auth("s3cret") + wire.pub("t", b"a"))
    assert not transport.reading and responses(transport) == []  # waits for the auth servers
    host.loop.run_tasks()
    assert service.queries[-1] == ("127.0.0.1", False, "", b"s3cret")
    answer, ok = responses(transport)
    assert orjson.loads(answer) == {"identity": "me", "identity_url": "", "permission_count": 1}
    assert ok == b"OK" and host.publishes == [(b"t", [b"a"], 0)] and transport.reading
    conn.data_received(wire.pub("u", b"b"))
    assert responses(transport) == [b'E_UNAUTHORIZED AUTH failed for PUB on "u" ""'] and transport.closed


def test_auth_answered_without_authorizations_is_refused():
    conn, transport, host = connect(auth=AnsweringAuth({"ttl": 60, "authorizations": []}))
    conn.data_received(wire.auth("s"))
    host.loop.run_tasks()
    assert responses(transport) == [b"E_UNAUTHORIZED AUTH no authorizations found"] and transport.closed


# -- consuming ------------------------------------------------------------------------
def test_sub_sends_the_consumer_to_the_topics_router():
    conn, transport, host = connect()
    conn.data_received(wire.identify({"client_id": "c9"}) + wire.sub("t", "ch") + wire.rdy(3))
    assert responses(transport) == [b"OK"]  # the RDY waits behind the SUB
    (slot, rec), = host.take_records()
    assert slot == host.router_slot(b"t") == conn.router
    assert rec[0] == records.SUB
    conn_id, topic, channel, info = records.parse_sub(rec)
    assert (conn_id, topic, channel, orjson.loads(info)["client_id"]) == (CONN_ID, b"t", b"ch", "c9")
    conn.sub_confirmed()
    assert responses(transport) == [b"OK"]
    assert host.take_records() == [(conn.router, records.rdy(CONN_ID, 3))]
    assert conn.state == STATE_SUBSCRIBED


def test_rdy_req_touch_and_cls_are_records_for_the_router():
    conn, transport, host = subscribed()
    conn.data_received(wire.rdy(10) + wire.req(MSG_ID, 5000) + wire.req(MSG_ID, 10 ** 10) + wire.touch(MSG_ID))
    r = conn.router
    assert host.take_records() == [
        (r, records.rdy(CONN_ID, 10)),
        (r, records.req(CONN_ID, 5000, MSG_ID)),
        (r, records.req(CONN_ID, 3_600_000, MSG_ID)),  # clamped, as nsqd
        (r, records.touch(CONN_ID, MSG_ID)),
    ]
    conn.data_received(wire.CLS)
    assert responses(transport) == [b"CLOSE_WAIT"] and conn.state == STATE_CLOSING
    assert host.take_records() == [(r, records.cls(CONN_ID))]
    conn.data_received(wire.rdy(5))  # ignored once closing, as nsqd
    assert host.take_records() == [] and not transport.closed


def test_fins_of_one_tick_are_one_record_until_another_record_comes_between():
    conn, _, host = subscribed()
    ids = [b"%016x" % k for k in range(5)]
    conn.data_received(b"".join(wire.fin(i) for i in ids[:3]))
    conn.data_received(wire.fin(ids[3]))  # joins the record: still the last one queued
    conn.data_received(wire.touch(ids[4]) + wire.fin(ids[4]))
    r = conn.router
    assert host.take_records() == [(r, records.fin(CONN_ID, b"".join(ids[:4]))),
                                   (r, records.touch(CONN_ID, ids[4])),
                                   (r, records.fin(CONN_ID, ids[4]))]


@pytest.mark.parametrize("sent, text", [
    (b"RDY x\n", "E_INVALID RDY could not parse count x"),
    (b"RDY 2501\n", "E_INVALID RDY count 2501 out of range 0-2500"),
    (b"FIN short\n", "E_INVALID Invalid Message ID"),
    (b"REQ " + MSG_ID + b"\n", "E_INVALID REQ insufficient number of params"),
    (b"REQ " + MSG_ID + b" -1\n", "E_INVALID REQ could not parse timeout -1"),
])
def test_bad_consumer_commands(sent, text):
    conn, transport, host = subscribed()
    conn.data_received(sent)
    assert responses(transport) == [text.encode()] and transport.closed
    assert host.take_records() == []


def test_a_consumer_leaving_is_told_to_its_router():
    conn, transport, host = subscribed()
    conn.close()
    conn.connection_lost(None)
    assert host.take_records() == [(conn.router, records.gone(CONN_ID))]
    assert host.connections == {}


# -- heartbeats -----------------------------------------------------------------------
def test_a_heartbeat_each_interval_and_two_silent_intervals_close():
    conn, transport, host = connect()
    conn.data_received(wire.identify({"heartbeat_interval": 1000}))
    transport.take()
    beat, = host.loop.armed()
    host.loop.run(beat)
    assert frames(transport.take()) == [(FRAME_RESPONSE, HEARTBEAT)] and not transport.closed
    conn.last_read -= 2.0  # nothing read for two intervals
    host.loop.run(host.loop.armed()[0])
    assert transport.closed and transport.out == b""
    assert host.loop.armed() == []


def test_the_read_deadline_falls_between_beats():
    conn, transport, host = connect()
    conn.data_received(wire.identify({"heartbeat_interval": 1000}))
    conn.last_read -= 1.5  # the deadline is half an interval away at the beat
    host.loop.run(host.loop.armed()[0])
    assert not transport.closed
    deadline = min(host.loop.armed(), key=lambda t: t.when)
    conn.last_read -= 0.5
    host.loop.run(deadline)
    assert transport.closed


def test_a_connection_without_heartbeats_has_no_timer():
    conn, transport, host = connect()
    conn.data_received(wire.identify({"heartbeat_interval": -1}))
    assert host.loop.armed() == []


# -- back-pressure --------------------------------------------------------------------
def test_a_client_not_reading_what_it_is_sent_is_still_read():
    """As nsqd's IOLoop: its FINs must get through while its deliveries back up."""
    conn, transport, host = subscribed()
    conn.pause_writing()
    assert transport.reading and conn.write_paused
    conn.data_received(wire.rdy(5) + wire.fin(MSG_ID))
    assert host.take_records() == [
        (conn.router, records.rdy(CONN_ID, 5)),
        (conn.router, records.fin(CONN_ID, MSG_ID)),
    ]
    conn.resume_writing()
    assert transport.reading and not conn.write_paused


def test_reading_resumes_only_when_every_reason_is_gone():
    conn, transport, _ = connect()
    hold = RingHold(limit=0)
    conn.flow.pause_reading(flow.WAIT)
    hold.hold(conn)
    conn.flow.resume_reading(flow.WAIT)
    assert not transport.reading and conn.flow.reasons == flow.RING
    hold.release()
    assert transport.reading and hold.held == set()


def test_a_closed_connection_is_not_resumed():
    conn, transport, _ = connect()
    hold = RingHold(limit=0)
    hold.hold(conn)
    conn.close()
    hold.release()
    assert not transport.reading
