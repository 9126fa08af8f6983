"""max-topic-bytes: what a topic does when its files pass the cap (topic-full-policy).

refuse: the acceptors are told the topic is full (TOPIC_FULL) and refuse publishes until
it is under 90 % of the cap again. drop-oldest: the oldest files nobody writes any more
are dropped, every queued copy of their messages forgotten and acknowledged.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nsqmp.ipc import records

if TYPE_CHECKING:
    from nsqmp.router.topic import Topic
    from nsqmp.router.topicfiles import Segment

log = logging.getLogger("nsqmp.router")


def check(topic: Topic) -> None:
    """Apply topic-full-policy when the topic's files pass max-topic-bytes."""
    links = topic.links
    limit = links.max_topic_bytes
    if not limit or topic.ephemeral:
        return
    if links.topic_full_policy == "refuse":
        full = topic.disk_bytes > limit or (topic.full and topic.disk_bytes > limit * 0.9)
        if full != topic.full:
            topic.full = full
            log.warning("topic %s %s (%d bytes in files, cap %d)", topic.name.decode(),
                        "is full: refusing publishes" if full else "has room again",
                        topic.disk_bytes, limit)
            links.to_acceptors(records.topic_full(topic.name, full))
        return
    while topic.disk_bytes > limit:
        victim = next((s for s in topic.segments.values()
                       if not s.dropped and s.seq < topic.latest_seq.get(s.acceptor, -1)), None)
        if victim is None:
            return  # only files still being written: nothing older to drop
        drop_segment(topic, victim)


def drop_segment(topic: Topic, seg: Segment) -> None:
    """drop-oldest: forget every queued copy of this file's messages, for good."""
    seg.dropped = True
    topic.disk_bytes -= seg.bytes
    dropped = 0
    for ch in topic.channels.values():
        dropped += _drop_from_channel(topic, ch, seg)
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
    topic.acks_due.add(topic)
    topic.links.deadlines.wake()
    log.warning("topic %s over max-topic-bytes: dropped %d queued messages of %s",
                topic.name.decode(), dropped, seg.path)


def _drop_from_channel(topic: Topic, ch, seg: Segment) -> int:
    """The channel's queued and deferred copies of seg's messages go, acknowledged (so a
    restart does not bring them back); how many."""
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
            ch.deadlines.forget(d.token)
    ch.ready.clear()
    ch.ready.extend(keep)
    ch.in_flight.forget(gone)  # the slots kept for timed-out ones
    for m in gone:
        topic.ack(ch, seg, m.offset)
        topic.release(seg)
    dropped = len(gone)
    for offset in ch.pending.remove_segment(seg):
        topic.ack(ch, seg, offset)
        topic.release(seg)
        dropped += 1
    return dropped
