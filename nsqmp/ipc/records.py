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
    FIN      | kind | conn u64 | n x id 16            (one connection's FINs, in order)
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
    CONN_ERR | kind | conn u64 | fatal u8 | error text
    REPLY    | kind | req_id u32 | JSON reply
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
  router -> timer
    ARM      | kind | n x (token u64, deadline_ns i64)
    DISARM   | kind | n x token u64
  timer -> router
    FIRE     | kind | n x token u64
    T_HELLO  | kind                                 (timer restarted: re-send every ARM)

The "segment records" of PUBLISH are byte-for-byte what the acceptor appended to its
segment file (see nsqmp.diskqueue.segment), so the descriptor (segment, offset, count)
and the copy agree by construction.

A connection id (conn) is acceptor index << 56 | generation << 32 | local number, so a
router can tell the connections of a dead acceptor incarnation from the live ones.
"""
from __future__ import annotations

import struct
import sys
from array import array

PUBLISH, SUB, RDY, FIN, REQ, TOUCH, CLS, GONE, A_HELLO, CONTROL = range(1, 11)
CHANNELS, LOOKUPDS, CONFIG, PUBLISH_AT, BARRIER_OK, RESUB = range(11, 17)
DELIVER, CONN_ERR, REPLY, R_HELLO, TOPIC_FULL, CLOSE_CONN, TOPIC_GONE, SUB_OK, BARRIER = range(20, 29)
LOOKUP_REG, LOOKUP_STATE, CHANNELS_ASK, CONFIG_SET = range(50, 54)
ARM, DISARM = 30, 31
FIRE, T_HELLO = 40, 41

MEMORY_ONLY = 0xFFFFFFFF  # seg_seq of a PUBLISH whose messages are in no file (#ephemeral)

PUBLISH_HEAD = struct.Struct("<BHIQIB")
PUBLISH_AT_HEAD = struct.Struct("<BHIQIIB")
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


def conn_id(acceptor: int, generation: int, number: int) -> int:
    return (acceptor & 0xFF) << 56 | (generation & 0xFFFFFF) << 32 | (number & 0xFFFFFFFF)


def conn_acceptor(conn: int) -> int:
    return conn >> 56


def conn_generation(conn: int) -> int:
    return (conn >> 32) & 0xFFFFFF


def publish(seg_acceptor: int, seg_seq: int, offset: int, count: int, topic: bytes, blob: bytes) -> bytes:
    return PUBLISH_HEAD.pack(PUBLISH, seg_acceptor, seg_seq, offset, count, len(topic)) + topic + blob


def publish_at(seg_acceptor: int, seg_seq: int, offset: int, count: int, size: int, topic: bytes) -> bytes:
    return PUBLISH_AT_HEAD.pack(PUBLISH_AT, seg_acceptor, seg_seq, offset, count, size, len(topic)) + topic


def sub(conn: int, topic: bytes, channel: bytes, info: bytes, kind: int = SUB) -> bytes:
    return CONN.pack(kind, conn) + bytes((len(topic),)) + topic + bytes((len(channel),)) + channel + info


def unpack_sub(rec: bytes) -> tuple[int, bytes, bytes, bytes]:
    _, conn = CONN.unpack_from(rec)
    pos = CONN.size
    tlen = rec[pos]
    topic = rec[pos + 1: pos + 1 + tlen]
    pos += 1 + tlen
    clen = rec[pos]
    channel = rec[pos + 1: pos + 1 + clen]
    return conn, topic, channel, rec[pos + 1 + clen:]


def tokens(kind: int, items: list[int]) -> bytes:
    return bytes((kind,)) + struct.pack(f"<{len(items)}Q", *items)


def unpack_tokens(rec: bytes) -> tuple[int, ...]:
    return struct.unpack_from(f"<{(len(rec) - 1) // 8}Q", rec, 1)


def arm(items: list[tuple[int, int]]) -> bytes:
    flat = [v for pair in items for v in pair]
    return bytes((ARM,)) + struct.pack("<" + "Qq" * len(items), *flat)


def arm_flat(values: array) -> bytes:
    """ARM from an array('Q') of token, deadline, token, deadline...: one copy, no
    per-entry Python work (deadlines are positive, so their u64 and i64 bytes agree)."""
    if sys.byteorder != "little":
        values = array("Q", values)
        values.byteswap()
    return bytes((ARM,)) + values.tobytes()


def unpack_arm(rec: bytes) -> list[tuple[int, int]]:
    return list(TOKEN_DEADLINE.iter_unpack(memoryview(rec)[1:]))


def _named(kind: int, topic: bytes, rest: bytes) -> bytes:
    return bytes((kind, len(topic))) + topic + rest


def _unpack_named(rec: bytes, pos: int) -> tuple[bytes, bytes]:
    tlen = rec[pos]
    return rec[pos + 1: pos + 1 + tlen], rec[pos + 1 + tlen:]


def lookup_reg(register: bool, topic: bytes, channel: bytes = b"") -> bytes:
    return bytes((LOOKUP_REG, register, len(topic))) + topic + channel


def unpack_lookup_reg(rec: bytes) -> tuple[bool, bytes, bytes]:
    """(register?, topic, channel or b"" for the topic form)."""
    topic, channel = _unpack_named(rec, 2)
    return bool(rec[1]), topic, channel


def channels(topic: bytes, names_json: bytes) -> bytes:
    return _named(CHANNELS, topic, names_json)


def unpack_channels(rec: bytes) -> tuple[bytes, bytes]:
    """(topic, JSON list of channel names)."""
    return _unpack_named(rec, 1)
