"""The router process: owns its topics, their channels, consumers' credit and every
message's delivery state. Everything arrives as ring records; nothing here touches a
client socket.

This module is the dispatch: each record kind has a handler that decodes the record and
calls the noun that owns the verb (router/topic.py, router/channel.py, the timer link in
router/deadlines.py, consumers in router/subscriptions.py); the delivery pass and the
tick around it are router/delivery.py.
"""
from __future__ import annotations

import gc
import logging
import time

from nsqmp import memstats
from nsqmp.ipc import records
from nsqmp.layouts import ID
from nsqmp.router.controls import OrderedControls
from nsqmp.router.deadlines import Deadlines
from nsqmp.router.deadletter import DeadLetters
from nsqmp.router.delivery import Delivery
from nsqmp.router.channel import Channel
from nsqmp.router.expiry import Sweeper, apply_meta
from nsqmp.router.lookup import LookupLink
from nsqmp.router.subscriptions import Subscriptions
from nsqmp.router.topic import Topic, TopicLinks
from nsqmp.roles import Role

# topic and channel events (nsqd's lines), under the router's name
log = logging.getLogger("nsqmp.router")

# Automatic collections of the young generations only, small enough to stay short: a
# gen-0 pass every _GC_YOUNG net allocations (about 1-3 ms), a gen-1 pass every third.
_GC_YOUNG = 5_000
_GC_NEVER = 2**31 - 1  # gen-2 threshold: a full collection never runs by itself
# Messages in flight from which a consumer's pipe counts as full: a millisecond more before
# its FINs free credit leaves it a thousand messages to work on meanwhile
FULL_PIPE = 1024
# Consumers a router looks at per drain to decide that (1.7 us for 64); with more it is
# woken as before: a look at each of thousands of consumers on every drain would cost more
# than the wake-ups it saves
FULL_PIPE_LOOK_MAX = 64
# Messages a durable channel (or a topic without channels) holds as objects before new
# batches wait in the files as ranges: mem-queue-size, within these bounds. Past the upper
# one, objects only cost memory: a range is read back in C at millions of messages per
# second, from pages the kernel caches anyway.
_MIN_IN_MEMORY = 100
_MAX_IN_MEMORY = 10_000


class Router(Role):
    """A router process: its topics, and the record kind -> handler table that feeds them."""

    def __init__(self, opts, plan, index: int, generation: int, doorbells, control_name: str) -> None:
        super().__init__(opts, plan, plan.router_slot(index), generation, doorbells, control_name)
        self.index = index
        self.title = f"nsqmp router {index}"
        self.topics: dict[bytes, Topic] = {}
        self.max_chunk = plan.ring_capacity // 4 - 64
        self.deadlines = Deadlines(generation, plan.timer_slot, self.max_chunk)
        self.delivery = Delivery(self.deadlines, lambda callback: self.loop.call_soon(callback),
                                 self.end_tick, plan.acceptor_slot, self.max_chunk)
        self.deadlines.wake = self.delivery.wake
        self.links = TopicLinks(self.deadlines, self.delivery.mark, self.to_acceptors, set(),
                                opts.max_topic_bytes, opts.topic_full_policy)
        # message TTL and dead letters (router/expiry.py, router/deadletter.py)
        self.links.msg_ttl_ns = int(opts.msg_ttl * 1e9)
        self.links.max_attempts = opts.max_attempts
        self.dead_letters = self.links.dead_letters = DeadLetters(self)
        self.sweeper = Sweeper(self)
        self.lookup = LookupLink(self)
        # PUT /config/...: router 0 keeps every option changed at run time (CONFIG_SET)
        self.config_overrides: dict = {}
        # requests are answered once every publish answered before them is in (controls.py)
        self.controls = OrderedControls(self, self.answer_control)
        self.subscriptions = Subscriptions(self)
        self.consumers = self.subscriptions.consumers  # conn -> Consumer
        subs = self.subscriptions
        self.handlers = {
            records.PUBLISH: self.on_publish,
            records.PUBLISH_AT: self.on_publish_at,
            records.SUB: subs.on_sub,
            records.RESUB: subs.subscribe,
            records.RDY: subs.on_rdy,
            records.FIN: self.on_fin,
            records.UNSENT: self.on_unsent,
            records.REQ: self.on_req,
            records.TOUCH: self.on_touch,
            records.CLS: subs.on_cls,
            records.GONE: subs.on_gone,
            records.A_HELLO: subs.on_acceptor_hello,
            records.CONTROL: self.controls.add,
            records.BARRIER_OK: self.controls.on_ok,
            records.FIRE: self.on_fire,
            records.T_HELLO: self.on_timer_hello,
            records.CHANNELS: lambda src, rec: self.lookup.on_channels(rec),
            records.LOOKUPDS: self.on_lookupds,
            records.CONFIG: self.on_config,
            records.DEAD_LETTER_OK: self.dead_letters.on_ok,
        }

    def poll_rings(self) -> bool:
        """True while no one waits on the router: no consumer connected (nobody waits on
        a publish), or every consumer with RDY has FULL_PIPE messages or more in flight
        (none waits on a FIN freeing its credit, or on a publish). The router then takes
        what comes once a millisecond instead of being woken for each record. A consumer
        with a small RDY, or one waiting for messages, keeps the router woken at once, as
        do more than FULL_PIPE_LOOK_MAX consumers."""
        consumers = self.consumers
        if len(consumers) > FULL_PIPE_LOOK_MAX:
            return False
        return all(c.in_flight >= FULL_PIPE for c in consumers.values() if c.rdy)

    def setup(self) -> None:
        """In the child: attach to the rings, then rebuild the owned topics from the files."""
        from nsqmp.router.recovery import recover_owned

        # the timer's FIREs before anything else, and in the middle of long work (a delivery pass)
        self.endpoint.make_urgent(self.plan.timer_slot)
        self.endpoint.merge = records.coalesce_publish_at  # one-message PUBs: one record per run
        self.delivery.attach(self.endpoint, self.on_record)
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
        for topic in self.topics.values():  # TTLs, dead-letter settings and counters in meta.json
            apply_meta(topic, self.links.msg_ttl_ns)
        self.sweeper.start()
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
        """Every sync-timeout: acks appended and synced, big flights' members trimmed."""
        for topic in self.topics.values():
            topic.sync()
        for c in self.consumers.values():
            c.channel.trim_flights(c)
        if not self._stopping:
            self.loop.call_later(self.opts.sync_timeout, self._periodic_sync)

    def started(self) -> None:
        """Say hello to the acceptors, apply the cap, tell the lookupds what we own."""
        hello = records.hello_r(self.index)
        for i in range(self.plan.acceptors):
            self.endpoint.send(self.plan.acceptor_slot(i), hello)
        # after the hello (which makes acceptors forget our old topic-full flags)
        for topic in list(self.topics.values()):
            topic.check_cap()
        self.lookup.live = True
        self.lookup.send_state()

    def end_tick(self) -> None:
        """What a tick queued goes out: ARMs and DISARMs to the timer, acks to the files.
        Runs after each delivery pass (Delivery.tick)."""
        self.deadlines.flush(self.endpoint.send)
        due = self.links.acks_due
        for topic in due:
            topic.flush_acks()
        due.clear()

    def apply_config(self, overrides: dict) -> None:
        """Options changed at run time; the topics' cap follows them."""
        super().apply_config(overrides)
        self.links.max_topic_bytes = self.opts.max_topic_bytes
        self.links.topic_full_policy = self.opts.topic_full_policy

    def to_acceptors(self, rec: bytes) -> None:
        """The same record for every acceptor."""
        for i in range(self.plan.acceptors):
            self.endpoint.send(self.plan.acceptor_slot(i), rec)

    def error(self, conn: int, fatal: bool, text: str) -> None:
        """An error for a client connection (fatal: the acceptor closes it after)."""
        self.endpoint.send(records.conn_acceptor(conn), records.conn_err(conn, fatal, text))

    # -- topics and channels ---------------------------------------------------------------------
    def topic(self, name: bytes) -> Topic:
        """The topic, created if missing (the lookupds hear of it)."""
        topic = self.topics.get(name)
        if topic is None:
            topic = self.topics[name] = Topic(name, self.opts.data_path, self.opts.mem_queue_size, self.links)
            topic.in_memory = min(max(self.opts.mem_queue_size, _MIN_IN_MEMORY), _MAX_IN_MEMORY)
            if self.opts.e2e_processing_latency_percentiles:
                topic.e2e = (self.opts.e2e_processing_latency_window_time,
                             tuple(self.opts.e2e_processing_latency_percentiles))
            self.lookup.topic_created(topic)
            if topic.ttl_ns or self.links.max_attempts:  # --msg-ttl, --max-attempts
                self.sweeper.start()
            log.info("TOPIC(%s): created", name.decode(errors="replace"), extra=_fields(name))
        return topic

    def get_channel(self, topic: Topic, name: bytes, start: dict | None = None) -> Channel:
        """The channel, created if missing (then the first one takes the topic's backlog,
        and the lookupds hear of it)."""
        new = name not in topic.channels
        ch = topic.get_channel(name, start)
        if new:
            self.lookup.announce(True, topic.name, name)
            log.info("TOPIC(%s): new channel(%s)", topic.name.decode(errors="replace"),
                          name.decode(errors="replace"), extra=_fields(topic.name, name))
        return ch

    def delete_channel(self, ch: Channel) -> None:
        """The channel goes with everything it holds; an #ephemeral topic with its last one."""
        topic = ch.topic
        if not topic.delete_channel(ch):
            return
        tname, cname = topic.name.decode(errors="replace"), ch.name.decode(errors="replace")
        log.info("TOPIC(%s): deleting channel %s", tname, cname, extra=_fields(topic.name, ch.name))
        log.info("CHANNEL(%s): deleting", cname, extra=_fields(topic.name, ch.name))
        self.delivery.forget(ch)
        self.lookup.announce(False, topic.name, ch.name)
        if topic.ephemeral and not topic.channels and self.topics.pop(topic.name, None) is not None:
            log.info("TOPIC(%s): deleting", tname, extra=_fields(topic.name))
            self.lookup.announce(False, topic.name)

    # -- publish ---------------------------------------------------------------------------------
    def on_publish(self, src: int, rec: bytes) -> None:
        """A batch with a copy of its records (#ephemeral, or deferred)."""
        acceptor, seq, offset, count, name, blob = records.parse_publish(rec)
        self.topic(name).publish(acceptor, seq, offset, count, len(blob), blob)

    def on_publish_at(self, src: int, rec: bytes) -> None:
        """A durable batch, not deferred, left in its segment file."""
        acceptor, seq, offset, count, size, name = records.parse_publish_at(rec)
        self.topic(name).publish(acceptor, seq, offset, count, size, None)

    # -- in flight: FIN, REQ, TOUCH (the channel's verbs) ----------------------------------------
    def _owned(self, conn: int, msg_id: bytes, cmd: str) -> tuple | None:
        """The in-flight entry (Message, attempts, Flight) if this connection may
        FIN/REQ/TOUCH it, else None after a non-fatal error."""
        c = self.consumers.get(conn)
        entry = c.channel.in_flight.get(msg_id) if c is not None else None
        if entry is not None and entry[2].consumer is c:
            return entry
        why = "ID not in flight" if entry is None else "client does not own message"
        self.error(conn, False, f"E_{cmd}_FAILED {cmd} {msg_id.decode(errors='replace')} failed {why}")
        return None

    def on_fin(self, src: int, rec: bytes) -> None:
        """FIN of one or more IDs: a connection's FINs of one tick, in the order sent."""
        conn, ahead, ids = records.parse_fin(rec)
        c = self.consumers.get(conn)
        if c is not None:
            c.ahead = max(0, c.ahead - ahead)
            c.ahead_off = False
        if not ids:
            return
        if c is None:
            for pos in range(0, len(ids), ID):
                self._owned(conn, bytes(ids[pos:pos + ID]), "FIN")  # each gets its E_FIN_FAILED
            return
        bad: list[bytes] = []
        c.channel.finish(c, ids, 0, bad)
        for msg_id in bad:
            self._owned(conn, msg_id, "FIN")  # each gets its E_FIN_FAILED, in order

    def on_unsent(self, src: int, rec: bytes) -> None:
        """UNSENT: frames sent ahead that the acceptor returns unwritten: back at the head
        of the queue, their attempt not counted."""
        conn, frames = records.parse_unsent(rec)
        c = self.consumers.get(conn)
        if c is not None:
            c.channel.take_back(c, frames)

    def on_req(self, src: int, rec: bytes) -> None:
        """REQ: back in the queue now (delay 0) or deferred; the delay is already clamped."""
        conn, delay_ms, msg_id = records.parse_req(rec)
        c = self.consumers.get(conn)
        if c is not None:
            c.ahead_off = False  # it makes progress: frames may be sent ahead again
        entry = self._owned(conn, msg_id, "REQ")
        if entry is not None:
            entry[2].consumer.channel.requeue(msg_id, entry, delay_ms)

    def on_touch(self, src: int, rec: bytes) -> None:
        """TOUCH: the message's deadline moves (its own flight if it shared one)."""
        conn, msg_id = records.parse_touch(rec)
        entry = self._owned(conn, msg_id, "TOUCH")
        if entry is not None:
            entry[2].consumer.channel.touch(msg_id, entry, int(self.opts.max_msg_timeout * 1e9))

    # -- the timer -------------------------------------------------------------------------------
    def on_fire(self, src: int, rec: bytes) -> None:
        """Deadlines passed: timed-out and deferred messages go back to their queues; one
        delivery pass for the whole record then hands them out."""
        mark = self.delivery.mark
        for ch in self.deadlines.fire(records.parse_fire(rec)):
            mark(ch)

    def on_timer_hello(self, src: int, rec: bytes) -> None:
        """A new timer knows nothing: give it every deadline again."""
        self.deadlines.rearm_all()

    # -- lookupd and run-time options (from acceptor 0) -------------------------------------------
    def on_lookupds(self, src: int, rec: bytes) -> None:
        """How many lookupds the broker has now (acceptor 0 keeps it current)."""
        self.lookup.lookupds = records.parse_lookupds(rec)

    def on_config(self, src: int, rec: bytes) -> None:
        """Options changed at run time: router 0 takes them back after a restart, the other
        routers apply them (log level)."""
        overrides = records.parse_config(rec)
        if self.index == 0:
            self.config_overrides.update(overrides)
        self.apply_config(overrides)

    # -- control requests from acceptors ---------------------------------------------------------
    def answer_control(self, src: int, rec: bytes) -> None:
        """A control request (behind its barrier): stats, memory, or an admin op (admin.py)."""
        req_id, request = records.parse_control(rec)
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
        for piece in records.reply_pieces(req_id, reply, self.endpoint.out[src].max_record):
            self.endpoint.send(src, piece)

    async def stop(self) -> None:
        """Append and sync every pending acknowledgement; the next router recovers the rest."""
        for topic in self.topics.values():
            log.info("TOPIC(%s): closing", topic.name.decode(errors="replace"), extra=_fields(topic.name))
            topic.close()


def _fields(topic: bytes, channel: bytes | None = None) -> dict[str, str]:
    """The fields of a topic's or channel's log line (--log-format json)."""
    if channel is None:
        return {"topic": topic.decode(errors="replace")}
    return {"topic": topic.decode(errors="replace"), "channel": channel.decode(errors="replace")}
