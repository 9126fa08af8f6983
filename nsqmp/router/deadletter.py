"""Dead letters: a message that would be delivered an (N+1)-th time, N being its
channel's max_attempts, goes to the channel's dead-letter topic instead.

Atomic, with one writer per segment file: routers write no segment file, so the router
asks acceptor 0 to publish it (DEAD_LETTER record), through the acceptor's ordinary
publish path (segment append, then PUBLISH to the dead-letter topic's router); acceptor 0
answers DEAD_LETTER_OK naming it, and only then is the original acknowledged (ack log)
and counted (`dead_letter_count`). Until then the message is out of delivery, held here.
A kill -9 of any process in between gives a duplicate in the dead-letter topic at worst:

* acceptor 0 dies before it published (or its answer is lost): the router sends the
  DEAD_LETTER again every RESEND_S until it is answered (a restarted acceptor 0 takes it);
* the router dies: the original was never acknowledged, so the restarted router has it
  in the channel again, with the attempts recovery knows (after a kill -9: those a
  graceful stop saved, else 0), so it reaches the dead-letter topic again after at most
  max_attempts more deliveries. An answer meant for the old incarnation is ignored: its
  token carries the router's generation.

The dead letter's body is a JSON object (docs/beyond-nsq.md, "Dead letters")::

  {"id": "<16-char message id>", "body": "<base64 of the body>", "attempts": N,
   "timestamp": <publish time, unix ns>, "topic": "<topic>", "channel": "<channel>"}
"""
from __future__ import annotations

import base64
import itertools
import time
from typing import TYPE_CHECKING

import orjson

from nsqmp.ipc import records
from nsqmp.protocol.names import EPHEMERAL_SUFFIX, is_ephemeral
from nsqmp.router import expiry
from nsqmp.router.requests import find_channel

if TYPE_CHECKING:
    from nsqmp.router.channel import Channel

RESEND_S = 2.0  # a dead letter not answered for this long is sent again
PUBLISHER = 0  # the acceptor that publishes dead letters


def default_target(topic: bytes) -> bytes:
    """A topic's default dead-letter topic: "<topic>.dead" ("<t>.dead#ephemeral" for an
    #ephemeral one, which stays off the disk too), the topic's name cut to keep it within
    the 64 bytes a name may have."""
    suffix = b".dead"
    if is_ephemeral(topic):
        topic, suffix = topic[:-len(EPHEMERAL_SUFFIX)], suffix + EPHEMERAL_SUFFIX
    return topic[:64 - len(suffix)] + suffix


def letter(ch: Channel, m, attempts: int) -> bytes:
    """The dead letter's body for message m of ch after `attempts` deliveries."""
    return orjson.dumps({
        "id": m.id.decode(errors="replace"),
        "body": base64.b64encode(m.body).decode(),
        "attempts": attempts,
        "timestamp": m.ts,
        "topic": ch.topic.name.decode(errors="replace"),
        "channel": ch.name.decode(errors="replace"),
    })


def divert(ch: Channel, entries: list) -> None:
    """These (Message, attempts) entries of ch reached its max_attempts: to its
    dead-letter topic (they stay out of delivery until acceptor 0 has published them)."""
    dead = ch.topic.links.dead_letters
    ch.in_flight.forget([m for m, _ in entries])  # a timed-out one's slot, kept for its next flight
    if dead is None:  # a channel without a router (unit tests): nowhere to go, keep them out
        return
    for m, tries in entries:
        dead.send(ch, m, tries)


class DeadLetters:
    """The router's dead letters waiting for acceptor 0's answer, by token."""

    def __init__(self, router) -> None:
        self.router = router
        # a token names one dead letter of one router incarnation (an old one's answer is no match)
        self.tokens = itertools.count((router.generation & 0xFFFFFF) << 40 | 1)
        self.waiting: dict[int, tuple] = {}  # token -> (Channel, Message, attempts, record, sent at)
        self.resend_handle = None
        self.save_handle = None

    def send(self, ch: Channel, m, attempts: int) -> None:
        """Ask acceptor 0 to publish m's dead letter to ch's dead-letter topic."""
        token = next(self.tokens)
        rec = records.dead_letter(token, ch.dead_letter_to, letter(ch, m, attempts))
        self.waiting[token] = (ch, m, attempts, rec, time.monotonic())
        r = self.router
        r.endpoint.send(r.plan.acceptor_slot(PUBLISHER), rec)
        r.delivery.wake()  # pushed at the end of the tick
        if self.resend_handle is None:
            self.resend_handle = r.loop.call_later(RESEND_S, self.resend)

    def held(self, ch: Channel) -> list:
        """(Message, attempts) of ch's dead letters still waiting for their answer (a
        graceful stop saves their attempts: they are queued again after the restart)."""
        return [(m, tries) for c, m, tries, _, _ in self.waiting.values() if c is ch]

    def resend(self) -> None:
        """Send again what acceptor 0 has not answered for RESEND_S (it died, or its ring
        was full); on, while any dead letter waits."""
        self.resend_handle = None
        if not self.waiting or self.router._stopping:
            return
        r = self.router
        now = time.monotonic()
        for token, (ch, m, attempts, rec, sent) in list(self.waiting.items()):
            if now - sent >= RESEND_S:
                r.endpoint.send(r.plan.acceptor_slot(PUBLISHER), rec)
                self.waiting[token] = (ch, m, attempts, rec, now)
        r.delivery.wake()
        self.resend_handle = r.loop.call_later(RESEND_S, self.resend)

    def on_ok(self, src: int, rec: bytes) -> None:
        """DEAD_LETTER_OK: those dead letters are in their topic's files; their originals
        are acknowledged now, their file references released, and counted."""
        r = self.router
        for token in records.parse_dead_letter_ok(rec):
            entry = self.waiting.pop(token, None)
            if entry is None:  # sent twice and answered twice, or an old incarnation's
                continue
            ch, m, _, _, _ = entry
            topic = ch.topic
            if r.topics.get(topic.name) is not topic:  # the topic was deleted meanwhile
                continue
            if m.segment is not None:
                if topic.channels.get(ch.name) is ch:
                    topic.ack(ch, m.segment, m.offset)
                topic.release(m.segment)
                topic.acks_due.add(topic)
            ch.dead_letter_count += 1
            expiry.counts_moved(topic)
        r.delivery.wake()  # the acks go to the ack log at the end of the tick
        if self.save_handle is None:  # the counters to meta.json, once per loop turn
            self.save_handle = r.loop.call_soon(self._save)

    def _save(self) -> None:
        self.save_handle = None
        expiry.save_moved(self.router.topics)


def channel_dead_letter(router, request) -> dict:
    """POST /channel/dead-letter: the channel's max_attempts (0: off) and dead-letter
    topic (default <topic>.dead), persisted in meta.json."""
    ch, err = find_channel(router, request)
    if err:
        return err
    topic = ch.topic
    to = request.get("to")
    ch.max_attempts = int(request["max_attempts"])
    ch.dead_letter_to = to.encode() if to else default_target(topic.name)
    for cm in topic.meta.channels:
        if ch.id and cm.id == ch.id:
            cm.max_attempts = ch.max_attempts
            cm.dead_letter_to = to or None
    topic.save_meta()
    router.delivery.mark(ch)
    router.sweeper.start()
    return {}
