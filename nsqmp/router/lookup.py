"""The router's side of nsqlookupd: what it tells the registrar, and new topics' channels.

The registrar (acceptor 0, nsqmp/acceptor/registrar.py) speaks for the whole broker to
every nsqlookupd. Routers own the topics and channels, so each router tells it:

* LOOKUP_REG when a topic or channel is created or deleted (ephemeral ones included,
  as nsqd does), and
* LOOKUP_STATE, every topic and channel it owns, when it starts and whenever acceptor 0
  starts (A_HELLO), so a restarted registrar or router converges.

New topic (nsqd's GetTopic): while lookupds are configured, a topic this router has never
had holds its messages, unassigned, until the lookupds said which channels the topic has
on other brokers (CHANNELS_ASK, answered by CHANNELS) or the HTTP client's request timeout
passed. Those channels are created first, then the held messages fan out, so a channel
that exists elsewhere in the cluster misses no message. Ephemeral channels are not
pre-created (nsqd skips them: nobody consumes them yet). Without lookupds nothing is held.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from nsqmp.ipc import records
from nsqmp.protocol.names import is_ephemeral, is_valid_name

if TYPE_CHECKING:
    from nsqmp.router.role import Router
    from nsqmp.router.topic import Topic

_ANSWER_SLACK = 0.5  # the registrar answers within the request timeout; we wait a bit more


class LookupLink:
    def __init__(self, router: Router) -> None:
        self.router = router
        # lookupds configured on this broker; acceptor 0 keeps it current (LOOKUPDS)
        self.lookupds = len(router.opts.nsqlookupd_tcp_addresses)
        self.live = False  # set once started: recovery's topics travel in LOOKUP_STATE

    @property
    def _registrar(self) -> int:
        return self.router.plan.acceptor_slot(0)

    def announce(self, register: bool, topic: bytes, channel: bytes = b"") -> None:
        """A topic or channel came or went: the registrar passes it on to every lookupd."""
        if self.live:
            self.router.endpoint.send(self._registrar, records.lookup_reg(register, topic, channel))

    def send_state(self) -> None:
        """Every topic and its channels, in pieces that fit a ring record."""
        r = self.router
        limit = max(1024, r.max_chunk - 64)
        pieces: list[list] = [[]]
        size = 0
        for topic in r.topics.values():
            item = [topic.name.decode(), [c.decode() for c in topic.channels]]
            n = len(orjson.dumps(item)) + 1
            if pieces[-1] and size + n > limit:
                pieces.append([])
                size = 0
            pieces[-1].append(item)
            size += n
        for k, piece in enumerate(pieces):
            r.endpoint.send(self._registrar, records.lookup_state(piece, k == 0, k == len(pieces) - 1))

    # -- a new topic ---------------------------------------------------------------------------
    def topic_created(self, topic: Topic) -> None:
        if not self.live:
            return
        self.announce(True, topic.name)
        if self.lookupds:
            topic.held = []
            topic.hold_start = dict(topic.hwm)
            r = self.router
            r.endpoint.send(self._registrar, records.channels_ask(topic.name))
            r.loop.call_later(r.opts.http_client_request_timeout + _ANSWER_SLACK, self.release, topic, [])

    def on_channels(self, rec: bytes) -> None:
        name, names_json = records.parse_channels(rec)
        topic = self.router.topics.get(name)
        if topic is None:
            return
        try:
            names = [n.encode() for n in orjson.loads(names_json) if isinstance(n, str)]
        except (orjson.JSONDecodeError, TypeError):
            names = []
        self.release(topic, names)

    def release(self, topic: Topic, names: list[bytes]) -> None:
        """Create the channels the lookupds know (not ephemeral ones), then fan out."""
        r = self.router
        if topic.held is None or r.topics.get(topic.name) is not topic:
            return  # answered already, or the topic was deleted meanwhile
        held, topic.held = topic.held, None
        for name in names:
            if is_valid_name(name) and not is_ephemeral(name) and name not in topic.channels:
                r.get_channel(topic, name, start=topic.hold_start)
        for msgs, nbytes in held:
            for m, _ in msgs:
                if m.segment is not None:
                    m.segment.refs -= 1  # adopt counts them again, once per channel
            topic.adopt(msgs, nbytes)
