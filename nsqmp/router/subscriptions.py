"""Consumers coming and going: SUB (behind a barrier when it creates its channel), RESUB,
RDY, CLS, GONE, and an acceptor's hello (its old incarnation's connections are gone).

A handler group of the router, as controls.py and lookup.py are: it keeps the router's
consumers (conn -> Consumer) and calls the router's public names and the channels' verbs.
"""
from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

import orjson

from nsqmp.ipc import records
from nsqmp.protocol.names import is_ephemeral
from nsqmp.router.flight import Consumer

if TYPE_CHECKING:
    from nsqmp.router.role import Router


log = logging.getLogger("nsqmp.router")


class Subscriptions:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.consumers: dict[int, Consumer] = {}
        self.waiting: set[int] = set()  # conns whose SUB waits for a barrier (on_sub)

    def on_sub(self, src: int, rec: bytes) -> None:
        """A connection's SUB. One that creates its channel waits for a barrier, as control
        requests do (controls.py): the new channel must not get a deferred message answered
        on the other acceptor before the SUB. The connection reads nothing more until
        SUB_OK, so only its GONE can come meanwhile."""
        conn, topic_name, channel_name, _ = records.parse_sub(rec)
        topic = self.router.topics.get(topic_name)
        if topic is not None and channel_name in topic.channels:
            self.subscribe(src, rec)
            return
        self.waiting.add(conn)
        self.router.controls.after_barrier(partial(self.subscribe_after_barrier, src, rec))

    def subscribe_after_barrier(self, src: int, rec: bytes) -> None:
        """The barrier a SUB waited for is passed: subscribe, unless the connection went."""
        conn, topic_name, channel_name, _ = records.parse_sub(rec)
        if conn in self.waiting:
            self.waiting.discard(conn)
            self.subscribe(src, rec)
        elif not is_ephemeral(channel_name):
            # gone meanwhile: nsqd's SUB would have made the channel, which outlives its
            # consumer unless it is #ephemeral
            r = self.router
            r.get_channel(r.topic(topic_name), channel_name)

    def subscribe(self, src: int, rec: bytes) -> None:
        """SUB (its channel exists, or its barrier is passed) and RESUB: a new consumer."""
        conn, topic_name, channel_name, info = records.parse_sub(rec)
        r = self.router
        old = self.consumers.get(conn)
        if old is not None:
            self.drop(old)
        ch = r.get_channel(r.topic(topic_name), channel_name)
        limit = r.opts.max_channel_consumers
        if limit and len(ch.consumers) >= limit:
            # nsqd's AddClient refuses once the channel exists, and its SUB closes the connection
            r.error(conn, True, f"E_SUB_FAILED SUB failed consumers for {topic_name.decode()}:"
                                f"{channel_name.decode()} exceeds limit of {limit}")
            return
        consumer = Consumer(conn, ch, orjson.loads(info))
        ch.consumers[conn] = consumer
        self.consumers[conn] = consumer
        if log.isEnabledFor(logging.DEBUG):
            log.debug("CHANNEL(%s): new client(%s) of topic %s", channel_name.decode(errors="replace"),
                        consumer.info.get("remote_address", ""), topic_name.decode(errors="replace"),
                        extra={"topic": topic_name.decode(errors="replace"),
                               "channel": channel_name.decode(errors="replace"),
                               "remote": consumer.info.get("remote_address", "")})
        r.endpoint.send(src, records.sub_ok(conn))

    def on_rdy(self, src: int, rec: bytes) -> None:
        conn, count = records.parse_rdy(rec)
        c = self.consumers.get(conn)
        if c is not None:
            c.set_rdy(count, c.channel.topic.frame_size())
            c.channel.mark(c.channel)

    def on_cls(self, src: int, rec: bytes) -> None:
        conn = records.parse_cls(rec)
        c = self.consumers.get(conn)
        if c is not None:
            c.closing = True
            c.set_rdy(0)  # nsqd's StartClose: RDY 0, state closing

    def on_gone(self, src: int, rec: bytes) -> None:
        conn = records.parse_gone(rec)
        self.waiting.discard(conn)
        c = self.consumers.get(conn)
        if c is not None:
            self.drop(c)

    def drop(self, c: Consumer) -> None:
        """Forget a consumer; what it had in flight is requeued at once, and an #ephemeral
        channel goes with its last consumer."""
        self.consumers.pop(c.conn, None)
        if c.channel.drop_consumer(c):
            self.router.delete_channel(c.channel)

    def on_acceptor_hello(self, src: int, rec: bytes) -> None:
        """A new acceptor incarnation: the connections of the old one are gone."""
        acceptor, generation = records.parse_hello_a(rec)
        r = self.router
        if acceptor == 0:
            r.lookup.send_state()  # the registrar starts from nothing
        if r.index == 0 and r.config_overrides:
            r.endpoint.send(src, records.config_set(r.config_overrides))

        def gone(conn: int) -> bool:  # a connection of one of this acceptor's earlier incarnations
            return records.conn_acceptor(conn) == acceptor and records.conn_generation(conn) != generation

        for c in list(self.consumers.values()):
            if gone(c.conn):
                self.drop(c)
        self.waiting = {conn for conn in self.waiting if not gone(conn)}
        if generation > 1:
            # the old incarnation may have answered OK for records whose PUBLISH never made
            # it into the ring: they are in its segment files, past our high-water mark
            from nsqmp.router.recovery import rescan_acceptor

            found = rescan_acceptor(r, acceptor)
            if found:
                r.log.info("took %d records of acceptor %d's previous incarnation from its files",
                           found, acceptor)
        # a barrier sent to the old incarnation: its records are all in now
        r.controls.forget(src)
