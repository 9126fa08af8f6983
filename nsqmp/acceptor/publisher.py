"""The publish path of an acceptor, shared by TCP (PUB/MPUB) and HTTP (/pub, /mpub).

Stamp IDs and the timestamp, append the batch to this acceptor's segment for the topic
(single writer, no lock), then queue a PUBLISH descriptor for the topic's router. The
caller answers OK as soon as append() returns: the messages are in a file's pages.
"""
from __future__ import annotations

import time
import zlib

from nsqmp.diskqueue.layout import topic_dir
from nsqmp.diskqueue.segment import RECORD_HEAD, SegmentWriter, encode
from nsqmp.ipc import records
from nsqmp.ipc.mesh import Endpoint, Plan
from nsqmp.protocol.frames import MESSAGE_HEADER
from nsqmp.protocol.ids import IdGenerator, hex_id
from nsqmp.protocol.names import is_ephemeral

_MAX_IDS = 4096


class TopicFull(Exception):
    """The topic reached max-topic-bytes and its policy is to refuse (E_PUB_FAILED / 503)."""



def router_for(topic: bytes, routers: int) -> int:
    """Stable placement of a topic: the same router in every process and every run."""
    return zlib.crc32(topic) % routers


class Publisher:
    def __init__(self, opts, plan: Plan, index: int, endpoint: Endpoint) -> None:
        self.opts = opts
        self.plan = plan
        self.index = index
        self.endpoint = endpoint
        self.ids = IdGenerator(opts.node_id + index)
        self.writers: dict[bytes, SegmentWriter] = {}
        self.full_topics: set[bytes] = set()  # told by routers (max-topic-bytes, refuse)
        self.data_path = opts.data_path
        # what one PUBLISH record may carry: the ring's limit less the descriptor head
        self.max_chunk = plan.ring_capacity // 4 - 512

    def publish(self, topic: bytes, bodies: list[bytes], defer_ms: int = 0) -> None:
        """Persist and hand off a batch; raises OSError if the segment cannot be written.

        defer_ms > 0 (DPUB, /pub?defer=) stores the due time with each message.
        """
        if topic in self.full_topics:
            raise TopicFull()
        ts = time.time_ns()
        due = ts + defer_ms * 1_000_000 if defer_ms > 0 else 0
        pack = MESSAGE_HEADER.pack
        payloads: list[bytes] = []
        for start in range(0, len(bodies), _MAX_IDS):
            chunk = bodies[start:start + _MAX_IDS]
            first = self.ids.next_block(len(chunk))
            payloads += [pack(ts, 0, hex_id(first + k)) + body for k, body in enumerate(chunk)]
        blob = encode(payloads, due)
        if is_ephemeral(topic):
            # never touches the disk: the router holds it in memory, bounded by mem-queue-size
            self._hand_off(topic, records.MEMORY_ONLY, 0, payloads, blob, due)
            return
        writer = self.writers.get(topic)
        if writer is None:
            writer = SegmentWriter(
                topic_dir(self.data_path, topic.decode()), self.index,
                self.opts.max_bytes_per_file, self.opts.sync_every,
            )
            self.writers[topic] = writer
        seq, offset = writer.append(blob)
        self._hand_off(topic, seq, offset, payloads, blob, due)

    def _hand_off(self, topic: bytes, seq: int, offset: int, payloads: list[bytes], blob: bytes,
                  due: int) -> None:
        dst = self.plan.router_slot(router_for(topic, self.plan.routers))
        if len(blob) <= self.max_chunk:
            self.endpoint.send(dst, records.publish(self.index, seq, offset, len(payloads), topic, blob))
            return
        # a batch bigger than one ring record travels as several descriptors
        start = 0
        while start < len(payloads):
            size, end = 0, start
            while end < len(payloads) and (end == start or size + len(payloads[end]) + 8 <= self.max_chunk):
                size += len(payloads[end]) + RECORD_HEAD.size
                end += 1
            piece = encode(payloads[start:end], due)
            self.endpoint.send(dst, records.publish(self.index, seq, offset, end - start, topic, piece))
            offset += len(piece)
            start = end

    def forget(self, topic: bytes) -> None:
        """The topic was deleted: close its writer (a later publish starts a new directory)."""
        writer = self.writers.pop(topic, None)
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
