"""Records carried by the rings between processes.

Every record starts with a one-byte kind; the rest is fixed-size fields (little-endian)
followed by at most one variable part. Layouts, by kind::

  acceptor -> router
    PUBLISH  | kind u8 | seg_acceptor u16 | seg_seq u32 | offset u64 | count u32 | topic_len u8 | topic | segment records ...
                                                (#ephemeral or deferred batches: the records travel with it)
    PUBLISH_AT | kind | seg_acceptor u16 | seg_seq u32 | offset u64 | count u32 | size u32 | topic_len u8 | topic
                                                (a durable batch, not deferred: its records are
                                                 [offset, offset + size) of the segment file)
    SUB      | kind | conn u64 | topic_len u8 | topic | channel_len u8 | channel | client info (JSON)
    RESUB    | as SUB                              (the same consumer again, to a restarted router)
    RDY      | kind | conn u64 | count u32
    FIN      | kind | conn u64 | ahead u32 | n x id 16
                                                (one connection's FINs, in order; ahead: how many
                                                 frames sent ahead the acceptor wrote for them)
    UNSENT   | kind | conn u64 | message frames   (frames sent ahead, returned unwritten)
    REQ      | kind | conn u64 | delay_ms u32 | id 16
    TOUCH    | kind | conn u64 | id 16
    CLS      | kind | conn u64
    GONE     | kind | conn u64                      (connection closed)
    A_HELLO  | kind | acceptor u16 | generation u32 (a new acceptor incarnation)
    CONTROL  | kind | req_id u32 | JSON request     (stats, create, delete, ...)
    CHANNELS | kind | topic_len u8 | topic | JSON list of channel names
                                                (acceptor 0: what the lookupds know of a new topic)
    LOOKUPDS | kind | count u16                     (acceptor 0: lookupds configured; 0 = none)
    CONFIG   | kind | JSON {option: value}          (acceptor 0: run-time options, see CONFIG_SET)
    BARRIER_OK | kind | barrier u64                 (queued behind everything sent before it)
  router -> acceptor
    DELIVER  | kind | conn u64 | message frames, ready to write to the socket
    DELIVER_AHEAD | kind | conn u64 | rdy u32 | message frames
                                                (sent ahead of the consumer's credit: written one
                                                 for each FIN or REQ it sends, while its RDY is at
                                                 least rdy; see nsqmp.acceptor.ahead)
    RECALL   | kind | conn u64                      (send back what is held ahead: its channel
                                                 was paused or emptied)
    CONN_ERR | kind | conn u64 | fatal u8 | error text
    REPLY    | kind | req_id u32 | JSON reply       (or its last piece: see REPLY_PART)
    REPLY_PART | kind | req_id u32 | leading bytes of a JSON reply too big for one record
                                                (then more parts, then the REPLY with the rest)
    R_HELLO  | kind | router u16                    (router restarted: re-send SUB and RDY)
    TOPIC_FULL | kind | full u8 | topic             (max-topic-bytes reached / cleared: refuse)
    CLOSE_CONN | kind | conn u64                    (its topic or channel was deleted: close it)
    TOPIC_GONE | kind | topic                       (deleted: drop the segment writer)
    SUB_OK   | kind | conn u64                      (the channel exists and the consumer is known)
    BARRIER  | kind | barrier u64                   (answer BARRIER_OK: see nsqmp.router.controls)
  router -> acceptor 0 (the registrar, which speaks for the broker to every nsqlookupd)
    LOOKUP_REG   | kind | register u8 | topic_len u8 | topic | channel
                                                (REGISTER or UNREGISTER; no channel: the topic)
    LOOKUP_STATE | kind | flags u8 | JSON [[topic, [channel, ...]], ...]
                                                (every topic the router owns, in pieces:
                                                 flags bit 0 = first piece, bit 1 = last)
    CHANNELS_ASK | kind | topic                     (a new topic: which channels do lookupds know?)
  router 0 -> every acceptor
    CONFIG_SET   | kind | JSON {option: value}      (PUT /config/...: every option changed at run time)
  router -> acceptor 0, and back (dead letters: nsqmp/router/deadletter.py)
    DEAD_LETTER  | kind | token u64 | topic_len u8 | topic | body
                                                (publish body to the dead-letter topic, then answer)
    DEAD_LETTER_OK | kind | n x token u64       (published: the router may acknowledge the originals)
  router -> timer
    ARM      | kind | n x (token u64, deadline_ns i64)
    DISARM   | kind | n x token u64
  timer -> router
    FIRE     | kind | n x token u64
    T_HELLO  | kind                                 (timer restarted: re-send every ARM)

Each kind has one builder (named after it: ``sub_ok(conn)``) and one parser
(``parse_sub_ok(rec)``) below; nothing else packs or unpacks a record.

The "segment records" of PUBLISH are byte-for-byte what the acceptor appended to its
segment file (see nsqmp.diskqueue.segment), so the descriptor (segment, offset, count)
and the copy agree by construction.

A connection id (conn) is acceptor index << 56 | generation << 32 | local number, so a
router can tell the connections of a dead acceptor incarnation from the live ones.
"""
from __future__ import annotations

import os
import struct
import sys
from array import array
from typing import Any

import orjson

PUBLISH, SUB, RDY, FIN, REQ, TOUCH, CLS, GONE, A_HELLO, CONTROL = range(1, 11)
CHANNELS, LOOKUPDS, CONFIG, PUBLISH_AT, BARRIER_OK, RESUB, UNSENT = range(11, 18)
DELIVER, CONN_ERR, REPLY, R_HELLO, TOPIC_FULL, CLOSE_CONN, TOPIC_GONE, SUB_OK, BARRIER, REPLY_PART = range(20, 30)
LOOKUP_REG, LOOKUP_STATE, CHANNELS_ASK, CONFIG_SET = range(50, 54)
DEAD_LETTER, DEAD_LETTER_OK = 60, 61
DELIVER_AHEAD, RECALL = 70, 71
ARM, DISARM = 30, 31
FIRE, T_HELLO = 40, 41

MEMORY_ONLY = 0xFFFFFFFF  # seg_seq of a PUBLISH whose messages are in no file (#ephemeral)

PUBLISH_HEAD = struct.Struct("<BHIQIB")
PUBLISH_AT_HEAD = struct.Struct("<BHIQIIB")
# where PUBLISH_AT_HEAD's offset (u64), count and size (u32) are: a segment tail fills
# them in a copy of publish_at(acceptor, seq, 0, 0, 0, topic) (native/segtail.c)
PUBLISH_AT_FIELDS = (struct.calcsize("<BHI"), struct.calcsize("<BHIQ"), struct.calcsize("<BHIQI"))
# what native/coalesce.c reads of a PUBLISH_AT: its kind, those three fields, its topic's length byte
PUBLISH_AT_LAYOUT = (PUBLISH_AT, *PUBLISH_AT_FIELDS, PUBLISH_AT_HEAD.size - 1)
_u32_max = 0xFFFFFFFF  # a PUBLISH_AT's count and size are u32s
CONN = struct.Struct("<BQ")
CONN_U32 = struct.Struct("<BQI")
CONN_ID = struct.Struct("<BQ16s")
REQ_HEAD = struct.Struct("<BQI16s")
HELLO_A = struct.Struct("<BHI")
HELLO_R = struct.Struct("<BH")
COUNT_U16 = struct.Struct("<BH")
STATE_FIRST, STATE_LAST = 1, 2
REQ_ID = struct.Struct("<BI")
CONN_ERR_HEAD = struct.Struct("<BQB")
TOKEN_DEADLINE = struct.Struct("<Qq")
TOKEN = struct.Struct("<Q")
BARRIER_ID = struct.Struct("<BQ")
TOKEN_KIND = struct.Struct("<BQ")


def conn_id(acceptor: int, generation: int, number: int) -> int:
    """The id of connection `number` of acceptor incarnation (acceptor, generation)."""
    return (acceptor & 0xFF) << 56 | (generation & 0xFFFFFF) << 32 | (number & 0xFFFFFFFF)


def conn_acceptor(conn: int) -> int:
    """The acceptor index of a connection id."""
    return conn >> 56


def conn_generation(conn: int) -> int:
    """The acceptor generation of a connection id."""
    return (conn >> 32) & 0xFFFFFF


# -- shared shapes: a bare kind, kind + conn, kind + topic, kind + JSON, kind + u64s --------
def _kind(kind: int) -> bytes:
    return bytes((kind,))


def _conn(kind: int, conn: int) -> bytes:
    return CONN.pack(kind, conn)


def _parse_conn(rec: bytes) -> int:
    return CONN.unpack_from(rec)[1]


def _json(kind: int, value: Any) -> bytes:
    return bytes((kind,)) + orjson.dumps(value)


def _parse_json(rec: bytes) -> Any:
    return orjson.loads(memoryview(rec)[1:])


def _tokens(kind: int, items: list[int]) -> bytes:
    """kind + the u64 tokens items (DISARM, FIRE)."""
    return bytes((kind,)) + struct.pack(f"<{len(items)}Q", *items)


def _parse_tokens(rec: bytes) -> tuple[int, ...]:
    """The u64 tokens of a DISARM or FIRE."""
    return struct.unpack_from(f"<{(len(rec) - 1) // 8}Q", rec, 1)


def _named(kind: int, topic: bytes, rest: bytes) -> bytes:
    return bytes((kind, len(topic))) + topic + rest


def _unpack_named(rec: bytes, pos: int) -> tuple[bytes, bytes]:
    tlen = rec[pos]
    return rec[pos + 1: pos + 1 + tlen], rec[pos + 1 + tlen:]


# -- acceptor -> router -----------------------------------------------------------------
def publish(seg_acceptor: int, seg_seq: int, offset: int, count: int, topic: bytes, blob: bytes) -> bytes:
    """PUBLISH: a batch with a copy of its segment records (blob)."""
    return PUBLISH_HEAD.pack(PUBLISH, seg_acceptor, seg_seq, offset, count, len(topic)) + topic + blob


def publish_head_into(rec: bytearray, seg_acceptor: int, seg_seq: int, offset: int, count: int,
                      topic: bytes) -> int:
    """Write a PUBLISH's head and topic at the start of rec (whose records the caller encodes
    in place after it, without a copy); returns where the records start."""
    PUBLISH_HEAD.pack_into(rec, 0, PUBLISH, seg_acceptor, seg_seq, offset, count, len(topic))
    end = PUBLISH_HEAD.size + len(topic)
    rec[PUBLISH_HEAD.size:end] = topic
    return end


def publish_head_size(topic: bytes) -> int:
    """Bytes of a PUBLISH before its records."""
    return PUBLISH_HEAD.size + len(topic)


def parse_publish(rec: bytes) -> tuple[int, int, int, int, bytes, memoryview]:
    """(seg_acceptor, seg_seq, offset, count, topic, records) of a PUBLISH (records: a view)."""
    _, acceptor, seq, offset, count, tlen = PUBLISH_HEAD.unpack_from(rec)
    pos = PUBLISH_HEAD.size
    return acceptor, seq, offset, count, rec[pos:pos + tlen], memoryview(rec)[pos + tlen:]


def publish_at(seg_acceptor: int, seg_seq: int, offset: int, count: int, size: int, topic: bytes) -> bytes:
    """PUBLISH_AT: a durable batch left in its segment file, [offset, offset + size)."""
    return PUBLISH_AT_HEAD.pack(PUBLISH_AT, seg_acceptor, seg_seq, offset, count, size, len(topic)) + topic


def parse_publish_at(rec: bytes) -> tuple[int, int, int, int, int, bytes]:
    """(seg_acceptor, seg_seq, offset, count, size, topic) of a PUBLISH_AT."""
    _, acceptor, seq, offset, count, size, tlen = PUBLISH_AT_HEAD.unpack_from(rec)
    pos = PUBLISH_AT_HEAD.size
    return acceptor, seq, offset, count, size, rec[pos:pos + tlen]


def coalesce_publish_at(recs: list[bytes]) -> list[bytes]:
    """recs (one ring's records, in order) with each run of back-to-back PUBLISH_ATs of one
    topic whose ranges follow each other in one file as one PUBLISH_AT of the whole range,
    as an MPUB's would be. A publisher sending one message per PUB makes one record per
    read: the router took each through its Python path (3.5 us per PUB on 4 connections);
    a run of them is now one. Other records, and their order, are kept as they are.

    The native join (native/coalesce.c) unless NSQMP_PURE_PYTHON=1: this twin spent 1.2 us
    a record, most of a router's CPU while publishers send one message per PUB."""
    return _coalesce(recs, PUBLISH_AT_LAYOUT)


def coalesce_publish_at_py(recs: list[bytes]) -> list[bytes]:
    """coalesce_publish_at's pure-Python twin (the reference the native one is tested against)."""
    head = PUBLISH_AT_HEAD
    unpack, hsize = head.unpack_from, head.size
    out: list[bytes] = []
    run = None  # [acceptor, seq, start, end, count, topic, first record, records merged]
    for rec in recs:
        if rec[0] != PUBLISH_AT:
            if run is not None:
                out.append(_run_record(run))
                run = None
            out.append(rec)
            continue
        _, acceptor, seq, offset, count, size, tlen = unpack(rec)
        if (run is not None and offset == run[3] and seq == run[1] and acceptor == run[0]
                and rec[hsize:hsize + tlen] == run[5] and run[4] + count <= _u32_max
                and offset + size - run[2] <= _u32_max):
            run[3] = offset + size
            run[4] += count
            run[7] += 1
            continue
        if run is not None:
            out.append(_run_record(run))
        run = [acceptor, seq, offset, offset + size, count, rec[hsize:hsize + tlen], rec, 1]
    if run is not None:
        out.append(_run_record(run))
    return out


def _run_record(run: list) -> bytes:
    """The PUBLISH_AT of a run coalesce_publish_at gathered (its own record if alone)."""
    acceptor, seq, start, end, count, topic, first, merged = run
    if merged == 1:
        return first
    return publish_at(acceptor, seq, start, count, end - start, topic)


_coalesce: Any
try:
    from nsqmp._native import coalesce_publish_at as _coalesce
except ImportError:  # extension not built
    _coalesce = None
if _coalesce is None or os.environ.get("NSQMP_PURE_PYTHON", "") == "1":
    def _coalesce(recs: list[bytes], layout: tuple) -> list[bytes]:
        return coalesce_publish_at_py(recs)


def sub(conn: int, topic: bytes, channel: bytes, info: bytes, kind: int = SUB) -> bytes:
    """SUB (or, with kind RESUB, RESUB): info is the client's IDENTIFY data as JSON."""
    return CONN.pack(kind, conn) + bytes((len(topic),)) + topic + bytes((len(channel),)) + channel + info


def resub(conn: int, topic: bytes, channel: bytes, info: bytes) -> bytes:
    """RESUB: the same consumer again, to a restarted router."""
    return sub(conn, topic, channel, info, RESUB)


def parse_sub(rec: bytes) -> tuple[int, bytes, bytes, bytes]:
    """(conn, topic, channel, client info JSON) of a SUB or RESUB."""
    _, conn = CONN.unpack_from(rec)
    pos = CONN.size
    tlen = rec[pos]
    topic = rec[pos + 1: pos + 1 + tlen]
    pos += 1 + tlen
    clen = rec[pos]
    channel = rec[pos + 1: pos + 1 + clen]
    return conn, topic, channel, rec[pos + 1 + clen:]


parse_resub = parse_sub


def rdy(conn: int, count: int) -> bytes:
    """RDY count of connection conn."""
    return CONN_U32.pack(RDY, conn, count)


def parse_rdy(rec: bytes) -> tuple[int, int]:
    """(conn, count) of a RDY."""
    _, conn, count = CONN_U32.unpack(rec)
    return conn, count


FIN_IDS_AT = CONN_U32.size  # where a FIN's ids start (the router's native finish reads them there)
_FIN_AHEAD = struct.Struct("<I")


def fin(conn: int, ids: bytes = b"", ahead: int = 0) -> bytearray:
    """FIN of the 16-byte ids (packed), for which the acceptor wrote `ahead` frames sent
    ahead: a bytearray, so the acceptor can add a tick's ids (and add_fin_ahead)."""
    return bytearray(CONN_U32.pack(FIN, conn, ahead)) + ids


def add_fin_ahead(rec: bytearray, n: int) -> None:
    """n more frames sent ahead were written for the FINs of rec (a FIN still queued)."""
    _FIN_AHEAD.pack_into(rec, CONN.size, _FIN_AHEAD.unpack_from(rec, CONN.size)[0] + n)


def parse_fin(rec: bytes) -> tuple[int, int, memoryview]:
    """(conn, frames sent ahead written for them, its ids packed end to end: a view); per
    record, not per id (the router's native finish walks the ids)."""
    _, conn, ahead = CONN_U32.unpack_from(rec)
    return conn, ahead, memoryview(rec)[FIN_IDS_AT:]


def unsent(conn: int, frames: bytes) -> bytes:
    """UNSENT: frames sent ahead to conn that the acceptor returns unwritten."""
    return _conn(UNSENT, conn) + frames


def parse_unsent(rec: bytes) -> tuple[int, memoryview]:
    """(conn, the frames returned: a view) of an UNSENT."""
    return _parse_conn(rec), memoryview(rec)[CONN.size:]


def req(conn: int, delay_ms: int, msg_id: bytes) -> bytes:
    """REQ of msg_id, back in the queue after delay_ms (already clamped)."""
    return REQ_HEAD.pack(REQ, conn, delay_ms, msg_id)


def parse_req(rec: bytes) -> tuple[int, int, bytes]:
    """(conn, delay_ms, id) of a REQ."""
    _, conn, delay_ms, msg_id = REQ_HEAD.unpack(rec)
    return conn, delay_ms, msg_id


def touch(conn: int, msg_id: bytes) -> bytes:
    """TOUCH of msg_id."""
    return CONN_ID.pack(TOUCH, conn, msg_id)


def parse_touch(rec: bytes) -> tuple[int, bytes]:
    """(conn, id) of a TOUCH."""
    _, conn, msg_id = CONN_ID.unpack(rec)
    return conn, msg_id


def cls(conn: int) -> bytes:
    """CLS: the connection is closing (no more messages)."""
    return _conn(CLS, conn)


def gone(conn: int) -> bytes:
    """GONE: the connection is closed."""
    return _conn(GONE, conn)


parse_cls = parse_gone = _parse_conn  # -> conn


def hello_a(acceptor: int, generation: int) -> bytes:
    """A_HELLO: a new incarnation of acceptor."""
    return HELLO_A.pack(A_HELLO, acceptor, generation)


def parse_hello_a(rec: bytes) -> tuple[int, int]:
    """(acceptor, generation) of an A_HELLO."""
    _, acceptor, generation = HELLO_A.unpack(rec)
    return acceptor, generation


def control(req_id: int, request: Any) -> bytes:
    """CONTROL request req_id (a JSON value: stats, create, delete, ...)."""
    return REQ_ID.pack(CONTROL, req_id) + orjson.dumps(request)


def parse_control(rec: bytes) -> tuple[int, Any]:
    """(req_id, request) of a CONTROL."""
    return REQ_ID.unpack_from(rec)[1], orjson.loads(memoryview(rec)[REQ_ID.size:])


def channels(topic: bytes, names_json: bytes) -> bytes:
    """CHANNELS: what the lookupds know of a new topic (a JSON list of channel names)."""
    return _named(CHANNELS, topic, names_json)


def parse_channels(rec: bytes) -> tuple[bytes, bytes]:
    """(topic, JSON list of channel names) of a CHANNELS."""
    return _unpack_named(rec, 1)



def lookupds(count: int) -> bytes:
    """LOOKUPDS: how many lookupds are configured (0 = none; at most 65535 counted)."""
    return COUNT_U16.pack(LOOKUPDS, min(count, 0xFFFF))


def parse_lookupds(rec: bytes) -> int:
    """The count of a LOOKUPDS."""
    return COUNT_U16.unpack(rec)[1]


def config(overrides: dict) -> bytes:
    """CONFIG: run-time options {option: value} (acceptor 0 to the routers)."""
    return _json(CONFIG, overrides)


parse_config = _parse_json  # -> {option: value}


def barrier_ok(barrier: int) -> bytes:
    """BARRIER_OK: the answer to BARRIER barrier, queued behind everything sent before it."""
    return BARRIER_ID.pack(BARRIER_OK, barrier)


def parse_barrier_ok(rec: bytes) -> int:
    """The barrier of a BARRIER_OK."""
    return BARRIER_ID.unpack(rec)[1]


# -- router -> acceptor -----------------------------------------------------------------
DELIVER_FRAMES_AT = CONN.size  # where a DELIVER's message frames start


def deliver_head(conn: int) -> bytes:
    """The head of a DELIVER to conn; pack_frames appends the message frames to it."""
    return _conn(DELIVER, conn)


def parse_deliver(rec: bytes) -> tuple[int, memoryview]:
    """(conn, message frames: a view) of a DELIVER."""
    return _parse_conn(rec), memoryview(rec)[DELIVER_FRAMES_AT:]


DELIVER_AHEAD_FRAMES_AT = CONN_U32.size  # where a DELIVER_AHEAD's message frames start
# the names above that are where a record's part starts, not kinds
OFFSETS = frozenset(("FIN_IDS_AT", "DELIVER_FRAMES_AT", "DELIVER_AHEAD_FRAMES_AT"))


def deliver_ahead_head(conn: int, rdy: int) -> bytes:
    """The head of a DELIVER_AHEAD to conn, sent while its RDY was rdy."""
    return CONN_U32.pack(DELIVER_AHEAD, conn, rdy)


def recall(conn: int) -> bytes:
    """RECALL: conn's acceptor sends back (UNSENT) the frames it holds ahead for it."""
    return _conn(RECALL, conn)


def parse_recall(rec: bytes) -> int:
    """The conn of a RECALL."""
    return _parse_conn(rec)


def parse_deliver_ahead(rec: bytes) -> tuple[int, int, memoryview]:
    """(conn, the RDY it was sent under, message frames: a view) of a DELIVER_AHEAD."""
    _, conn, rdy = CONN_U32.unpack_from(rec)
    return conn, rdy, memoryview(rec)[DELIVER_AHEAD_FRAMES_AT:]


def conn_err(conn: int, fatal: bool, text: str) -> bytes:
    """CONN_ERR: send the error text ("E_CODE description") to conn; fatal closes it."""
    return CONN_ERR_HEAD.pack(CONN_ERR, conn, fatal) + text.encode()


def parse_conn_err(rec: bytes) -> tuple[int, bool, str]:
    """(conn, fatal, text) of a CONN_ERR."""
    _, conn, fatal = CONN_ERR_HEAD.unpack_from(rec)
    return conn, bool(fatal), rec[CONN_ERR_HEAD.size:].decode()


def reply_pieces(req_id: int, value: Any, max_record: int) -> list[bytes]:
    """REPLY to CONTROL req_id as records of at most max_record bytes: a JSON reply that
    does not fit one (/stats of ten thousand channels is megabytes) goes as REPLY_PARTs
    carrying its leading bytes, in order, then a REPLY with the rest."""
    body = orjson.dumps(value)
    room = max_record - REQ_ID.size
    cuts = range(0, max(len(body) - 1, 0) // room * room, room)  # every piece but the last
    pieces = [REQ_ID.pack(REPLY_PART, req_id) + body[at:at + room] for at in cuts]
    last = len(pieces) * room
    return pieces + [REQ_ID.pack(REPLY, req_id) + body[last:]]


def parse_reply_part(rec: bytes) -> tuple[int, bytes]:
    """(req_id, the JSON bytes it carries) of a REPLY_PART."""
    return REQ_ID.unpack_from(rec)[1], rec[REQ_ID.size:]


def reply_id(rec: bytes) -> int:
    """The req_id of a REPLY (read before its JSON is parsed, which may not be wanted)."""
    return REQ_ID.unpack_from(rec)[1]


def parse_reply(rec: bytes, parts: list[bytes] | None = None) -> tuple[int, Any]:
    """(req_id, value) of a REPLY; `parts`: the REPLY_PARTs' bytes that came before it."""
    if parts:
        return reply_id(rec), orjson.loads(b"".join(parts) + rec[REQ_ID.size:])
    return reply_id(rec), orjson.loads(memoryview(rec)[REQ_ID.size:])


def hello_r(router: int) -> bytes:
    """R_HELLO: router restarted (re-send SUB and RDY)."""
    return HELLO_R.pack(R_HELLO, router)


def parse_hello_r(rec: bytes) -> int:
    """The router of an R_HELLO."""
    return HELLO_R.unpack(rec)[1]


def topic_full(topic: bytes, full: bool) -> bytes:
    """TOPIC_FULL: max-topic-bytes reached (full) or cleared."""
    return bytes((TOPIC_FULL, full)) + topic


def parse_topic_full(rec: bytes) -> tuple[bytes, bool]:
    """(topic, full) of a TOPIC_FULL."""
    return rec[2:], bool(rec[1])


def close_conn(conn: int) -> bytes:
    """CLOSE_CONN: its topic or channel was deleted; close the connection."""
    return _conn(CLOSE_CONN, conn)


def topic_gone(topic: bytes) -> bytes:
    """TOPIC_GONE: the topic was deleted; drop its segment writer."""
    return bytes((TOPIC_GONE,)) + topic


def parse_topic_gone(rec: bytes) -> bytes:
    """The topic of a TOPIC_GONE."""
    return rec[1:]


def sub_ok(conn: int) -> bytes:
    """SUB_OK: the channel exists and the consumer is known."""
    return _conn(SUB_OK, conn)


parse_close_conn = parse_sub_ok = _parse_conn  # -> conn


def barrier(barrier_id: int) -> bytes:
    """BARRIER barrier_id: answer BARRIER_OK (see nsqmp.router.controls)."""
    return BARRIER_ID.pack(BARRIER, barrier_id)


parse_barrier = parse_barrier_ok  # -> barrier id


# -- dead letters: router -> acceptor 0 -> router ----------------------------------------
def dead_letter(token: int, topic: bytes, body: bytes) -> bytes:
    """DEAD_LETTER: publish body to topic (the dead-letter topic), then answer with token."""
    return TOKEN_KIND.pack(DEAD_LETTER, token) + bytes((len(topic),)) + topic + body


def parse_dead_letter(rec: bytes) -> tuple[int, bytes, bytes]:
    """(token, topic, body) of a DEAD_LETTER."""
    token = TOKEN_KIND.unpack_from(rec)[1]
    topic, body = _unpack_named(rec, TOKEN_KIND.size)
    return token, bytes(topic), bytes(body)


def dead_letter_ok(tokens: list[int]) -> bytes:
    """DEAD_LETTER_OK: these dead letters are in their dead-letter topic's files."""
    return _tokens(DEAD_LETTER_OK, tokens)


parse_dead_letter_ok = _parse_tokens  # -> tokens


# -- router -> acceptor 0 ---------------------------------------------------------------
def lookup_reg(register: bool, topic: bytes, channel: bytes = b"") -> bytes:
    """LOOKUP_REG: REGISTER (register) or UNREGISTER topic, or its channel."""
    return bytes((LOOKUP_REG, register, len(topic))) + topic + channel


def parse_lookup_reg(rec: bytes) -> tuple[bool, bytes, bytes]:
    """(register?, topic, channel or b"" for the topic form)."""
    topic, channel = _unpack_named(rec, 2)
    return bool(rec[1]), topic, channel



def lookup_state(piece: list, first: bool, last: bool) -> bytes:
    """LOOKUP_STATE: one piece ([[topic, [channel, ...]], ...]) of what a router owns."""
    flags = (STATE_FIRST if first else 0) | (STATE_LAST if last else 0)
    return bytes((LOOKUP_STATE, flags)) + orjson.dumps(piece)


def parse_lookup_state(rec: bytes) -> tuple[list, bool, bool]:
    """(piece, first, last) of a LOOKUP_STATE."""
    flags = rec[1]
    return orjson.loads(memoryview(rec)[2:]), bool(flags & STATE_FIRST), bool(flags & STATE_LAST)


def channels_ask(topic: bytes) -> bytes:
    """CHANNELS_ASK: a new topic; which channels do the lookupds know?"""
    return bytes((CHANNELS_ASK,)) + topic


def parse_channels_ask(rec: bytes) -> bytes:
    """The topic of a CHANNELS_ASK."""
    return rec[1:]


# -- router 0 -> every acceptor ---------------------------------------------------------
def config_set(overrides: dict) -> bytes:
    """CONFIG_SET: every option changed at run time, {option: value}."""
    return _json(CONFIG_SET, overrides)


parse_config_set = _parse_json  # -> {option: value}


# -- router <-> timer -------------------------------------------------------------------
def arm(items: list[tuple[int, int]]) -> bytes:
    """ARM of (token, deadline_ns) pairs."""
    flat = [v for pair in items for v in pair]
    return bytes((ARM,)) + struct.pack("<" + "Qq" * len(items), *flat)


def arm_flat(values: array) -> bytes:
    """ARM from an array('Q') of token, deadline, token, deadline...: one copy, no
    per-entry Python work (deadlines are positive, so their u64 and i64 bytes agree)."""
    if sys.byteorder != "little":
        values = array("Q", values)
        values.byteswap()
    return bytes((ARM,)) + values.tobytes()


def arm_packed(pairs: bytes | memoryview) -> bytes:
    """ARM of pairs already packed as (token u64, deadline i64) little-endian."""
    return _ARM_KIND + pairs


def parse_arm(rec: bytes) -> list[tuple[int, int]]:
    """The (token, deadline_ns) pairs of an ARM."""
    return list(TOKEN_DEADLINE.iter_unpack(memoryview(rec)[1:]))



def arm_entries(rec: bytes) -> memoryview:
    """An ARM's packed pairs, as the deadline heap takes them (no copy)."""
    return memoryview(rec)[1:]


def disarm(items: list[int]) -> bytes:
    """DISARM of tokens."""
    return _tokens(DISARM, items)


def disarm_packed(packed: bytes | memoryview) -> bytes:
    """DISARM of tokens already packed as u64 little-endian."""
    return _DISARM_KIND + packed


disarm_entries = arm_entries  # a DISARM's packed tokens, as the heap takes them


def fire(items: list[int]) -> bytes:
    """FIRE of tokens."""
    return _tokens(FIRE, items)


def fire_packed(packed: bytes | memoryview) -> bytes:
    """FIRE of tokens already packed as u64 little-endian (the heap's output: one copy)."""
    return _FIRE_KIND + packed


parse_disarm = parse_fire = _parse_tokens  # -> tokens


def t_hello() -> bytes:
    """T_HELLO: the timer restarted; re-send every ARM."""
    return _T_HELLO


_ARM_KIND, _DISARM_KIND, _FIRE_KIND, _T_HELLO = bytes((ARM,)), bytes((DISARM,)), bytes((FIRE,)), bytes((T_HELLO,))
