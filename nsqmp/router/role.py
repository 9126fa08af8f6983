"""The router process: owns its topics, their channels, consumers' credit and every
message's delivery state. Everything arrives as ring records; nothing here touches a
client socket.
"""
from __future__ import annotations

import gc
import itertools
import random
import time
from array import array
from collections import deque
from functools import partial

import orjson

from nsqmp import memstats
from nsqmp.diskqueue.segment import MIN_PAYLOAD, RECORD_HEAD
from nsqmp.ipc import records
from nsqmp.protocol.names import is_ephemeral
from nsqmp.router.channel import DEFER_SLOT_NS, Channel, Consumer, Deferred, Flight, Message
from nsqmp.router.controls import OrderedControls
from nsqmp.router.filequeue import read_span
from nsqmp.lateness import FireLateness
from nsqmp.router.lookup import LookupLink
from nsqmp.router.readback import pack_frames, read_messages
from nsqmp.router.topic import Topic
from nsqmp.roles import Role

# Automatic collections of the young generations only, small enough to stay short: a
# gen-0 pass every _GC_YOUNG net allocations (about 1-3 ms), a gen-1 pass every third.
_GC_YOUNG = 5_000
_GC_NEVER = 2**31 - 1  # gen-2 threshold: a full collection never runs by itself
# Messages a durable channel (or a topic without channels) holds as objects before new
# batches wait in the files as ranges: mem-queue-size, within these bounds. Past the upper
# one, objects only cost memory: a range is read back in C at millions of messages per
# second, from pages the kernel caches anyway.
_MIN_IN_MEMORY = 100
_RECORD_OVERHEAD = RECORD_HEAD.size + MIN_PAYLOAD  # a record's bytes besides its body and due time
_DUE_SIZE = 8  # a DEFER record's due time
_MAX_IN_MEMORY = 10_000
# Messages one delivery pass hands out at most; more wait for the next pass, so that the
# FIREs, FINs and publishes on the rings are taken in between (a pass of a million
# messages would hold the loop, and every deadline, for about half a second)
_PASS_MAX = 16_384
# Messages put in flight between two looks at the timer's ring during a pass (about 0.5 ms
# at a million in flight): a FIRE waits for no more than that, not for a consumer's RDY
_FLY_STEP = 512
# Messages sent between two pushes of the pending frames to the acceptors' rings during a
# pass: the acceptors write the first consumers' frames to their sockets while the router
# still puts the later ones in flight, instead of waiting for the whole pass
_SEND_STEP = 2048
# Messages a channel hands out before the pass turns to the next channel with consumers
# waiting (the channel goes to the back of the pass): a channel with a few messages just
# due does not wait behind one handing out thousands of timed-out ones
_VISIT_MAX = 2048


class Router(Role):
    def __init__(self, opts, plan, index: int, generation: int, doorbells, control_name: str) -> None:
        super().__init__(opts, plan, plan.router_slot(index), generation, doorbells, control_name)
        self.index = index
        self.title = f"nsqmp router {index}"
        self.topics: dict[bytes, Topic] = {}
        self.consumers: dict[int, Consumer] = {}
        self.tokens: dict[int, Flight | Deferred] = {}  # every deadline the timer holds for us
        # tokens carry the incarnation so a timer entry of a dead router never matches ours
        self._token_seq = itertools.count((generation & 0xFFFFFF) << 40 | 1)
        # channels with something to deliver, in the order they will be served (a dict as
        # an ordered set: one a delivery pass could not finish goes to the back)
        self._dirty: dict[Channel, None] = {}
        self._deliver_scheduled = False
        self._refills: set[Channel] = set()  # channels to top up from the files (_refill_soon)
        self._arms = array("Q")  # token, deadline, token, deadline... for the next ARM
        self._acks_pending: set[Topic] = set()
        self._disarms: list[int] = []
        # how late FIREs are taken, per kind (nsqmp/lateness.py; /stats?include_timer=true)
        self.fire_lateness = {"timeouts": FireLateness(), "deferred": FireLateness()}
        self.max_chunk = plan.ring_capacity // 4 - 64
        self.lookup = LookupLink(self)
        # PUT /config/...: router 0 keeps every option changed at run time (CONFIG_SET)
        self.config_overrides: dict = {}
        # requests are answered once every publish answered before them is in (controls.py)
        self.controls = OrderedControls(self, self.answer_control)
        self._subs_waiting: set[int] = set()  # conns whose SUB waits for a barrier (on_sub)
        self.handlers = {
            records.PUBLISH: self.on_publish,
            records.PUBLISH_AT: self.on_publish_at,
            records.SUB: self.on_sub,
            records.RESUB: self._subscribe,
            records.RDY: self.on_rdy,
            records.FIN: self.on_fin,
            records.REQ: self.on_req,
            records.TOUCH: self.on_touch,
            records.CLS: self.on_cls,
            records.GONE: self.on_gone,
            records.A_HELLO: self.on_acceptor_hello,
            records.CONTROL: self.controls.add,
            records.BARRIER_OK: self.controls.on_ok,
            records.FIRE: self.on_fire,
            records.T_HELLO: self.on_timer_hello,
            records.CHANNELS: lambda src, rec: self.lookup.on_channels(rec),
            records.LOOKUPDS: self.on_lookupds,
            records.CONFIG: self.on_config,
        }

    def poll_rings(self) -> bool:
        """With no consumer connected nobody waits on a publish: while publishes come,
        the router takes them once a millisecond instead of being woken for each."""
        return not self.consumers

    def setup(self) -> None:
        from nsqmp.router.recovery import recover_owned

        # the timer's FIREs before anything else, and in the middle of long work (_deliver)
        self.endpoint.make_urgent(self.plan.timer_slot)
        # A full collection walks every queued message: over a second with millions queued,
        # long enough for in-flight messages to time out while FINs wait in the ring. The
        # router's structures form no cyclic garbage (consumer, channel and topic cycles are
        # broken when they are removed), so only the young generations are collected, and
        # often: collecting them every 30 s instead walked every message made in those 30 s
        # (0.7 s for a million in flight, seconds at 1M + 1M, every timer late by as much).
        # What recovery builds is frozen: never walked again.
        gc.disable()
        started = time.monotonic()
        summary = recover_owned(self)
        gc.freeze()
        gc.set_threshold(_GC_YOUNG, 2, _GC_NEVER)
        gc.enable()
        if summary.topics:
            self.log.info("recovered %d topics, %d channels, %d messages (%d deferred) in %.2fs",
                          summary.topics, summary.channels, summary.messages, summary.deferred,
                          time.monotonic() - started)
        if self.opts.sync_timeout > 0:
            self.loop.call_later(self.opts.sync_timeout, self._periodic_sync)

    def _periodic_sync(self) -> None:
        for topic in self.topics.values():
            topic.sync()
        # a flight keeps its members until the last leaves: drop those gone from big ones
        for c in self.consumers.values():
            in_flight = c.channel.in_flight
            for f in c.flights.values():
                if len(f.members) > 128 and f.live * 8 < len(f.members):
                    f.members = in_flight.alive(f.members, f)
        if not self._stopping:
            self.loop.call_later(self.opts.sync_timeout, self._periodic_sync)

    def started(self) -> None:
        hello = records.HELLO_R.pack(records.R_HELLO, self.index)
        for i in range(self.plan.acceptors):
            self.endpoint.send(self.plan.acceptor_slot(i), hello)
        # after the hello (which makes acceptors forget our old topic-full flags)
        for topic in list(self.topics.values()):
            self.check_cap(topic)
        self.lookup.live = True
        self.lookup.send_state()

    def on_record(self, src: int, rec: bytes) -> None:
        handler = self.handlers.get(rec[0])
        if handler is None:
            self.log.error("unexpected record kind %d from slot %d", rec[0], src)
            return
        handler(src, rec)

    # -- scheduling of the delivery pass ------------------------------------------------
    def _mark(self, ch: Channel) -> None:
        self._dirty[ch] = None
        if not self._deliver_scheduled:
            self._deliver_scheduled = True
            self.loop.call_soon(self._deliver)

    def _topic(self, name: bytes) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = self.topics[name] = Topic(name, self.opts.data_path, self.opts.mem_queue_size)
            topic.in_memory = min(max(self.opts.mem_queue_size, _MIN_IN_MEMORY), _MAX_IN_MEMORY)
            if self.opts.e2e_processing_latency_percentiles:
                topic.e2e = (self.opts.e2e_processing_latency_window_time,
                             tuple(self.opts.e2e_processing_latency_percentiles))
            self.lookup.topic_created(topic)
        return topic

    def get_channel(self, topic: Topic, name: bytes, start: dict | None = None) -> Channel:
        """The channel, created if missing (then the first one takes the topic's backlog,
        and the lookupds hear of it)."""
        new = name not in topic.channels
        if start is None and topic.held is not None:
            # the held messages are this channel's too: it starts where holding began
            start = topic.hold_start
        ch, adopted = topic.get_channel(name, start)
        if adopted:
            for m, _ in adopted:  # the backlog's refs become the channel's
                if m.segment is not None:
                    m.segment.refs -= 1
            self._enqueue(ch, adopted)
        if new:
            self.lookup.announce(True, topic.name, name)
        return ch

    # -- publish ---------------------------------------------------------------------------
    def on_publish(self, src: int, rec: bytes) -> None:
        """A batch with a copy of its records (#ephemeral, or deferred)."""
        _, acceptor, seq, offset, count, tlen = records.PUBLISH_HEAD.unpack_from(rec)
        pos = records.PUBLISH_HEAD.size
        blob = memoryview(rec)[pos + tlen:]
        self._publish(rec[pos:pos + tlen], acceptor, seq, offset, count, len(blob), blob)

    def on_publish_at(self, src: int, rec: bytes) -> None:
        """A durable batch, not deferred, left in its segment file."""
        _, acceptor, seq, offset, count, size, tlen = records.PUBLISH_AT_HEAD.unpack_from(rec)
        pos = records.PUBLISH_AT_HEAD.size
        self._publish(rec[pos:pos + tlen], acceptor, seq, offset, count, size, None)

    def _publish(self, name: bytes, acceptor: int, seq: int, offset: int, count: int, size: int,
                 blob: memoryview | None) -> None:
        """Take a batch of `count` records, [offset, offset + size) of the acceptor's file
        seq: as a file range where it can, else as queue entries from blob, the records'
        copy, or (None) read from the file."""
        topic = self._topic(name)
        durable = seq != records.MEMORY_ONLY
        # records at or below the stream's high-water mark were already taken from the files
        # (a recovery or rescan may have seen part of this very batch): skip them one by one
        last = topic.hwm.get(acceptor, (-1, -1)) if durable else (-1, -1)
        span_end = offset + size  # the batch's records are [offset, span_end) of seg
        if durable and (seq, span_end - 1) <= last:
            return
        seg = topic.segment(acceptor, seq) if durable else None
        lazy: list[Channel] = []  # channels that take this batch as a file range
        deferred_batch = blob is not None and len(blob) > 3 and blob[3] & 0x80  # its first record's DEFER bit
        if (durable and topic.held is None and not topic.paused and size > 0 and (seq, offset) > last
                and not deferred_batch):  # the whole batch is new, not deferred, not held
            lazy = self._lazy(topic)
            if len(lazy) == max(1, len(topic.channels)):
                self._adopt_range(topic, seg, offset, span_end, count)
                if self.opts.max_topic_bytes:
                    self.check_cap(topic)
                return
        if blob is None:
            assert seg is not None  # PUBLISH_AT: always durable
            try:
                blob = memoryview(read_span(seg.path, offset, size))
            except OSError as exc:
                # the records stay in the file (no refs taken, hwm not moved): a restart recovers them
                self.log.error("cannot read published records of %s: %s", seg.path, exc)
                return
        # every record of the batch as a (Message, due_ns) entry, in one call
        msgs, consumed, deferred = read_messages(blob, offset, size, seg)
        if durable and msgs and (seq, msgs[-1][0].offset) > last:
            topic.hwm[acceptor] = (seq, msgs[-1][0].offset)
        if msgs and (seq, offset) <= last:  # part of the batch was taken from the files already
            msgs = [e for e in msgs if (seq, e[0].offset) > last]
            if msgs:
                consumed = offset + consumed - msgs[0][0].offset  # the new records are the batch's tail
                deferred = sum(1 for _, due in msgs if due)
        # bodies are what the records hold past each one's head, message header and (DEFER
        # records, those with a due time) due time
        nbytes = consumed - _RECORD_OVERHEAD * len(msgs) - _DUE_SIZE * deferred
        if not msgs:
            return
        if seg is not None:
            topic.count_bytes(seg, consumed)
        self._adopt(topic, msgs, nbytes, lazy, (seg, offset, span_end, count))
        if seg is not None and self.opts.max_topic_bytes:
            self.check_cap(topic)

    def _lazy(self, topic: Topic) -> list:
        """Where a new batch of this topic goes as a file range rather than as objects: the
        durable channels that already hold their in-memory share (mem-queue-size
        messages) or have ranges queued; [None] for the topic's own backlog when it has no
        channel and is in the same state."""
        bound = topic.in_memory
        if not topic.channels:
            return [None] if topic.backlog_pending or len(topic.backlog) >= bound else []
        return [ch for ch in topic.channels.values()
                if not ch.ephemeral and (ch.pending or len(ch.ready) >= bound)]

    def _adopt_range(self, topic: Topic, seg, start: int, end: int, count: int) -> None:
        """A batch of `count` records [start, end) of seg, left in the file for now."""
        size = end - start
        topic.hwm[seg.acceptor] = (seg.seq, end - 1)  # past every record of the batch
        topic.count_bytes(seg, size)
        topic.message_count += count
        topic.message_bytes += size - count * _RECORD_OVERHEAD
        self._queue_range(topic, (seg, start, end, count), list(topic.channels.values()))

    def _queue_range(self, topic: Topic, span: tuple, channels: list) -> None:
        """The records of span (segment, start, end, count) wait in the file: in each of
        these channels' file queues, or in the topic's own when there is no channel."""
        seg, start, end, count = span
        if not channels:
            topic.backlog_pending.add(seg, start, end, count)
            seg.refs += count
            return
        for ch in channels:
            ch.pending.add(seg, start, end, count)
            seg.refs += count
            ch.message_count += count
            self._mark(ch)

    def _refill(self, ch: Channel, want: int = 0) -> None:
        """Read the channel's next records back from the files into its in-memory queue:
        `want` of them, or as many as its in-memory share has room for."""
        want = want or ch.topic.in_memory - len(ch.ready)
        entries, deferred = ch.pending.take(want)
        ready = ch.ready
        if not deferred:  # (m, 0): the ready entry (message, attempts) as it is
            ready.extend(entries)
            return
        now = time.time_ns()
        for m, due in entries:
            if due > now:
                self._defer(ch, m, 0, self._mono(due))
            else:
                ready.append((m, 0))

    # -- max-topic-bytes ---------------------------------------------------------------------
    def check_cap(self, topic: Topic) -> None:
        """Apply topic-full-policy when the topic's files pass max-topic-bytes."""
        cap = self.opts.max_topic_bytes
        if not cap or topic.ephemeral:
            return
        if self.opts.topic_full_policy == "refuse":
            full = topic.disk_bytes > cap or (topic.full and topic.disk_bytes > cap * 0.9)
            if full != topic.full:
                topic.full = full
                self.log.warning("topic %s %s (%d bytes in files, cap %d)", topic.name.decode(),
                                 "is full: refusing publishes" if full else "has room again",
                                 topic.disk_bytes, cap)
                rec = bytes((records.TOPIC_FULL, full)) + topic.name
                for i in range(self.plan.acceptors):
                    self.endpoint.send(self.plan.acceptor_slot(i), rec)
            return
        while topic.disk_bytes > cap:
            victim = next((s for s in topic.segments.values()
                           if not s.dropped and s.seq < topic.latest_seq.get(s.acceptor, -1)), None)
            if victim is None:
                return  # only files still being written: nothing older to drop
            self._drop_segment(topic, victim)

    def _drop_segment(self, topic: Topic, seg) -> None:
        """drop-oldest: forget every queued copy of this file's messages, for good."""
        seg.dropped = True
        topic.disk_bytes -= seg.bytes
        dropped = 0
        for ch in topic.channels.values():
            keep = [(m, a) for m, a in ch.ready if m.segment is not seg]
            gone = [m for m, a in ch.ready if m.segment is seg]
            for d in list(ch.deferred.values()):
                left = [(m, a) for m, a in d.entries if m.segment is not seg]
                if len(left) == len(d.entries):
                    continue
                gone.extend(m for m, a in d.entries if m.segment is seg)
                ch.deferred_count -= len(d.entries) - len(left)
                d.entries = left
                if not left:
                    del ch.deferred[d.slot]
                    self.tokens.pop(d.token, None)
                    self._disarms.append(d.token)
            ch.ready.clear()
            ch.ready.extend(keep)
            ch.in_flight.forget(gone)  # the slots kept for timed-out ones
            for m in gone:
                topic.ack(ch, seg, m.offset)  # so a restart does not bring it back
                topic.release(seg)
            dropped += len(gone)
            for offset in ch.pending.remove_segment(seg):
                topic.ack(ch, seg, offset)
                topic.release(seg)
                dropped += 1
        backlog = [(m, d) for m, d in topic.backlog if m.segment is seg]
        if backlog:
            topic.backlog = type(topic.backlog)((m, d) for m, d in topic.backlog if m.segment is not seg)
            for _ in backlog:
                topic.release(seg)
            dropped += len(backlog)
        if topic.held:  # a new topic waiting for the lookupds' channels
            held = []
            for msgs, nbytes in topic.held:
                keep = [(m, d) for m, d in msgs if m.segment is not seg]
                for _ in range(len(msgs) - len(keep)):
                    topic.release(seg)
                dropped += len(msgs) - len(keep)
                held.append((keep, nbytes))
            topic.held = held
        for _ in topic.backlog_pending.remove_segment(seg):
            topic.release(seg)
            dropped += 1
        topic.dropped += dropped
        self._acks_pending.add(topic)
        self._flush_timer_soon()
        self.log.warning("topic %s over max-topic-bytes: dropped %d queued messages of %s",
                         topic.name.decode(), dropped, seg.path)

    def _adopt(self, topic: Topic, msgs: list, nbytes: int, lazy: list | None = None,
               span: tuple | None = None) -> None:
        """Take new (Message, due_ns) entries: fan out to every channel, or keep for the first.

        The channels in `lazy` take the whole batch as the file range `span` (segment,
        start, end, count) instead, and a lazy topic backlog ([None]) likewise.
        """
        if topic.held is not None:  # a new topic waiting for the lookupds' channels
            self.lookup.hold(topic, msgs, nbytes)
            return
        topic.message_count += len(msgs)
        topic.message_bytes += nbytes
        channels = list(topic.channels.values())
        if lazy and span is not None and not topic.paused:
            self._queue_range(topic, span, [ch for ch in lazy if ch is not None])
            if not channels:
                return
            channels = [ch for ch in channels if ch not in lazy]
        if not channels or topic.paused:  # held at the topic, as nsqd's topic messagePump
            if topic.ephemeral:
                room = max(0, topic.mem_queue_size - len(topic.backlog))
                topic.dropped += max(0, len(msgs) - room)
                msgs = msgs[:room]
            topic.backlog.extend(msgs)
            for m, _ in msgs:
                if m.segment is not None:
                    m.segment.refs += 1
            return
        self._fan_out(topic, msgs, channels)

    def release_held(self, topic: Topic) -> None:
        """An unpaused topic hands what it held to its channels (without any it keeps them)."""
        if not topic.channels:
            return
        if topic.backlog_pending:  # held since before the topic had channels, still in the files
            pending = topic.backlog_pending
            count = len(pending)
            channels = list(topic.channels.values())
            for ch in channels[1:]:  # a copy of each range for every other channel
                for seg, start, end, n in pending.ranges:
                    ch.pending.add(seg, start, end, n)
                    seg.refs += n
            for ch in channels:
                ch.message_count += count
                self._mark(ch)
            channels[0].pending.extend(pending)  # the topic's refs become the first channel's
        if not topic.backlog:
            return
        held = list(topic.backlog)
        topic.backlog.clear()
        for m, _ in held:  # the topic's file references become the channels'
            if m.segment is not None:
                m.segment.refs -= 1
        self._fan_out(topic, held, list(topic.channels.values()))

    def _fan_out(self, topic: Topic, msgs: list, channels: list) -> None:
        """A copy of every (Message, due_ns) for each channel."""
        for ch in channels:
            if ch.ephemeral or topic.ephemeral:
                room = max(0, topic.mem_queue_size - len(ch.ready))
                take = msgs[:room]
                topic.dropped += len(msgs) - len(take)
            else:
                take = msgs
            self._enqueue(ch, take)

    def _enqueue(self, ch: Channel, entries: list, attempts: dict | None = None) -> None:
        """New (Message, due_ns) entries for a channel: ready now, or deferred until due.

        attempts (recovery only) maps a message to the attempts it had already made.
        Per message this is the router's busiest Python (a million DPUBs come through
        here): the clock offset is taken once per batch, a ready entry with no attempts
        is the (message, 0) tuple itself, and the segment references are added per run
        of messages of one file.
        """
        ready = ch.ready
        slot_of = self._slot_of
        offset = time.monotonic_ns() - time.time_ns()  # a wall-clock due time -> monotonic
        n_deferred = 0
        seg_run, run = None, 0
        for entry in entries:
            m, due = entry
            tries = attempts.get(m, 0) if attempts else 0
            if due:
                slot_of(ch, due + offset).entries.append((m, tries))
                n_deferred += 1
            elif tries:
                ready.append((m, tries))
            else:
                ready.append(entry)  # (m, 0): the ready entry (message, attempts) as it is
            seg = m.segment
            if seg is not seg_run:
                if seg_run is not None:
                    seg_run.refs += run
                seg_run, run = seg, 0
            run += 1
        if seg_run is not None:
            seg_run.refs += run
        ch.deferred_count += n_deferred
        ch.message_count += len(entries)
        self._mark(ch)

    @staticmethod
    def _mono(wall_ns: int) -> int:
        """A wall-clock due time (stored with the message) on the monotonic clock."""
        return wall_ns - time.time_ns() + time.monotonic_ns()

    def _defer(self, ch: Channel, m: Message, attempts: int, deadline: int) -> None:
        """Hold m until deadline (monotonic ns), with the channel's others due in that
        millisecond (Deferred): a new timer entry only for the first of them."""
        self._slot_of(ch, deadline).entries.append((m, attempts))
        ch.deferred_count += 1

    def _slot_of(self, ch: Channel, deadline: int) -> Deferred:
        """The channel's Deferred for the millisecond of deadline (monotonic ns), made with
        its timer entry if it is the first due then."""
        slot = max(deadline, 0) // DEFER_SLOT_NS  # long past (a recovered message): due at once
        batch = ch.deferred.get(slot)
        if batch is not None:
            return batch
        batch = ch.deferred[slot] = Deferred(next(self._token_seq), ch, slot, (slot + 1) * DEFER_SLOT_NS)
        self.tokens[batch.token] = batch
        self._arms.append(batch.token)
        self._arms.append(batch.deadline)
        self._flush_timer_soon()
        return batch

    # -- consumers -------------------------------------------------------------------------
    def on_sub(self, src: int, rec: bytes) -> None:
        """A connection's SUB. One that creates its channel waits for a barrier, as control
        requests do (controls.py): the new channel must not get a deferred message answered
        on the other acceptor before the SUB. The connection reads nothing more until
        SUB_OK, so only its GONE can come meanwhile."""
        conn, topic_name, channel_name, _ = records.unpack_sub(rec)
        topic = self.topics.get(topic_name)
        if topic is not None and channel_name in topic.channels:
            self._subscribe(src, rec)
            return
        self._subs_waiting.add(conn)
        self.controls.after_barrier(partial(self._subscribe_after_barrier, src, rec))

    def _subscribe_after_barrier(self, src: int, rec: bytes) -> None:
        conn, topic_name, channel_name, _ = records.unpack_sub(rec)
        if conn in self._subs_waiting:
            self._subs_waiting.discard(conn)
            self._subscribe(src, rec)
        elif not is_ephemeral(channel_name):
            # gone meanwhile: nsqd's SUB would have made the channel, which outlives its
            # consumer unless it is #ephemeral
            self.get_channel(self._topic(topic_name), channel_name)

    def _subscribe(self, src: int, rec: bytes) -> None:
        conn, topic_name, channel_name, info = records.unpack_sub(rec)
        old = self.consumers.get(conn)
        if old is not None:
            self._drop_consumer(old)
        topic = self._topic(topic_name)
        ch = self.get_channel(topic, channel_name)
        limit = self.opts.max_channel_consumers
        if limit and len(ch.consumers) >= limit:
            # nsqd's AddClient refuses once the channel exists, and its SUB closes the connection
            self._error(conn, True, f"E_SUB_FAILED SUB failed consumers for {topic_name.decode()}:"
                                    f"{channel_name.decode()} exceeds limit of {limit}")
            return
        consumer = Consumer(conn, ch, orjson.loads(info))
        ch.consumers[conn] = consumer
        self.consumers[conn] = consumer
        self.endpoint.send(src, records.CONN.pack(records.SUB_OK, conn))

    def on_rdy(self, src: int, rec: bytes) -> None:
        _, conn, count = records.CONN_U32.unpack(rec)
        c = self.consumers.get(conn)
        if c is not None:
            c.rdy = count
            self._mark(c.channel)

    def on_cls(self, src: int, rec: bytes) -> None:
        _, conn = records.CONN.unpack(rec)
        c = self.consumers.get(conn)
        if c is not None:
            c.closing = True
            c.rdy = 0  # nsqd's StartClose: RDY 0, state closing

    def on_gone(self, src: int, rec: bytes) -> None:
        _, conn = records.CONN.unpack(rec)
        self._subs_waiting.discard(conn)
        c = self.consumers.get(conn)
        if c is not None:
            self._drop_consumer(c)

    def on_acceptor_hello(self, src: int, rec: bytes) -> None:
        """A new acceptor incarnation: the connections of the old one are gone."""
        _, acceptor, generation = records.HELLO_A.unpack(rec)
        if acceptor == 0:
            self.lookup.send_state()  # the registrar starts from nothing
        if self.index == 0 and self.config_overrides:
            self.endpoint.send(src, bytes((records.CONFIG_SET,)) + orjson.dumps(self.config_overrides))

        def gone(conn: int) -> bool:  # a connection of one of this acceptor's earlier incarnations
            return records.conn_acceptor(conn) == acceptor and records.conn_generation(conn) != generation

        for c in list(self.consumers.values()):
            if gone(c.conn):
                self._drop_consumer(c)
        self._subs_waiting = {conn for conn in self._subs_waiting if not gone(conn)}
        if generation > 1:
            # the old incarnation may have answered OK for records whose PUBLISH never made
            # it into the ring: they are in its segment files, past our high-water mark
            from nsqmp.router.recovery import rescan_acceptor

            found = rescan_acceptor(self, acceptor)
            if found:
                self.log.info("took %d records of acceptor %d's previous incarnation from its files",
                              found, acceptor)
        # a barrier sent to the old incarnation: its records are all in now
        self.controls.forget(src)

    def _drop_consumer(self, c: Consumer) -> None:
        """Forget a consumer and requeue what it had in flight at once."""
        self.consumers.pop(c.conn, None)
        ch = c.channel
        ch.consumers.pop(c.conn, None)
        # its own flights, not a walk of the channel's whole in-flight set
        back: deque = deque()
        for token, f in c.flights.items():
            self._ground(ch, f, back)
            self.tokens.pop(token, None)
            self._disarms.append(token)
        c.flights.clear()
        ch.ready.extendleft(reversed(back))  # at the head, in the order they went out
        ch.requeue_count += len(back)
        if back:
            self._mark(ch)
            self._flush_timer_soon()
        if ch.ephemeral and not ch.consumers:
            self._delete_channel(ch)

    def _delete_channel(self, ch: Channel) -> None:
        topic = ch.topic
        if topic.channels.pop(ch.name, None) is None:
            return
        self._clear_channel(ch)
        self._dirty.pop(ch, None)
        self.lookup.announce(False, topic.name, ch.name)
        if topic.ephemeral and not topic.channels and self.topics.pop(topic.name, None) is not None:
            self.lookup.announce(False, topic.name)

    def _clear_channel(self, ch: Channel) -> None:
        """Drop every message the channel holds (queued, in flight, deferred): their file
        references go, and the timer forgets their deadlines."""
        topic = ch.topic
        for m, _ in ch.ready:
            if m.segment is not None:
                topic.release(m.segment)
        for batch in ch.deferred.values():
            self.tokens.pop(batch.token, None)
            self._disarms.append(batch.token)
            for m, _ in batch.entries:
                if m.segment is not None:
                    topic.release(m.segment)
        for m, _, _ in ch.in_flight.entries():
            if m.segment is not None:
                topic.release(m.segment)
        for seg, count in ch.pending.clear():
            topic.release(seg, count)
        ch.ready.clear()
        ch.in_flight.clear()
        ch.deferred.clear()
        ch.deferred_count = 0
        for c in ch.consumers.values():
            for token in c.flights:
                self.tokens.pop(token, None)
                self._disarms.append(token)
            c.in_flight = 0
            c.flights.clear()
        self._flush_timer_soon()

    def _error(self, conn: int, fatal: bool, text: str) -> None:
        self.endpoint.send(records.conn_acceptor(conn),
                           records.CONN_ERR_HEAD.pack(records.CONN_ERR, conn, fatal) + text.encode())

    def _owned(self, conn: int, msg_id: bytes, cmd: str) -> tuple | None:
        """The in-flight entry (Message, attempts, Flight) if this connection may
        FIN/REQ/TOUCH it, else None after a non-fatal error."""
        c = self.consumers.get(conn)
        entry = c.channel.in_flight.get(msg_id) if c is not None else None
        if entry is not None and entry[2].consumer is c:
            return entry
        why = "ID not in flight" if entry is None else "client does not own message"
        self._error(conn, False, f"E_{cmd}_FAILED {cmd} {msg_id.decode(errors='replace')} failed {why}")
        return None

    def _leave(self, f: Flight) -> None:
        """A message has left flight f; the flight's timer entry goes with its last member."""
        f.live -= 1
        if not f.live:
            self._retire(f)

    def _retire(self, f: Flight) -> None:
        """Flight f has no message left in it: forget it, and disarm its timer entry."""
        self.tokens.pop(f.token, None)
        self._disarms.append(f.token)
        f.consumer.flights.pop(f.token, None)

    def _take(self, msg_id: bytes, f: Flight) -> Consumer:
        """Take a message out of flight f (REQ): no longer the consumer's, nor the timer's."""
        c = f.consumer
        c.channel.in_flight.remove(msg_id)
        self._leave(f)
        c.in_flight -= 1
        self._mark(c.channel)
        return c

    def on_fin(self, src: int, rec: bytes) -> None:
        """FIN of one or more IDs: a connection's FINs of one tick, in the order sent."""
        conn = records.CONN.unpack_from(rec)[1]
        c = self.consumers.get(conn)
        ids = range(records.CONN.size, len(rec), 16)
        if c is None:
            for pos in ids:
                self._owned(conn, rec[pos:pos + 16], "FIN")  # each gets its E_FIN_FAILED
            return
        ch = c.channel
        topic = ch.topic
        bad: list[bytes] = []
        emptied: list[Flight] = []
        # in C: each owned ID leaves the map and its flight; the acks grouped by file
        msgs, runs = ch.in_flight.finish(rec, records.CONN.size, c, bad, emptied)
        for msg_id in bad:
            self._owned(conn, msg_id, "FIN")  # each gets its E_FIN_FAILED, in order
        for f in emptied:  # a flight's timer entry goes with its last message
            self._retire(f)
        done = len(msgs)
        if not done:
            return
        if ch.e2e is not None:
            now = time.time_ns()
            for m in msgs:
                ch.e2e.insert(now - m.ts)
        c.in_flight -= done
        c.finish_count += done
        self._mark(ch)
        if runs:
            for seg, offsets in runs:
                topic.finish(ch, seg, offsets)
            if topic.full:
                self.check_cap(topic)
            self._acks_pending.add(topic)

    def on_req(self, src: int, rec: bytes) -> None:
        """REQ: back in the queue now (delay 0) or deferred; the delay is already clamped."""
        _, conn, delay_ms, msg_id = records.REQ_HEAD.unpack(rec)
        entry = self._owned(conn, msg_id, "REQ")
        if entry is None:
            return
        m, attempts, f = entry
        c = self._take(msg_id, f)
        c.requeue_count += 1
        ch = c.channel
        ch.requeue_count += 1
        if delay_ms:
            self._defer(ch, m, attempts, time.monotonic_ns() + delay_ms * 1_000_000)
        else:
            ch.ready.append((m, attempts))

    def on_touch(self, src: int, rec: bytes) -> None:
        _, conn, msg_id = records.CONN_ID.unpack(rec)
        entry = self._owned(conn, msg_id, "TOUCH")
        if entry is None:
            return
        m, attempts, f = entry
        c = f.consumer
        timeout = int(c.info.get("msg_timeout", 60000)) * 1_000_000
        deadline = min(time.monotonic_ns() + timeout, f.delivered + int(self.opts.max_msg_timeout * 1e9))
        if f.live > 1:  # it leaves its delivery pass's flight for one of its own
            self._leave(f)
            f = Flight(next(self._token_seq), c, deadline, f.delivered, 1, [m, attempts])
            c.flights[f.token] = self.tokens[f.token] = f
            c.channel.in_flight.move(msg_id, f)
        f.deadline = deadline
        self._arms.append(f.token)  # a new entry, or the same one moved
        self._arms.append(deadline)
        self._flush_timer_soon()

    # -- deadlines -------------------------------------------------------------------------
    def on_fire(self, src: int, rec: bytes) -> None:
        """Deadlines passed: timed-out and deferred messages go back to their queues; one
        delivery pass for the whole record then hands them out."""
        pop = self.tokens.pop
        clock = time.monotonic_ns
        late_timeouts, late_deferred = self.fire_lateness["timeouts"], self.fire_lateness["deferred"]
        touched: set[Channel] = set()
        last = None
        for token in records.unpack_tokens(rec):
            entry = pop(token, None)
            if entry is None:
                continue
            if isinstance(entry, Deferred):
                ch = entry.channel
                del ch.deferred[entry.slot]
                ch.ready.extend(entry.entries)
                ch.deferred_count -= len(entry.entries)
                # counted from the slot's start: at most 1 ms more than from each due time
                late_deferred.add(clock() - entry.deadline + DEFER_SLOT_NS, len(entry.entries))
            else:  # a flight: its members still in it time out together
                c = entry.consumer
                ch = c.channel
                del c.flights[token]
                n = self._ground(ch, entry, ch.ready)
                if n:
                    late_timeouts.add(clock() - entry.deadline, n)
                c.in_flight -= n
                ch.timeout_count += n
            if ch is not last:
                touched.add(ch)
                last = ch
        for ch in touched:
            self._mark(ch)

    @staticmethod
    def _ground(ch: Channel, f: Flight, ready) -> int:
        """Flight f's messages still in it go back to `ready` (it timed out, or its consumer
        is gone); how many. A flight no member has left is one call that looks at none of
        them (InFlightMap.expire)."""
        if f.live * 2 == len(f.members):
            n = ch.in_flight.expire(f.members, f, ready)
        else:
            n = ch.in_flight.land(f.members, f, ready)
        f.live = 0
        return n

    def on_timer_hello(self, src: int, rec: bytes) -> None:
        """A new timer knows nothing: give it every deadline again."""
        arms = self._arms
        for entry in self.tokens.values():
            arms.append(entry.token)
            arms.append(entry.deadline)
        self._flush_timer_soon()

    # -- lookupd and run-time options (from acceptor 0) -------------------------------------------
    def on_lookupds(self, src: int, rec: bytes) -> None:
        _, self.lookup.lookupds = records.COUNT_U16.unpack(rec)

    def on_config(self, src: int, rec: bytes) -> None:
        """Options changed at run time: router 0 takes them back after a restart, the other
        routers apply them (log level)."""
        overrides = orjson.loads(rec[1:])
        if self.index == 0:
            self.config_overrides.update(overrides)
        self.apply_config(overrides)

    def _flush_timer_soon(self) -> None:
        if not self._deliver_scheduled:
            self._deliver_scheduled = True
            self.loop.call_soon(self._deliver)

    def _flush_timer(self) -> None:
        timer = self.plan.timer_slot
        if self._arms:
            arms, self._arms = self._arms, array("Q")
            step = 2 * max(1, self.max_chunk // 16)  # values: two per entry
            for start in range(0, len(arms), step):
                self.endpoint.send(timer, records.arm_flat(arms[start:start + step]))
        step = max(1, self.max_chunk // 8)
        while self._disarms:
            disarms, self._disarms = self._disarms[:step], self._disarms[step:]
            self.endpoint.send(timer, records.tokens(records.DISARM, disarms))

    # -- delivery ----------------------------------------------------------------------------
    def _deliver(self) -> None:
        """Hand ready messages to consumers with credit, many frames per ring record."""
        self._deliver_scheduled = False
        now = time.monotonic_ns()
        tokens = self.tokens
        arm = self._arms.append
        next_token = self._token_seq.__next__
        top_up: list[Channel] = []
        budget = _PASS_MAX
        dirty = self._dirty
        endpoint = self.endpoint
        urgent_waiting = endpoint.urgent_waiting
        unpushed = 0  # messages sent since the last push to the rings
        while dirty and budget > 0:
            ch = next(iter(dirty))
            del dirty[ch]
            if ch.paused:  # a paused topic's channels still deliver what they hold
                continue
            ready = ch.ready
            if ch.pending:
                if not ready:  # read now what the consumers can take now; the rest after this pass
                    credit = sum(c.credit for c in ch.consumers.values())
                    self._refill(ch, min(max(256, credit), ch.topic.in_memory, budget))
                top_up.append(ch)
            if not ready:
                continue
            in_flight = ch.in_flight
            visit = 0
            for c in ch.with_credit():
                if c.info.get("sample_rate"):
                    self._sample(ch, c)
                n = min(c.credit, len(ready), budget)
                if n <= 0:
                    break
                budget -= n
                # one flight (deadline, timer entry) for everything this pass hands c
                deadline = now + int(c.info.get("msg_timeout", 60000)) * 1_000_000
                flight = Flight(next_token(), c, deadline, now, n)
                tokens[flight.token] = c.flights[flight.token] = flight
                arm(flight.token)
                arm(deadline)
                frames: list = []  # (Message, attempts)
                for start in range(0, n, _FLY_STEP):
                    in_flight.fly(ready, min(_FLY_STEP, n - start), flight, flight.members, frames)
                    if urgent_waiting():  # a FIRE came meanwhile: its messages go back now
                        endpoint.drain_urgent(self.on_record)
                c.in_flight += n
                c.message_count += n
                # out now: a connection has one SUB, so no other channel's frames would join these
                self._send_frames(c.conn, frames)
                unpushed += n
                if unpushed >= _SEND_STEP:
                    unpushed = 0
                    endpoint.flush()
                if urgent_waiting():
                    endpoint.drain_urgent(self.on_record)
                if not ready:
                    break
                visit += n
                if visit >= _VISIT_MAX and dirty:  # the other channels' turn
                    dirty[ch] = None
                    break
            if budget <= 0:  # this channel may have more for its consumers: at the back
                dirty[ch] = None
        if dirty:  # the pass's budget ran out: the rest after what waits on the rings
            if not self._deliver_scheduled:
                self._deliver_scheduled = True
                self.loop.call_soon(self._deliver)
        self._flush_timer()
        for topic in self._acks_pending:
            topic.flush_acks()
        self._acks_pending.clear()
        for ch in top_up:  # after the sends above scheduled their flush
            self._refill_soon(ch)

    def _refill_soon(self, ch: Channel) -> None:
        """Top the channel's in-memory queue up from the files once it is half empty: in a
        callback of its own, after this pass's deliveries have gone out."""
        if len(ch.ready) >= ch.topic.in_memory // 2 or ch in self._refills:
            return
        if not self._refills:
            self.loop.call_soon(self._refill_all)
        self._refills.add(ch)

    def _refill_all(self) -> None:
        refills, self._refills = self._refills, set()
        for ch in refills:
            if ch.pending and ch.topic.channels.get(ch.name) is ch:
                self._refill(ch)
                if any(c.credit > 0 for c in ch.consumers.values()):
                    self._mark(ch)

    def _sample(self, ch: Channel, c: Consumer) -> None:
        """IDENTIFY sample_rate: as nsqd's messagePump, each message this consumer would take
        is skipped unless a draw in 0..99 is at most the rate; a skipped message is gone
        for the channel (finished without being sent), so it is acknowledged here.
        Leaves at the head of the queue up to the consumer's credit of messages it keeps."""
        rate = int(c.info["sample_rate"])
        ready = ch.ready
        keep: list = []
        skipped: list = []
        while ready and len(keep) < c.credit:
            entry = ready.popleft()
            if random.randrange(100) <= rate:
                keep.append(entry)
                continue
            m = entry[0]
            skipped.append(m)
            if m.segment is not None:
                topic = ch.topic
                topic.ack(ch, m.segment, m.offset)
                topic.release(m.segment)
                self._acks_pending.add(topic)
        ready.extendleft(reversed(keep))
        ch.in_flight.forget(skipped)  # a timed-out one's slot, kept for its next flight

    def _send_frames(self, conn: int, entries: list) -> None:
        """DELIVER records carrying the message frames of (Message, attempts) entries: up
        to max_chunk bytes of frames each (pack_frames builds one record per call)."""
        dst = self.plan.acceptor_slot(records.conn_acceptor(conn))
        head = records.CONN.pack(records.DELIVER, conn)
        i, n = 0, len(entries)
        while i < n:
            data, i = pack_frames(head, entries, i, self.max_chunk)
            self.endpoint.send(dst, data)

    # -- control requests from acceptors ---------------------------------------------------------
    def answer_control(self, src: int, rec: bytes) -> None:
        _, req_id = records.REQ_ID.unpack_from(rec)
        request = orjson.loads(rec[records.REQ_ID.size:])
        op = request.get("op")
        if op == "stats":
            want = request.get("topic")
            reply: dict = {"topics": [
                t.stats(request.get("channel"), request.get("include_clients", True))
                for name, t in self.topics.items() if want is None or name.decode() == want
            ]}
        elif op == "memory":
            reply = memstats.sample()
        else:
            from nsqmp.router import admin

            handler = admin.OPS.get(op)
            reply = handler(self, request) if handler is not None else {"error": "INVALID_REQUEST"}
        self.endpoint.send(src, records.REQ_ID.pack(records.REPLY, req_id) + orjson.dumps(reply))

    async def stop(self) -> None:
        """Append and sync every pending acknowledgement; the next router recovers the rest."""
        for topic in self.topics.values():
            topic.close()
