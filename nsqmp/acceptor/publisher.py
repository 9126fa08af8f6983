"""The publish path of an acceptor, shared by TCP (PUB/MPUB) and HTTP (/pub, /mpub).

Stamp IDs and the timestamp, append the batch to this acceptor's segment for the topic
(single writer, no lock), then queue a descriptor for the topic's router. The records
are encoded once, in C (nsqmp.diskqueue.encoder), from the bodies' spans in the read
buffer; the segment gets them with one write. A durable batch's descriptor says only
where they are (PUBLISH_AT: the router reads them from the file if and when it needs
them); #ephemeral and deferred batches carry their records in the PUBLISH record. The
caller answers OK as soon as append() returns: the messages are in a file's pages.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nsqmp.diskqueue.encoder import SegmentTail, encode_records, records_size, spans_of
from nsqmp.diskqueue.layout import topic_dir
from nsqmp.diskqueue.segment import WINDOW, SegmentWriter
from nsqmp.ipc import records
from nsqmp.ipc.mesh import Endpoint, Plan
from nsqmp.layouts import LENGTH_MASK, RECORD_HEAD, SPAN
from nsqmp.protocol.ids import IdGenerator
from nsqmp.protocol.names import is_ephemeral

if TYPE_CHECKING:
    from typing_extensions import Buffer

_MAX_IDS = 4096


class TopicFull(Exception):
    """The topic reached max-topic-bytes and its policy is to refuse (E_PUB_FAILED / 503)."""



class Publisher:
    def __init__(self, opts, plan: Plan, index: int, endpoint: Endpoint) -> None:
        self.opts = opts
        self.plan = plan
        self.index = index
        self.endpoint = endpoint
        self.ids = IdGenerator(opts.node_id + index)
        self.writers: dict[bytes, SegmentWriter] = {}
        self.slots: dict[bytes, int] = {}  # the router ring of each topic with a writer
        self.full_topics: set[bytes] = set()  # told by routers (max-topic-bytes, refuse)
        self.data_path = opts.data_path
        # what one PUBLISH record may carry: the ring's limit less the descriptor head
        self.max_chunk = plan.ring_capacity // 4 - 512
        # the limits a publish run checks (read once, as the acceptor's parser does)
        self._max_msg, self._max_body = opts.max_msg_size, opts.max_body_size

    def publish(self, topic: bytes, bodies: list[bytes], defer_ms: int = 0) -> None:
        """publish_spans() for bodies held as separate bytes objects (HTTP text /mpub, tools)."""
        src, spans = spans_of(bodies)
        self.publish_spans(topic, src, spans, defer_ms)

    def publish_spans(self, topic: bytes, src: Buffer, spans: Buffer,
                      defer_ms: int | Sequence[int] = 0) -> None:
        """Persist and hand off a batch; raises OSError if the segment cannot be written.

        The bodies are spans of src (packed u32 offset/size pairs, as ``mpub_spans``
        gives them): the encoder (native/publish.h) writes every segment record, IDs,
        timestamp and CRC-32C included, straight from src into the PUBLISH record, and
        the segment gets one copy of those bytes. No Python object per message.
        defer_ms > 0 (DPUB, /pub?defer=) stores the due time with each message; a
        sequence gives each span its own (a connection's DPUBs taken together), every
        one of them > 0.
        """
        if topic in self.full_topics:
            raise TopicFull()
        ts = time.time_ns()
        span_view = memoryview(spans).cast("B")
        step = SPAN.size  # bytes per body's span
        count = len(span_view) // step
        if isinstance(defer_ms, int):
            due = ts + defer_ms * 1_000_000 if defer_ms > 0 else 0
            dues = None
        else:
            dues = [ts + ms * 1_000_000 for ms in defer_ms]
            due = dues[0]
        head = records.publish_head_size(topic)
        rec = bytearray(head + records_size(span_view, due != 0))
        pos = head
        for start in range(0, count, _MAX_IDS):
            n = min(_MAX_IDS, count - start)
            first = self.ids.next_block(n)
            if dues is None:
                pos += encode_records(rec, pos, src, span_view[step * start:step * (start + n)], ts, first, due)
                continue
            for i in range(start, start + n):  # one due time each
                pos += encode_records(rec, pos, src, span_view[step * i:step * (i + 1)], ts, first + i - start, dues[i])
        with memoryview(rec) as view:
            blob = view[head:]
            if is_ephemeral(topic):
                # never touches the disk: the router holds it in memory, bounded by mem-queue-size
                seq, offset = records.MEMORY_ONLY, 0
            else:
                writer = self.writers.get(topic)
                if writer is None:  # the topic's first publish here (no call per publish after)
                    writer = self._open_writer(topic)
                seq, offset = writer.append(blob)
                if not due:  # the router finds the records in the file: only where they are
                    size = len(blob)
                    blob.release()
                    self.endpoint.send(self._router_slot(topic),
                                       records.publish_at(self.index, seq, offset, count, size, topic))
                    return
            if len(blob) > self.max_chunk:
                self._hand_off_pieces(topic, seq, offset, blob)
                blob.release()
                return
            blob.release()
        records.publish_head_into(rec, self.index, seq, offset, count, topic)
        self.endpoint.send(self._router_slot(topic), rec)

    def run_tail(self, topic: bytes) -> tuple[SegmentTail, int] | None:
        """The topic's segment tail and its router's slot, for a connection's publish runs
        (SegmentTail.run: PUB/MPUB from its read to the file in one C call, and the
        PUBLISH_AT to send); None for a topic without a writer here (#ephemeral ones never
        have one). A tail takes nothing while the topic is full, while its file is not
        open, or for a command that needs a roll or growth: publish_spans() does those."""
        writer = self.writers.get(topic)
        if writer is None:
            return None
        return writer.tail, self.slots[topic]

    def topic_full(self, topic: bytes, full: bool) -> None:
        """A router says the topic is full (max-topic-bytes, refuse) or takes publishes again."""
        if full:
            self.full_topics.add(topic)
        else:
            self.full_topics.discard(topic)
        writer = self.writers.get(topic)
        if writer is not None:
            writer.tail.taking = not full

    def _open_writer(self, topic: bytes) -> SegmentWriter:
        """A segment writer for the topic's directory, kept for its next publishes."""
        opts, index = self.opts, self.index
        tail = SegmentTail(topic, self.ids, self._max_msg, self._max_body, records.PUBLISH_AT_FIELDS, WINDOW)
        tail.taking = topic not in self.full_topics
        writer = self.writers[topic] = SegmentWriter(
            topic_dir(self.data_path, topic.decode()), index, opts.max_bytes_per_file, opts.sync_every,
            tail, lambda seq: records.publish_at(index, seq, 0, 0, 0, topic))
        self.slots[topic] = self._router_slot(topic)
        return writer

    def _router_slot(self, topic: bytes) -> int:
        return self.plan.topic_slot(topic)

    def _hand_off_pieces(self, topic: bytes, seq: int, offset: int, blob: memoryview) -> None:
        """A batch bigger than one ring record travels as several descriptors (rare: a big MPUB)."""
        dst = self._router_slot(topic)
        unpack = RECORD_HEAD.unpack_from
        start, end = 0, len(blob)
        while start < end:
            stop, n = start, 0
            while stop < end:
                size = RECORD_HEAD.size + (unpack(blob, stop)[0] & LENGTH_MASK)
                if n and stop + size - start > self.max_chunk:
                    break
                stop += size
                n += 1
            self.endpoint.send(dst, records.publish(self.index, seq, offset + start, n, topic,
                                                    bytes(blob[start:stop])))
            start = stop

    def forget(self, topic: bytes) -> None:
        """The topic was deleted: close its writer (a later publish starts a new directory)."""
        writer = self.writers.pop(topic, None)
        self.slots.pop(topic, None)
        if writer is not None:
            writer.close()
        self.full_topics.discard(topic)

    def sync(self) -> None:
        for writer in self.writers.values():
            writer.sync()

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()
        self.slots.clear()
