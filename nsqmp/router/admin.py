"""The administrative operations of nsqd's HTTP API, on the router that owns the topic.

Each takes the request ({"op", "topic", "channel"}) and returns {} or {"error": CODE}
(the acceptor maps codes to nsqd's statuses). What they change is persisted in the
topic's meta.json, so a restart shows the same topics, channels and pauses.
"""
from __future__ import annotations

import logging
import shutil

from nsqmp.diskqueue.synctimes import SYNCS
from nsqmp.ipc import records
from nsqmp.router.peek import channel_peek, topic_peek
from nsqmp.router import deadletter, expiry
from nsqmp.router import retention, rewind
from nsqmp.router.requests import find_channel

log = logging.getLogger("nsqmp.router")


def _topic(router, request, create: bool = False):
    name = request["topic"].encode()
    topic = router.topics.get(name)
    if topic is None and create:
        topic = router.topic(name)
        topic.save_meta()
    return topic


def topic_create(router, request) -> dict:
    _topic(router, request, create=True)
    return {}


def topic_delete(router, request) -> dict:
    topic = _topic(router, request)
    if topic is None:
        return {"error": "TOPIC_NOT_FOUND"}
    _log(router, "TOPIC(%s): deleting", topic)
    for ch in list(topic.channels.values()):
        _log(router, "CHANNEL(%s): deleting", topic, ch)
        _close_channel(router, ch)
    if router.topics.pop(topic.name, None) is not None:  # an ephemeral one went with its last channel
        router.lookup.announce(False, topic.name)
    topic.close()
    shutil.rmtree(topic.dir, ignore_errors=True)
    gone = records.topic_gone(topic.name)
    for i in range(router.plan.acceptors):
        router.endpoint.send(router.plan.acceptor_slot(i), gone)
    return {}


def topic_empty(router, request) -> dict:
    topic = _topic(router, request)
    if topic is None:
        return {"error": "TOPIC_NOT_FOUND"}
    _log(router, "TOPIC(%s): emptying", topic)
    for m, _ in topic.backlog:
        if m.segment is not None:
            # held by a paused topic: its channels never get it, even once it is unpaused
            for ch in topic.channels.values():
                topic.ack(ch, m.segment, m.offset)
            topic.release(m.segment)
    topic.backlog.clear()
    if topic.held:  # a new topic still waiting for the lookupds: what it holds goes too
        for msgs, _ in topic.held:
            for m, _ in msgs:
                if m.segment is not None:
                    topic.release(m.segment)
        topic.held = []
        topic.hold_start = dict(topic.hwm)
    for seg, count in topic.backlog_pending.clear():
        topic.release(seg, count)
    topic.flush_acks()
    # a first channel (start None) begins where the topic's backlog began; that point moves
    # now, so pin the channel's own start first: what it holds stays its own after a restart
    for ch in topic.channels.values():
        if ch.id and ch.start is None:
            ch.start = dict(topic.meta.backlog_start)
            for cm in topic.meta.channels:
                if cm.id == ch.id:
                    cm.start = ch.start
    topic.meta.backlog_start = dict(topic.hwm)
    topic.save_meta()
    return {}


def topic_pause(router, request, paused: bool = True) -> dict:
    topic = _topic(router, request)
    if topic is None:
        return {"error": "TOPIC_NOT_FOUND"}
    _log(router, "TOPIC(%s): pausing" if paused else "TOPIC(%s): unpausing", topic)
    if paused and not topic.paused:
        topic.meta.paused_at = topic.held_from()
    topic.paused = topic.meta.paused = paused
    if not paused:
        topic.meta.paused_at = None
        topic.release_held()
    topic.save_meta()
    return {}


def channel_create(router, request) -> dict:
    topic = _topic(router, request)
    if topic is None:
        return {"error": "TOPIC_NOT_FOUND"}
    router.get_channel(topic, request["channel"].encode())
    return {}


def channel_delete(router, request) -> dict:
    ch, err = find_channel(router, request)
    if err:
        return err
    _close_channel(router, ch)
    topic = ch.topic
    topic.meta.channels = [cm for cm in topic.meta.channels if cm.id != ch.id or not ch.id]
    router.delete_channel(ch)
    topic.save_meta()
    return {}


def channel_empty(router, request) -> dict:
    """Drop everything the channel holds (queued, deferred, in flight); it starts afresh."""
    ch, err = find_channel(router, request)
    if err:
        return err
    topic = ch.topic
    _log(router, "TOPIC(%s): emptying channel %s", topic, ch, ch.name)
    recall_ahead(router, ch)
    ch.clear()
    if ch.id:
        ch.start = dict(topic.hwm)  # a restart must not bring the emptied messages back
        for cm in topic.meta.channels:
            if cm.id == ch.id:
                cm.start = ch.start
        topic.save_meta()
    return {}


def channel_pause(router, request, paused: bool = True) -> dict:
    ch, err = find_channel(router, request)
    if err:
        return err
    _log(router, "TOPIC(%s): pausing channel %s" if paused else "TOPIC(%s): unpausing channel %s",
         ch.topic, ch, ch.name)
    ch.paused = paused
    for cm in ch.topic.meta.channels:
        if cm.id == ch.id and ch.id:
            cm.paused = paused
    ch.topic.save_meta()
    if paused:
        recall_ahead(router, ch)
    router.delivery.mark(ch)
    return {}


def recall_ahead(router, ch) -> None:
    """Its consumers' acceptors send back what they hold ahead (nsqmp.acceptor.ahead): not
    to be written once the channel is paused or emptied."""
    for c in ch.consumers.values():
        if c.ahead:
            router.endpoint.send(router.plan.acceptor_slot(records.conn_acceptor(c.conn)), records.recall(c.conn))


def _close_channel(router, ch) -> None:
    """Close the connections subscribed to a channel being deleted (nsqd does the same)."""
    for c in list(ch.consumers.values()):
        router.endpoint.send(records.conn_acceptor(c.conn), records.close_conn(c.conn))
        router.subscriptions.drop(c)


def _log(router, text: str, topic, ch=None, *more: bytes) -> None:
    """An operation's line (INFO), the topic's name first, then `more` names, with the
    topic and channel as the line's fields."""
    fields = {"topic": topic.name.decode(errors="replace")}
    if ch is not None:
        fields["channel"] = ch.name.decode(errors="replace")
    if ch is not None and text.startswith("CHANNEL("):
        log.info(text, fields["channel"], extra=fields)
        return
    log.info(text, fields["topic"], *(m.decode(errors="replace") for m in more), extra=fields)


def config_set(router, request) -> dict:
    """PUT /config/<option> on any acceptor (router 0 only): remember the value and give
    every acceptor every option changed so far, before the reply goes back."""
    router.config_overrides[request["option"]] = request["value"]
    router.apply_config({request["option"]: request["value"]})
    rec = records.config_set(router.config_overrides)
    for i in range(router.plan.acceptors):
        router.endpoint.send(router.plan.acceptor_slot(i), rec)
    # into every ring now, before the reply is even queued: once the client has its answer,
    # the value waits in every acceptor's ring (a GET /config there handles it first)
    router.endpoint.flush()
    return {}


OPS = {
    "topic_create": topic_create,
    "topic_delete": topic_delete,
    "topic_empty": topic_empty,
    "topic_pause": topic_pause,
    "topic_unpause": lambda r, q: topic_pause(r, q, False),
    "channel_create": channel_create,
    "channel_delete": channel_delete,
    "channel_empty": channel_empty,
    "channel_pause": channel_pause,
    "channel_unpause": lambda r, q: channel_pause(r, q, False),
    "config_set": config_set,
    "channel_peek": channel_peek, "topic_peek": topic_peek,  # router/peek.py: read-only
    "topic_ttl": expiry.topic_ttl,
    "channel_dead_letter": deadletter.channel_dead_letter,
    "fire_lateness": lambda r, q: {"index": r.index,
                                   **{kind: h.snapshot() for kind, h in r.deadlines.fire_lateness.items()}},
    "sync_times": lambda r, q: {"index": r.index, **SYNCS.snapshot()},  # the ack logs' syncs, for /metrics
    "ring_high_water": lambda r, q: r.endpoint.high_water(),  # every ring has a router at one end
    **rewind.OPS,  # /channel/rewind, /channel/create?from= (issue 23)
    "topic_retention": retention.topic_retention,
}
