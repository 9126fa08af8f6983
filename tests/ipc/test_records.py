"""Each ring record kind: its builder's bytes parse back to what was built, and the
bytes are those the layout in nsqmp.ipc.records draws (kind first, little-endian)."""
from __future__ import annotations

import struct
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqmp import _native
from nsqmp.ipc import records

conns = st.integers(0, 2**64 - 1)
u8s = st.integers(0, 255)
u16s = st.integers(0, 0xFFFF)
u32s = st.integers(0, 2**32 - 1)
u64s = st.integers(0, 2**64 - 1)
names = st.binary(min_size=1, max_size=64)
ids = st.binary(min_size=16, max_size=16)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
overrides = st.dictionaries(st.text(min_size=1, max_size=20), st.integers(-2**53, 2**53) | st.text(max_size=10) | st.booleans(),
                            max_size=5)


@given(u16s, u32s, u64s, u32s, names, st.binary(max_size=200))
def test_publish(acceptor, seq, offset, count, topic, blob):
    rec = records.publish(acceptor, seq, offset, count, topic, blob)
    assert rec[0] == records.PUBLISH
    a, s, o, c, t, b = records.parse_publish(rec)
    assert (a, s, o, c, t, bytes(b)) == (acceptor, seq, offset, count, topic, blob)
    # the in-place head the acceptor writes before encoding its records after it
    into = bytearray(records.publish_head_size(topic) + len(blob))
    at = records.publish_head_into(into, acceptor, seq, offset, count, topic)
    into[at:] = blob
    assert bytes(into) == rec


@given(u16s, u32s, u64s, u32s, u32s, names)
def test_publish_at(acceptor, seq, offset, count, size, topic):
    rec = records.publish_at(acceptor, seq, offset, count, size, topic)
    assert rec[0] == records.PUBLISH_AT
    assert records.parse_publish_at(rec) == (acceptor, seq, offset, count, size, topic)


@given(conns, names, names, st.binary(max_size=100))
def test_sub_and_resub(conn, topic, channel, info):
    assert records.sub(conn, topic, channel, info)[0] == records.SUB
    assert records.resub(conn, topic, channel, info)[0] == records.RESUB
    assert records.parse_sub(records.sub(conn, topic, channel, info)) == (conn, topic, channel, info)
    assert records.parse_resub(records.resub(conn, topic, channel, info)) == (conn, topic, channel, info)


@given(conns, u32s)
def test_rdy(conn, count):
    rec = records.rdy(conn, count)
    assert rec == struct.pack("<BQI", records.RDY, conn, count)
    assert records.parse_rdy(rec) == (conn, count)


@given(conns, st.lists(ids, max_size=10), u32s, st.integers(0, 1000))
def test_fin(conn, many, ahead, more):
    rec = records.fin(conn, b"".join(many), ahead)
    assert rec[0] == records.FIN and rec[records.FIN_IDS_AT:] == b"".join(many)
    c, n, view = records.parse_fin(bytes(rec))
    assert (c, n, [bytes(view[k:k + 16]) for k in range(0, len(view), 16)]) == (conn, ahead, many)
    if ahead + more <= 0xFFFFFFFF:
        records.add_fin_ahead(rec, more)  # the acceptor's later FINs of the tick, joined
        assert records.parse_fin(bytes(rec))[:2] == (conn, ahead + more)


@given(conns, u32s, st.binary(max_size=300))
def test_deliver_ahead_and_unsent(conn, rdy, frames):
    rec = records.deliver_ahead_head(conn, rdy) + frames
    assert rec[0] == records.DELIVER_AHEAD and rec[records.DELIVER_AHEAD_FRAMES_AT:] == frames
    c, r, view = records.parse_deliver_ahead(rec)
    assert (c, r, bytes(view)) == (conn, rdy, frames)
    assert records.parse_recall(records.recall(conn)) == conn and records.recall(conn)[0] == records.RECALL
    back = records.unsent(conn, frames)
    assert back[0] == records.UNSENT
    c, view = records.parse_unsent(back)
    assert (c, bytes(view)) == (conn, frames)


@given(conns, u32s, ids)
def test_req(conn, delay, msg_id):
    rec = records.req(conn, delay, msg_id)
    assert rec == struct.pack("<BQI16s", records.REQ, conn, delay, msg_id)
    assert records.parse_req(rec) == (conn, delay, msg_id)


@given(conns, ids)
def test_touch(conn, msg_id):
    rec = records.touch(conn, msg_id)
    assert rec[0] == records.TOUCH
    assert records.parse_touch(rec) == (conn, msg_id)


@given(conns)
def test_the_records_of_one_connection(conn):
    for build, parse, kind in ((records.cls, records.parse_cls, records.CLS),
                               (records.gone, records.parse_gone, records.GONE),
                               (records.sub_ok, records.parse_sub_ok, records.SUB_OK),
                               (records.close_conn, records.parse_close_conn, records.CLOSE_CONN)):
        rec = build(conn)
        assert rec == struct.pack("<BQ", kind, conn)
        assert parse(rec) == conn


@given(u16s, st.integers(0, 2**32 - 1))
def test_hello_a(acceptor, generation):
    rec = records.hello_a(acceptor, generation)
    assert rec[0] == records.A_HELLO
    assert records.parse_hello_a(rec) == (acceptor, generation)


@given(u16s)
def test_hello_r_and_t_hello(router):
    assert records.parse_hello_r(records.hello_r(router)) == router
    assert records.hello_r(router)[0] == records.R_HELLO
    assert records.t_hello() == bytes((records.T_HELLO,))


@given(u32s, json_values)
def test_control_and_reply(req_id, value):
    rec = records.control(req_id, value)
    assert rec[0] == records.CONTROL
    assert records.parse_control(rec) == (req_id, value)
    [rec] = records.reply_pieces(req_id, value, 1 << 20)
    assert rec[0] == records.REPLY
    assert records.reply_id(rec) == req_id
    assert records.parse_reply(rec) == (req_id, value)


@given(u32s, json_values, st.integers(min_value=records.REQ_ID.size + 1, max_value=64))
def test_a_reply_bigger_than_a_record_goes_in_pieces_that_fit(req_id, value, max_record):
    pieces = records.reply_pieces(req_id, value, max_record)
    assert all(len(p) <= max_record for p in pieces)
    assert [p[0] for p in pieces] == [records.REPLY_PART] * (len(pieces) - 1) + [records.REPLY]
    parts = []
    for p in pieces[:-1]:
        rid, piece = records.parse_reply_part(p)
        assert rid == req_id
        parts.append(piece)
    assert records.parse_reply(pieces[-1], parts) == (req_id, value)
    assert len(pieces[-1]) > 4  # the REPLY always carries at least one byte


@given(names, st.lists(st.text(min_size=1, max_size=10), max_size=5))
def test_channels_and_channels_ask(topic, known):
    import orjson
    rec = records.channels(topic, orjson.dumps(known))
    assert rec[0] == records.CHANNELS
    t, names_json = records.parse_channels(rec)
    assert (t, orjson.loads(names_json)) == (topic, known)
    assert records.parse_channels_ask(records.channels_ask(topic)) == topic
    assert records.channels_ask(topic)[0] == records.CHANNELS_ASK


@given(st.integers(0, 100000))
def test_lookupds(count):
    rec = records.lookupds(count)
    assert rec[0] == records.LOOKUPDS
    assert records.parse_lookupds(rec) == min(count, 0xFFFF)


@given(overrides)
def test_config_and_config_set(values):
    assert records.config(values)[0] == records.CONFIG
    assert records.config_set(values)[0] == records.CONFIG_SET
    assert records.parse_config(records.config(values)) == values
    assert records.parse_config_set(records.config_set(values)) == values


@given(u64s)
def test_barrier_and_barrier_ok(barrier):
    assert records.barrier(barrier) == struct.pack("<BQ", records.BARRIER, barrier)
    assert records.barrier_ok(barrier) == struct.pack("<BQ", records.BARRIER_OK, barrier)
    assert records.parse_barrier(records.barrier(barrier)) == barrier
    assert records.parse_barrier_ok(records.barrier_ok(barrier)) == barrier


@given(conns, st.binary(max_size=100))
def test_deliver(conn, frames):
    rec = records.deliver_head(conn) + frames
    assert rec[0] == records.DELIVER
    c, view = records.parse_deliver(rec)
    assert (c, bytes(view)) == (conn, frames)


@given(conns, st.booleans(), st.text(max_size=50))
def test_conn_err(conn, fatal, text):
    rec = records.conn_err(conn, fatal, text)
    assert rec[0] == records.CONN_ERR
    assert records.parse_conn_err(rec) == (conn, fatal, text)


@given(names, st.booleans())
def test_topic_full_and_topic_gone(topic, full):
    assert records.topic_full(topic, full) == bytes((records.TOPIC_FULL, full)) + topic
    assert records.parse_topic_full(records.topic_full(topic, full)) == (topic, full)
    assert records.topic_gone(topic) == bytes((records.TOPIC_GONE,)) + topic
    assert records.parse_topic_gone(records.topic_gone(topic)) == topic


@given(st.booleans(), names, st.binary(max_size=64))
def test_lookup_reg(register, topic, channel):
    rec = records.lookup_reg(register, topic, channel)
    assert rec[0] == records.LOOKUP_REG
    assert records.parse_lookup_reg(rec) == (register, topic, channel)


@given(st.lists(st.tuples(st.text(max_size=8), st.lists(st.text(max_size=8), max_size=3)), max_size=4),
       st.booleans(), st.booleans())
def test_lookup_state(piece, first, last):
    piece = [list(p) for p in piece]
    rec = records.lookup_state(piece, first, last)
    assert rec[:2] == bytes((records.LOOKUP_STATE, (records.STATE_FIRST if first else 0)
                             | (records.STATE_LAST if last else 0)))
    assert records.parse_lookup_state(rec) == (piece, first, last)


@given(st.lists(st.tuples(u64s, st.integers(0, 2**63 - 1)), max_size=20))
def test_arm(pairs):
    rec = records.arm(pairs)
    assert rec[0] == records.ARM
    assert records.parse_arm(rec) == pairs
    flat = array("Q", [v for p in pairs for v in p])
    assert records.arm_flat(flat) == rec
    assert records.arm_packed(bytes(records.arm_entries(rec))) == rec


@given(st.lists(u64s, max_size=20))
def test_disarm_and_fire(tokens):
    packed = struct.pack(f"<{len(tokens)}Q", *tokens)
    for build, packed_build, parse, kind in ((records.disarm, records.disarm_packed, records.parse_disarm,
                                              records.DISARM),
                                             (records.fire, records.fire_packed, records.parse_fire, records.FIRE)):
        rec = build(tokens)
        assert rec == bytes((kind,)) + packed == packed_build(packed)
        assert parse(rec) == tuple(tokens)
    assert bytes(records.disarm_entries(records.disarm(tokens))) == packed


def test_every_kind_is_distinct_and_fits_a_byte():
    kinds = [v for k, v in vars(records).items() if k.isupper() and isinstance(v, int)
             and k not in ("MEMORY_ONLY", "STATE_FIRST", "STATE_LAST", *records.OFFSETS)]
    assert len(kinds) == len(set(kinds)) == 39  # 34 + DEAD_LETTER, DEAD_LETTER_OK, UNSENT, DELIVER_AHEAD, RECALL
    assert all(0 < k < 256 for k in kinds)


def _ranges(recs: list[bytes]) -> list[tuple]:
    """What a router takes from PUBLISH_AT records: per topic and file, (start, end, count)
    in order; other records as themselves."""
    out = []
    for rec in recs:
        if rec[0] == records.PUBLISH_AT:
            acceptor, seq, offset, count, size, topic = records.parse_publish_at(rec)
            out.append((topic, acceptor, seq, offset, offset + size, count))
        else:
            out.append(rec)
    return out


def _native_coalesce(recs):
    return _native.coalesce_publish_at(recs, records.PUBLISH_AT_LAYOUT)


# the join in C (native/coalesce.c) and its pure-Python twin, held to the same cases
coalescers = pytest.mark.parametrize("coalesce", [_native_coalesce, records.coalesce_publish_at_py],
                                     ids=["native", "python"])


@coalescers
def test_coalesce_joins_back_to_back_publish_ats_of_one_topic_and_file(coalesce):
    a = [records.publish_at(1, 7, 64, 1, 40, b"t"), records.publish_at(1, 7, 104, 1, 40, b"t"),
         records.publish_at(1, 7, 144, 200, 8000, b"t")]
    assert _ranges(coalesce(a)) == [(b"t", 1, 7, 64, 8144, 202)]


@coalescers
def test_coalesce_keeps_what_must_stay_apart_and_every_other_record_in_place(coalesce):
    fin = bytes(records.fin(5, b"0" * 16))
    recs = [
        records.publish_at(0, 3, 64, 1, 40, b"t"),
        records.publish_at(0, 3, 104, 1, 40, b"u"),  # another topic
        records.publish_at(0, 3, 150, 1, 40, b"u"),  # a gap in the file
        records.publish_at(0, 4, 64, 1, 40, b"u"),  # the next file
        fin,  # a record between two that would join
        records.publish_at(0, 4, 104, 1, 40, b"u"),
        records.publish_at(0, 4, 144, 2, 80, b"u"),
    ]
    got = coalesce(recs)
    assert _ranges(got) == [(b"t", 0, 3, 64, 104, 1), (b"u", 0, 3, 104, 144, 1), (b"u", 0, 3, 150, 190, 1),
                            (b"u", 0, 4, 64, 104, 1), fin, (b"u", 0, 4, 104, 224, 3)]
    assert got[0] is recs[0]  # a record that joins nothing is passed on as it is


@coalescers
def test_coalesce_stops_a_run_before_its_count_or_size_passes_a_u32(coalesce):
    """The joined record's count and size are u32s: a run that would pass either starts anew."""
    big = 2**32 - 100
    by_count = [records.publish_at(0, 1, 64, big, 40, b"t"), records.publish_at(0, 1, 104, 200, 40, b"t")]
    assert _ranges(coalesce(by_count)) == [(b"t", 0, 1, 64, 104, big), (b"t", 0, 1, 104, 144, 200)]
    by_size = [records.publish_at(0, 1, 64, 1, big, b"t"), records.publish_at(0, 1, 64 + big, 1, 200, b"t")]
    assert _ranges(coalesce(by_size)) == [(b"t", 0, 1, 64, 64 + big, 1), (b"t", 0, 1, 64 + big, 264 + big, 1)]


@coalescers
def test_coalesce_of_nothing_and_of_records_that_are_not_publish_ats(coalesce):
    fin, gone = bytes(records.fin(5, b"0" * 16)), records.gone(9)
    assert coalesce([]) == []
    got = coalesce([fin, gone])
    assert got == [fin, gone] and got[0] is fin


@given(st.lists(st.one_of(
    st.tuples(st.sampled_from([b"a", b"bb"]), st.integers(0, 1), st.integers(0, 1), st.integers(1, 3),
              st.booleans()),
    st.just(None)), max_size=40))
def test_native_coalesce_gives_the_twin_s_records(steps):
    """Any mix of PUBLISH_ATs (two topics, two acceptors, two files, gaps) and other
    records: the same records out of both, byte for byte, and the same objects where a
    record joined nothing."""
    ends: dict[tuple, int] = {}
    recs = []
    for step in steps:
        if step is None:
            recs.append(records.gone(3))
            continue
        topic, acceptor, seq, count, gap = step
        start = ends.get((topic, acceptor, seq), 64) + (8 if gap else 0)
        recs.append(records.publish_at(acceptor, seq, start, count, 40 * count, topic))
        ends[(topic, acceptor, seq)] = start + 40 * count
    native, twin = _native_coalesce(recs), records.coalesce_publish_at_py(recs)
    assert native == twin
    assert [id(r) for r in native if any(r is x for x in recs)] == [id(r) for r in twin if any(r is x for x in recs)]


def test_coalesce_refuses_a_layout_whose_fields_overrun_the_head():
    with pytest.raises(ValueError):
        _native.coalesce_publish_at([], (records.PUBLISH_AT, 1, 5, 9, 10))
    with pytest.raises(TypeError):
        _native.coalesce_publish_at((), records.PUBLISH_AT_LAYOUT)


@given(st.lists(st.tuples(st.sampled_from([b"a", b"b"]), st.integers(0, 1), st.integers(1, 3),
                          st.booleans()), max_size=30))
def test_coalesce_gives_the_router_the_same_messages_in_the_same_order(steps):
    """Whatever the mix, the joined records cover exactly the same file ranges per topic,
    in the same order, with the same message count."""
    ends: dict[tuple, int] = {}
    recs = []
    for topic, seq, count, gap in steps:
        start = ends.get((topic, seq), 64) + (8 if gap else 0)
        recs.append(records.publish_at(0, seq, start, count, 40 * count, topic))
        ends[(topic, seq)] = start + 40 * count

    def flat(rs):
        per = []
        for topic, _, seq, start, end, count in _ranges(rs):
            per.append((topic, seq, start, end, count))
        # split every range into its 40-byte messages
        return [(t, s, start + 40 * i) for t, s, start, end, count in per for i in range(count)]

    got = records.coalesce_publish_at(recs)
    assert flat(got) == flat(recs)
    assert len(got) <= len(recs)
