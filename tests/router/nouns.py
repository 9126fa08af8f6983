"""A router's nouns wired as Router wires them, without a process, rings or a loop: the
delivery pass sends to a list (`sent`), callbacks the nouns schedule wait in a list until
`run()`, and messages are real records in real segment files (SegmentWriter).
"""
from __future__ import annotations

import itertools
import struct
import time

from nsqmp.diskqueue import acklog
from nsqmp.diskqueue.segment import SegmentWriter, encode
from nsqmp.ipc import records
from nsqmp.protocol.frames import MESSAGE_HEADER
from nsqmp.router.channel import Channel
from nsqmp.router.deadlines import Deadlines
from nsqmp.router.delivery import Delivery
from nsqmp.router.flight import Consumer
from nsqmp.router.topic import Topic, TopicLinks

TIMER = 9  # the timer's ring slot
FRAME = struct.Struct(">iiqH16s")  # an NSQ message frame's head: size, type, timestamp, attempts, id


def acceptor_slot(acceptor: int) -> int:
    return 100 + acceptor


class Nouns:
    """One topic's nouns and what they sent."""

    def __init__(self, tmp_path, name: bytes = b"t", mem_queue_size: int = 100, max_chunk: int = 1 << 16,
                 segment_bytes: int = 1 << 20, **options) -> None:
        self.sent: list[tuple[int, bytes]] = []  # (ring slot, record)
        self.callbacks: list = []  # what the nouns asked the loop to run soon
        self.deadlines = Deadlines(1, TIMER, max_chunk)
        self.delivery = Delivery(self.deadlines, self.callbacks.append, self.end_tick, acceptor_slot,
                                 max_chunk, send=self.record)
        self.deadlines.wake = self.delivery.wake
        self.links = TopicLinks(self.deadlines, self.delivery.mark, self.to_acceptors, set(), **options)
        self.topic = Topic(name, str(tmp_path), mem_queue_size, self.links)
        self.writer = SegmentWriter(self.topic.dir, 0, segment_bytes, 0)
        self.ids = itertools.count()

    # -- the seams -----------------------------------------------------------------------
    def record(self, dst: int, rec: bytes) -> None:
        self.sent.append((dst, rec))

    def to_acceptors(self, rec: bytes) -> None:
        self.sent.append((-1, rec))

    def end_tick(self) -> None:  # as Router.end_tick
        self.deadlines.flush(self.record)
        for topic in self.links.acks_due:
            topic.flush_acks()
        self.links.acks_due.clear()

    def run(self) -> None:
        """Run what was scheduled (ticks, refills) until nothing is left."""
        while self.callbacks:
            self.callbacks.pop(0)()

    # -- inputs ----------------------------------------------------------------------------
    def publish(self, bodies: list[bytes], due_ns: int = 0) -> list[bytes]:
        """Append a batch to the acceptor's file and hand it to the topic as the acceptor
        does (PUBLISH_AT, or a copy for a deferred batch); the message ids."""
        ids = [b"%016x" % next(self.ids) for _ in bodies]
        blob = encode([MESSAGE_HEADER.pack(time.time_ns(), 0, i) + b for i, b in zip(ids, bodies)], due_ns)
        seq, offset = self.writer.append(blob)
        self.topic.publish(0, seq, offset, len(bodies), len(blob), memoryview(blob) if due_ns else None)
        return ids

    def consumer(self, ch: Channel, number: int, rdy: int, acceptor: int = 0, **info) -> Consumer:
        """A subscribed connection with RDY rdy."""
        conn = records.conn_id(acceptor, 1, number)
        c = ch.consumers[conn] = Consumer(conn, ch, {"msg_timeout": 60000, **info}, rdy=rdy)
        ch.mark(ch)
        return c

    def fin(self, c: Consumer, ids: list[bytes]) -> list[bytes]:
        """A FIN record's IDs finished by c; the IDs refused."""
        bad: list[bytes] = []
        c.channel.finish(c, records.parse_fin(records.fin(c.conn, b"".join(ids)))[2], 0, bad)  # as on_fin
        return bad

    # -- outputs ---------------------------------------------------------------------------
    def frames(self, conn: int | None = None) -> list[tuple[bytes, int, bytes]]:
        """(id, attempts, body) of every message frame DELIVERed (to conn), and empties sent."""
        out, kept = [], []
        for dst, rec in self.sent:
            if rec[0] != records.DELIVER:
                kept.append((dst, rec))
                continue
            to, data = records.parse_deliver(rec)
            assert dst == acceptor_slot(records.conn_acceptor(to))
            if conn is not None and to != conn:
                kept.append((dst, rec))
                continue
            pos = 0
            while pos < len(data):
                size, kind, _, attempts, mid = FRAME.unpack_from(data, pos)
                assert kind == 2
                out.append((mid, attempts, bytes(data[pos + FRAME.size:pos + 4 + size])))
                pos += 4 + size
        self.sent = kept
        return out

    def timer(self) -> tuple[list[tuple[int, int]], list[int]]:
        """The ARMs (token, deadline) and DISARMs (token) sent to the timer, and empties them."""
        arms = [e for dst, rec in self.sent if dst == TIMER and rec[0] == records.ARM
                for e in records.parse_arm(rec)]
        disarms = [t for dst, rec in self.sent if dst == TIMER and rec[0] == records.DISARM
                   for t in records.parse_disarm(rec)]
        self.sent = [(dst, rec) for dst, rec in self.sent if dst != TIMER]
        return arms, disarms

    def acks(self) -> list[tuple[int, int, int, int]]:
        """(channel id, acceptor, seq, offset) of every entry of the topic's ack log."""
        return list(acklog.read(self.topic.dir))

    def close(self) -> None:
        self.writer.close()
        self.topic.close()
