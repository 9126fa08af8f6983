"""Peek: the next messages a channel would hand out (or a topic holds), changing nothing.

A CONTROL request on the router that owns the topic (router/admin.py's OPS)::

    {"op": "channel_peek", "topic": T, "channel": C, "n": N, "state": S, "max_body": B}
    {"op": "topic_peek", "topic": T, "n": N, "state": S, "max_body": B}

answered {"messages": [...], "depth": ..., "deferred_count": ..., "in_flight_count": ...}
or {"error": CODE}. Each message is a dict: id (the 16 ASCII hex characters NSQ writes),
timestamp (ns), attempts (deliveries so far: 0 for one never handed out), state
("queued", "deferred" with due_ns, "in_flight" with deadline_ns and client), body_size,
truncated, and body: base64 of at most B bytes (a REPLY is JSON; the acceptor's
http_peek.py turns it into format=json or format=raw).

The order is the channel's: the in-memory queue, then the file ranges behind it (read
back with the native readback, at most what is still wanted: never the whole backlog),
then the deferred ones by due time, then those in flight by deadline. That is the order
they come out if the queue drains before the due times and the deadlines; state=queued,
deferred or in_flight selects one kind, so a long queue does not hide the others.

Nothing is changed: no counter, no attempts, no order; the records read back from the
files are fresh Message objects no queue holds, and no segment reference is taken.
"""
from __future__ import annotations

import base64
import heapq
import itertools
import logging
import time
from typing import Iterator

from nsqmp.router.filequeue import FileQueue, read_range
from nsqmp.router.requests import find_channel

log = logging.getLogger("nsqmp.router")

_SLACK = 1000  # file records with a due time read past the n wanted, at most


def _entry(m, attempts: int, state: str, max_body: int, **extra) -> dict:
    """One message of the answer; its body cut at max_body bytes."""
    body = m.body
    size = len(body)
    return {
        "id": m.id.decode("ascii", errors="replace"),
        "timestamp": m.ts,
        "attempts": attempts,
        "state": state,
        **extra,
        "body_size": size,
        "truncated": size > max_body,
        "body": base64.b64encode(body[:max_body]).decode("ascii"),
    }


def _from_files(pending: FileQueue, want: int) -> Iterator[tuple]:
    """(Message, due_ns or 0) of the records of pending's ranges, in order, read back a
    bounded batch at a time (the caller stops when it has enough)."""
    batch = max(want, 16)
    # (nothing changes the ranges meanwhile: the caller reads them all within one handler)
    for seg, start, end, count in pending.ranges:
        left = count
        while start < end and left > 0:
            try:
                got, start, _ = read_range(seg, start, end, min(batch, left))
            except OSError as exc:  # the channel's own refill logs and skips it the same way
                log.error("peek: cannot read queued records of %s: %s", seg.path, exc)
                break
            if not got:
                break
            left -= len(got)
            yield from got


def _queued(ready, pending: FileQueue, n: int, max_body: int, late: list, keep: bool = True) -> list[dict]:
    """Up to n queued messages: the in-memory queue ((Message, attempts) entries), then the
    records in the files. A file record whose due time is still ahead is added to `late`
    as (due_ns, Message): the channel's refill would defer it. (Ranges hold records
    published without a due time, so those are rare; at most n + _SLACK records are read.)
    keep False: only `late` is wanted (the queued ones are counted, not returned)."""
    out = [_entry(m, a, "queued", max_body) for m, a in itertools.islice(ready, n)] if keep else []
    if len(out) < n and pending:
        now = time.time_ns()
        seen = len(out)
        for m, due in itertools.islice(_from_files(pending, n - seen), n - seen + _SLACK):
            if due > now:
                late.append((due, m))
                continue
            seen += 1
            if keep:
                out.append(_entry(m, 0, "queued", max_body))
            if seen >= n:
                break
    return out


def _deferred(slots: dict, n: int, max_body: int, late: list) -> list[dict]:
    """The earliest n deferred messages: a channel's Deferred slots by due time (a slot's
    due time is when its timer entry fires, on the wall clock), merged with `late`."""
    to_wall = time.time_ns() - time.monotonic_ns()
    found: list[tuple[int, int, object, int]] = []
    for slot in heapq.nsmallest(n, slots):
        d = slots[slot]
        for m, a in itertools.islice(d.entries, n - len(found)):
            found.append((d.deadline + to_wall, len(found), m, a))
        if len(found) >= n:
            break
    found.extend((due, len(found) + i, m, 0) for i, (due, m) in enumerate(late))
    found.sort(key=lambda e: (e[0], e[1]))
    return [_entry(m, a, "deferred", max_body, due_ns=due) for due, _, m, a in found[:n]]


def _in_flight(ch, n: int, max_body: int) -> list[dict]:
    """The n in-flight messages with the earliest deadlines, with their client."""
    to_wall = time.time_ns() - time.monotonic_ns()
    entries = heapq.nsmallest(n, ch.in_flight.entries(), key=lambda e: e[2].deadline)
    out = []
    for m, a, f in entries:
        info = f.consumer.info
        client = {"client_id": info.get("client_id", ""), "hostname": info.get("hostname", ""),
                  "remote_address": info.get("remote_address", "")}
        out.append(_entry(m, a, "in_flight", max_body, deadline_ns=f.deadline + to_wall, client=client))
    return out


def _answer(ready, pending: FileQueue, slots: dict, ch, request: dict, late: list) -> list[dict]:
    """The messages of a peek, in order, bounded by request["n"]: queued, deferred (the
    Deferred `slots` and `late` (due_ns, Message) pairs), in flight (ch's, when ch)."""
    n, state, max_body = int(request["n"]), request.get("state", "all"), int(request["max_body"])
    out: list[dict] = []
    if state in ("queued", "all"):
        out = _queued(ready, pending, n, max_body, late)
    elif state == "deferred" and pending:  # what the files hold with a due time ahead
        _queued((), pending, n, max_body, late, keep=False)
    if state in ("deferred", "all") and len(out) < n:
        out += _deferred(slots, n - len(out), max_body, late)
    if ch is not None and state in ("in_flight", "all") and len(out) < n:
        out += _in_flight(ch, n - len(out), max_body)
    return out


def channel_peek(router, request: dict) -> dict:
    """The next messages a channel would deliver (module doc); nothing changes."""
    ch, err = find_channel(router, request)
    if err:
        return err
    ahead = ch.ahead_count()  # as /stats counts them
    return {"topic": request["topic"], "channel": request["channel"],
            "depth": len(ch.ready) + len(ch.pending) + ahead, "deferred_count": ch.deferred_count,
            "in_flight_count": len(ch.in_flight) - ahead, "paused": ch.paused,
            "messages": _answer(ch.ready, ch.pending, ch.deferred, ch, request, [])}


def topic_peek(router, request: dict) -> dict:
    """What a topic holds for its first channel (no channel yet), or its held backlog
    (paused); a topic whose messages flow to its channels holds nothing: peek those."""
    topic = router.topics.get(request["topic"].encode())
    if topic is None:
        return {"error": "TOPIC_NOT_FOUND"}
    if topic.channels and not topic.paused:
        return {"error": "TOPIC_HAS_CHANNELS"}
    # the held batches of a new topic waiting for the lookupds (then its backlog is empty)
    entries = itertools.chain(topic.backlog, (e for msgs, _ in topic.held or () for e in msgs))
    n, now = int(request["n"]), time.time_ns()
    queued: list = []
    late: list = []  # (due_ns, Message): DPUBs held with a due time still ahead
    for m, due in entries:
        if due > now:
            late.append((due, m))
        elif len(queued) < n:
            queued.append((m, 0))
    late = heapq.nsmallest(n, late, key=lambda e: e[0])
    depth = len(topic.backlog) + len(topic.backlog_pending) + topic.held_count
    return {"topic": request["topic"], "depth": depth, "paused": topic.paused,
            "channels": [c.decode() for c in topic.channels],
            "messages": _answer(queued, topic.backlog_pending, {}, None, request, late)}
