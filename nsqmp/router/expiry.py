"""Message TTL: a message older than its topic's TTL (now - its timestamp) is not
delivered; it is dropped as if FINished (acknowledged in the ack log, its file reference
released) and counted (`expired_count`, per channel, and per topic for what the topic
held itself).

Two places drop expired messages:

* `screen`, at delivery time: the delivery pass (router/delivery.py) calls it for a
  channel whose topic has a TTL or which has dead letters on, before it hands messages
  out. It looks at the head of the queue, as many entries as the consumers can take now,
  so nothing expired is ever delivered. It also takes out the messages that reached the
  channel's max_attempts (router/deadletter.py). A channel with neither costs the pass one
  test, no call.
* `Sweeper`, every SWEEP_S (or a quarter of the shortest TTL, if shorter) on the router's
  loop, for the topics with a TTL only: it drops what expired from the channels' queues
  (the in-memory queue, the file ranges behind it read back as the pass would, and the
  deferred slots) and from what the topic itself holds (paused, or no channel yet), so
  depth does not go on counting expired messages. Messages are in publish order per
  stream, so a channel's file ranges expire from their head: the sweep reads ranges only
  while what it reads has expired. A message in flight is its consumer's: it expires if it
  comes back (time-out, REQ, its consumer gone).

Why a periodic sweep and not a timer deadline at "oldest + ttl": the oldest message of a
topic changes with every FIN, REQ and refill, so a deadline would have to be re-armed on
the hot paths; a sweep costs nothing to the hot paths, and one a second of a topic with
nothing expired costs a look at each channel's head (microseconds).

Counters are written to meta.json (`counts`) soon after they move (one write per topic
per sweep, or per loop turn of dead letters), so a kill -9 of the router keeps them.
"""
from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING

from nsqmp.protocol.names import is_valid_name

if TYPE_CHECKING:
    from nsqmp.router.channel import Channel
    from nsqmp.router.topic import Topic

SWEEP_S = 1.0  # the sweep's period at most
SWEEP_MIN_S = 0.05
SWEEP_BUDGET = 200_000  # messages one sweep may read back from the files, over every topic
DEFERRED_STEP = 50_000  # deferred messages one sweep looks at per channel
READY_STEP = 50_000  # queued messages one sweep looks at per channel, from the head


def screen(ch: Channel, want: int) -> None:
    """Before the pass hands out up to `want` of ch's ready messages: drop the expired ones
    at the head of the queue, and send those at max_attempts to the dead-letter topic,
    until `want` deliverable ones lead (or the queue, files included, is empty)."""
    from nsqmp.router import deadletter

    ttl = ch.topic.ttl_ns
    cutoff = time.time_ns() - ttl if ttl else 0
    limit = ch.max_attempts
    ready = ch.ready
    keep: list = []
    expired: list = []
    dead: list = []
    while len(keep) < want:
        if not ready:
            if not ch.pending or not (expired or dead):
                break
            ch.refill(want - len(keep))  # what we dropped made room: the next ones from the files
            continue
        entry = ready.popleft()
        m, tries = entry
        if m.ts < cutoff:
            expired.append(m)
        elif limit and tries >= limit:
            dead.append(entry)
        else:
            keep.append(entry)
    ready.extendleft(reversed(keep))
    if expired:
        drop(ch, expired)
    if dead:
        deadletter.divert(ch, dead)


def drop(ch: Channel, msgs: list) -> None:
    """These messages of ch expired: acknowledged, their file references released, counted."""
    topic = ch.topic
    for m in msgs:
        seg = m.segment
        if seg is not None:
            topic.ack(ch, seg, m.offset)
            topic.release(seg)
    ch.in_flight.forget(msgs)  # a timed-out one's slot, kept for its next flight
    ch.expired_count += len(msgs)
    topic.acks_due.add(topic)
    topic.links.deadlines.wake()  # the acks go out at the end of a tick
    counts_moved(topic)


def sweep_channel(ch: Channel, cutoff: int, budget: int) -> int:
    """Drop ch's expired messages (queue, file ranges, deferred slots); the budget left of
    messages read back from the files."""
    kept: list = []
    expired: list = []
    ready = ch.ready
    if len(ready) <= READY_STEP or ready[0][0].ts < cutoff:
        # the first READY_STEP entries (a queue grown by a million time-outs would hold the
        # loop; the delivery pass's check covers the rest when they come to the head)
        for _ in range(min(len(ready), READY_STEP)):
            entry = ready.popleft()
            (expired if entry[0].ts < cutoff else kept).append(entry)
        ready.extendleft(reversed(kept))
    while ch.pending and budget > 0 and len(ch.ready) < ch.topic.in_memory // 2:
        before = len(ch.ready)  # the file ranges expire from their head: read while they do
        ch.refill(min(budget, ch.topic.in_memory - before))
        fresh = list(ch.ready)[before:]
        budget -= len(fresh)
        gone = [e for e in fresh if e[0].ts < cutoff]
        if not gone:
            break
        for _ in range(len(ch.ready) - before):
            ch.ready.pop()
        ch.ready.extend(e for e in fresh if e[0].ts >= cutoff)
        expired.extend(gone)
    expired.extend(sweep_deferred(ch, cutoff))
    if expired:
        drop(ch, [m for m, _ in expired])
    return budget


# channel -> the slot after which its next deferred sweep resumes (a deleted channel goes)
_deferred_from: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def sweep_deferred(ch: Channel, cutoff: int) -> list:
    """The expired entries of ch's deferred slots, taken out of them: at most
    DEFERRED_STEP entries looked at per sweep (a million DPUBs would hold the loop), the
    next sweep going on after the last slot looked at."""
    if not ch.deferred:
        _deferred_from.pop(ch, None)
        return []
    after = _deferred_from.get(ch, -1)
    seen = 0
    out: list = []
    last = -1
    for slot, d in ch.deferred.items():
        if slot <= after:
            continue
        seen += len(d.entries)
        last = slot
        if any(m.ts < cutoff for m, _ in d.entries):
            out.extend(e for e in d.entries if e[0].ts < cutoff)
            d.entries[:] = [e for e in d.entries if e[0].ts >= cutoff]
        if seen >= DEFERRED_STEP:
            break
    if seen < DEFERRED_STEP:
        last = -1  # reached the end: the next sweep starts again from the first slot
    _deferred_from[ch] = last
    ch.deferred_count -= len(out)
    return out


def sweep_topic(topic: Topic, budget: int) -> int:
    """Drop the expired messages of a topic with a TTL: its channels', and what it holds
    itself (paused, or without a channel); the budget left."""
    cutoff = time.time_ns() - topic.ttl_ns
    for ch in list(topic.channels.values()):
        budget = sweep_channel(ch, cutoff, budget)
    backlog = topic.backlog
    while topic.backlog_pending and budget > 0 and len(backlog) < topic.in_memory:
        entries, _ = topic.backlog_pending.take(topic.in_memory - len(backlog))
        budget -= len(entries)
        backlog.extend(entries)  # one file reference per message either way: they stay
        if entries and entries[-1][0].ts >= cutoff:
            break
    if any(m.ts < cutoff for m, _ in backlog):
        old = [m for m, _ in backlog if m.ts < cutoff]
        kept = [e for e in backlog if e[0].ts >= cutoff]
        backlog.clear()
        backlog.extend(kept)
        for m in old:
            if m.segment is not None:
                for ch in topic.channels.values():  # a paused topic's channels never get it
                    topic.ack(ch, m.segment, m.offset)
                topic.release(m.segment)
        topic.expired_count += len(old)
        topic.acks_due.add(topic)
        topic.links.deadlines.wake()
        counts_moved(topic)
    return budget


# -- persisted counters ----------------------------------------------------------------------
_moved: set = set()  # topics whose counters changed since the last write


def counts_moved(topic: Topic) -> None:
    """The topic's expired or dead-letter counters moved: written at the next save_moved."""
    _moved.add(topic)


def save_moved(live: dict) -> None:
    """meta.json `counts` of the topics whose counters moved, of those still in `live`
    (the router's topics: a deleted one's directory must not come back): only the nsqmp
    counters are updated there (the others keep what the last graceful stop wrote)."""
    while _moved:
        topic = _moved.pop()
        if not topic.durable or live.get(topic.name) is not topic:
            continue
        by_id = {c.id: c for c in topic.channels.values() if c.id}
        for cm in topic.meta.channels:
            ch = by_id.get(cm.id)
            if ch is not None:
                for k in ("expired_count", "dead_letter_count"):
                    if getattr(ch, k):
                        cm.counts[k] = getattr(ch, k)
        if topic.expired_count:
            topic.meta.counts["expired_count"] = topic.expired_count
        topic.save_meta()


# -- settings ----------------------------------------------------------------------------------
def apply_meta(topic: Topic, default_ttl_ns: int) -> None:
    """After recovery: the topic's own TTL, its channels' dead-letter settings and the nsqmp
    counters, as meta.json has them."""
    meta = topic.meta
    topic.ttl_ns = meta.ttl_ms * 1_000_000 if meta.ttl_ms is not None else default_ttl_ns
    topic.expired_count = meta.counts.get("expired_count", topic.expired_count)
    by_id = {c.id: c for c in topic.channels.values() if c.id}
    for cm in meta.channels:
        ch = by_id.get(cm.id)
        if ch is None:
            continue
        for k in ("expired_count", "dead_letter_count"):
            setattr(ch, k, cm.counts.get(k, getattr(ch, k)))
        if cm.max_attempts is not None:
            ch.max_attempts = cm.max_attempts
        if cm.dead_letter_to is not None:
            ch.dead_letter_to = cm.dead_letter_to.encode()


def topic_ttl(router, request) -> dict:
    """POST /topic/ttl: the topic's own TTL in ms (0: none of its own, the broker's
    --msg-ttl again), persisted; the sweep starts at once."""
    topic = router.topics.get(request["topic"].encode())
    if topic is None:
        return {"error": "TOPIC_NOT_FOUND"}
    ttl_ms = int(request["ttl_ms"])
    topic.meta.ttl_ms = ttl_ms or None
    topic.ttl_ns = ttl_ms * 1_000_000 if ttl_ms else router.links.msg_ttl_ns
    topic.save_meta()
    for ch in topic.channels.values():
        router.delivery.mark(ch)
    router.sweeper.start()
    return {}


def valid_target(name: str) -> bool:
    """A dead-letter topic must be a valid topic name."""
    return is_valid_name(name.encode())


class Sweeper:
    """The periodic sweep of the topics with a TTL, on the router's loop (running only
    while one has a TTL)."""

    def __init__(self, router) -> None:
        self.router = router
        self.handle = None

    def start(self) -> None:
        """Sweep soon, and on, if any topic has a TTL or any channel dead letters."""
        r = self.router
        if self.handle is None and (r.links.max_attempts or any(_swept(t) for t in r.topics.values())):
            self.handle = self.router.loop.call_soon(self.run)

    def run(self) -> None:
        """One sweep; the next one a period later, while there is anything to sweep."""
        self.handle = None
        budget = SWEEP_BUDGET
        period = 0.0
        for topic in list(self.router.topics.values()):
            if topic.ttl_ns:
                budget = sweep_topic(topic, budget)
                period = min(period or SWEEP_S, max(SWEEP_MIN_S, topic.ttl_ns / 4e9))
            for ch in topic.channels.values():
                if ch.max_attempts:
                    sweep_dead(ch)
                    period = period or SWEEP_S
        if self.router.links.max_attempts:  # --max-attempts: any channel, any time
            period = period or SWEEP_S
        save_moved(self.router.topics)
        if period and not self.router._stopping:
            self.handle = self.router.loop.call_later(period, self.run)


def _swept(topic: Topic) -> bool:
    return bool(topic.ttl_ns) or any(ch.max_attempts for ch in topic.channels.values())


def sweep_dead(ch: Channel) -> None:
    """The messages of ch's queue that had their max_attempts deliveries (back from a
    time-out, or from a consumer gone) go to the dead-letter topic now, consumers or not."""
    from nsqmp.router import deadletter

    limit = ch.max_attempts
    if len(ch.ready) > READY_STEP:  # too long to walk each second: the delivery pass takes them at the head
        return
    if not any(tries >= limit for _, tries in ch.ready):
        return
    dead = [e for e in ch.ready if e[1] >= limit]
    kept = [e for e in ch.ready if e[1] < limit]
    ch.ready.clear()
    ch.ready.extend(kept)
    deadletter.divert(ch, dead)
