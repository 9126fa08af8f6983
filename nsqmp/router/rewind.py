"""Rewind: a channel delivers again every retained message from a point (issue 23, replay).

    POST /channel/rewind?topic=T&channel=C&to=<RFC 3339 time | message id | earliest>
    POST /channel/create?topic=T&channel=C&from=<the same forms>

The point, per acceptor stream (each acceptor writes its own files; within a stream the
file order is the publish order, and ids and timestamps only grow):

- `earliest`: the first record of the stream's oldest file still on disk;
- a time T: the first record whose timestamp is T or later: the stream's files are
  searched by their first record's timestamp (one pread each, binary search), then
  one file by its marks (`find_in`);
- a message id: ids are snowflakes whose node is node-id + acceptor index
  (protocol/ids.py), so the id names its stream, whose files are searched by their first
  id and then walked to the record with that id (404 MESSAGE_NOT_FOUND if no retained
  file has it); the other streams start at the id's millisecond, as for a time.

The channel is then handed, behind what it already holds, one file range per file from
the point to the last record adopted (router/filequeue.py): no object per message, the
refill reads them back lazily, so a rewind of millions of messages starts delivering at
once. Across streams the files are interleaved by their first record's timestamp
(a segment-granular merge: each stream's order is exact, two streams' messages are in
publish order to within one file).

Durability: the channel gets a fresh id in meta.json and its `start` moves back to the
point, both written before the answer. Its old acks name the old id, so recovery
(router/recovery.py: every record after `start` without an ack of the channel's id)
rebuilds exactly "the replay, less what was finished since". A crash in the middle of a
replay resumes it: duplicates, never a skip. What the channel already had queued, in
flight or deferred stays (so a message may come twice); a FIN of a message in flight at
the rewind keeps being acknowledged under the old id (`old_acks`): its delivery began
before the rewind, so it must not hide the replayed copy from a recovery.
"""
from __future__ import annotations

import heapq
import logging
import mmap
import os
from typing import TYPE_CHECKING

from nsqmp.diskqueue.acklog import ENTRY as ACK
from nsqmp.layouts import DEFER, DUE, ID_AT, LENGTH_MASK, MESSAGE_HEAD, RECORD_HEAD, SEGMENT_HEADER_SIZE

if TYPE_CHECKING:
    from nsqmp.router.channel import Channel
    from nsqmp.router.topic import Topic
    from nsqmp.router.topicfiles import Segment

log = logging.getLogger("nsqmp.router")

_EPOCH_MS = 1288834974657  # protocol/ids.py's epoch (the router may not import protocol's generator)
_HEAD = RECORD_HEAD.size + DUE.size + MESSAGE_HEAD.size  # enough for any record's head


class NotFound(Exception):
    """The message id names no retained record."""


# -- reading record heads ---------------------------------------------------------------------
def _head(data, pos: int) -> tuple[int, int, int]:
    """(size of the whole record, timestamp ns, id as an int) of the record at pos."""
    word = RECORD_HEAD.unpack_from(data, pos)[0]
    at = pos + RECORD_HEAD.size + (DUE.size if word & DEFER else 0)
    ts = MESSAGE_HEAD.unpack_from(data, at)[0]
    return RECORD_HEAD.size + (word & LENGTH_MASK), ts, int(bytes(data[at + ID_AT:at + ID_AT + 16]), 16)


def first_head(seg: Segment) -> tuple[int, int]:
    """(timestamp ns, id) of the first record of seg's file."""
    fd = os.open(seg.path, os.O_RDONLY)
    try:
        data = os.pread(fd, _HEAD, SEGMENT_HEADER_SIZE)
    finally:
        os.close(fd)
    _, ts, mid = _head(data, 0)
    return ts, mid


def find_in(seg: Segment, ts: int = -1, mid: int = -1) -> tuple[int, int] | None:
    """(offset, records before it) of the first record of seg at or after time ts, or
    with id mid; None if every record of the file is before it; NotFound if no record
    has id mid. Timestamps and ids only grow within a file: the segment's marks (record
    boundaries with their counts, about every 4,096 records: Segment.marks) are searched
    by the key of the record at each, then at most one stretch between two marks is
    walked record head by record head."""
    by_id = mid >= 0
    key = mid if by_id else ts
    with open(seg.path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    try:
        end = min(seg.end, len(data))
        marks = [(SEGMENT_HEADER_SIZE, 0)] + [m for m in seg.marks if m[0] < end]
        lo, hi = 0, len(marks) - 1
        while lo < hi:  # the last mark whose record is before the key (or the first mark)
            half = (lo + hi + 1) // 2
            if _head(data, marks[half][0])[2 if by_id else 1] < key:
                lo = half
            else:
                hi = half - 1
        pos, n = marks[lo]
        while pos < end:
            size, rts, rid = _head(data, pos)
            if (rid if by_id else rts) >= key:
                if by_id and rid != mid:
                    raise NotFound
                return pos, n
            pos += size
            n += 1
        return None
    finally:
        data.close()


# -- the point, per stream ------------------------------------------------------------------
def streams(topic: Topic) -> dict[int, list[Segment]]:
    """Each acceptor stream's files that hold adopted records, oldest first."""
    out: dict[int, list[Segment]] = {}
    for seg in topic.segments.values():
        if seg.records:
            out.setdefault(seg.acceptor, []).append(seg)
    for segs in out.values():
        segs.sort(key=lambda s: s.seq)
    return out


def _search(segs: list[Segment], key: int, by_id: bool) -> tuple[int, int, int] | None:
    """(index of the file, offset, records before it there) of the first record at or
    after key (a time, or an id); None if the stream has none."""
    lo, hi = 0, len(segs) - 1
    pick = 0  # the last file whose first record is at or before the key
    while lo <= hi:
        mid = (lo + hi) // 2
        if first_head(segs[mid])[1 if by_id else 0] <= key:
            pick, lo = mid, mid + 1
        else:
            hi = mid - 1
    for i in range(pick, len(segs)):
        found = find_in(segs[i], mid=key) if by_id else find_in(segs[i], ts=key)
        if found is not None:
            return i, found[0], found[1]
        if by_id:
            raise NotFound
    return None


def points(topic: Topic, to: dict, node_id: int, acceptors: int) -> tuple[dict, bool]:
    """Per stream, (index of the file, offset, records before it) where the replay
    begins (streams with nothing to replay are absent), and whether the point was before
    every retained record (the replay starts at the earliest)."""
    kind = to["kind"]
    per = streams(topic)
    out: dict[int, tuple[int, int, int]] = {}
    if kind == "earliest":
        return {a: (0, SEGMENT_HEADER_SIZE, 0) for a in per}, True
    if kind == "id":
        mid = int(to["value"])
        owner = (((mid >> 12) & 0x3FF) - node_id) % 1024
        if owner >= acceptors or owner not in per:
            raise NotFound
        found = _search(per[owner], mid, by_id=True)
        if found is None:
            raise NotFound
        out[owner] = found
        ts = ((mid >> 22) + _EPOCH_MS) * 1_000_000
    else:
        ts = int(to["value"])
    for a, segs in per.items():
        if a not in out:
            found = _search(segs, ts, by_id=False)
            if found is not None:
                out[a] = found
    # before every retained record: the replay starts at the earliest (the answer says so)
    earliest = kind == "time" and all(first_head(segs[0])[0] > ts for segs in per.values())
    return out, earliest


def ranges(topic: Topic, starts: dict) -> list[tuple[Segment, int, int, int]]:
    """The replay as file ranges (segment, start, end, count), each stream in file order,
    the streams interleaved a file at a time by their first record's timestamp."""
    per = streams(topic)
    lanes = []
    for a, (i, offset, before) in starts.items():
        segs = per[a][i:]
        lane = [(segs[0], offset, segs[0].end, segs[0].records - before)]
        lane += [(s, SEGMENT_HEADER_SIZE, s.end, s.records) for s in segs[1:]]
        lanes.append([(first_head(s)[0], a, s.seq, r) for s, r in zip(segs, lane)])
    return [r for _, _, _, r in heapq.merge(*lanes) if r[3] > 0]


# -- the verb ---------------------------------------------------------------------------------
def old_acks(ch: Channel, msgs: list, acks: bytearray) -> bytearray:
    """FIN of msgs on ch: acks holds their ack entries under the channel's own id (the
    in-flight map's one C call wrote them, and counted refs and acked per file already);
    those of the messages that were in flight at a rewind get the channel id of then
    instead, so the replay still delivers their records after a restart."""
    rewound = ch.rewound
    old = {}
    for m in msgs:
        hit = rewound.pop(id(m), None)
        if hit is not None and hit[0] is m and m.segment is not None:
            old[(m.segment.acceptor, m.segment.seq, m.offset)] = hit[1]
    if not old:
        return acks
    out = bytearray()
    for cid, acceptor, seq, offset in ACK.iter_unpack(acks):
        out += ACK.pack(old.get((acceptor, seq, offset), cid), acceptor, seq, offset)
    return out


def rewind(topic: Topic, ch: Channel, to: dict, node_id: int, acceptors: int,
           fresh_id: bool = True) -> dict:
    """Make ch deliver again every retained record from `to` (module doc); the answer."""
    starts, earliest = points(topic, to, node_id, acceptors)
    replay = ranges(topic, starts)
    per = streams(topic)
    if ch.id:
        # the point becomes the channel's start (the record before it, per stream); a
        # stream with nothing to replay starts after what was adopted of it
        start = dict(topic.hwm)
        for a, (i, offset, _) in starts.items():
            start[a] = (per[a][i].seq, offset - 1)
        if fresh_id:
            old = ch.id
            # what is in flight now was delivered before the rewind: its FIN keeps the old id
            for m, _, _ in ch.in_flight.entries():
                ch.rewound[id(m)] = (m, old)
            ch.id = topic.meta.next_channel_id
            topic.meta.next_channel_id += 1
        else:
            old = ch.id
        ch.start = start
        for cm in topic.meta.channels:
            if cm.id == old:
                cm.id, cm.start = ch.id, start
        topic.save_meta()  # before the first replayed message goes out
    count = 0
    pending = ch.pending
    kept = topic.retention
    for seg, begin, end, n in replay:
        pending.add(seg, begin, end, n)
        seg.refs += n
        count += n
        if kept is not None:
            kept.reread(seg)  # its acks matter again (the channel's new id is K or more)
    ch.message_count += count
    ch.mark(ch)
    log.info("TOPIC(%s): channel %s rewound: %d messages to deliver again%s",
             topic.name.decode(errors="replace"), ch.name.decode(errors="replace"), count,
             " (from the earliest retained)" if earliest else "",
             extra={"topic": topic.name.decode(errors="replace"), "channel": ch.name.decode(errors="replace")})
    return {"messages": count, "earliest": earliest,
            "from": {str(a): [per[a][i].seq, offset] for a, (i, offset, _) in starts.items()}}


def _find(router, request) -> tuple:
    """(topic, channel or None, error answer or None)."""
    topic = router.topics.get(request["topic"].encode())
    if topic is None:
        return None, None, {"error": "TOPIC_NOT_FOUND"}
    if not topic.durable:
        return topic, None, {"error": "EPHEMERAL_TOPIC"}
    return topic, topic.channels.get(request["channel"].encode()), None


def channel_rewind(router, request) -> dict:
    """CONTROL op: POST /channel/rewind."""
    topic, ch, err = _find(router, request)
    if err:
        return err
    if ch is None:
        return {"error": "CHANNEL_NOT_FOUND"}
    try:
        return rewind(topic, ch, request["to"], router.opts.node_id, router.plan.acceptors)
    except NotFound:
        return {"error": "MESSAGE_NOT_FOUND"}


def channel_create_from(router, request) -> dict:
    """CONTROL op: POST /channel/create with `from`: a new channel that starts in the
    past (an existing channel is left as it is, as create leaves it)."""
    topic, ch, err = _find(router, request)
    if err:
        return err
    if ch is not None:
        return {"created": False}
    try:
        points(topic, request["to"], router.opts.node_id, router.plan.acceptors)  # 404 before creating
    except NotFound:
        return {"error": "MESSAGE_NOT_FOUND"}
    # a topic's first channel takes its backlog as well (start None); its start then
    # moves to the point, and what it took from the backlog it keeps (duplicates allowed)
    ch = router.get_channel(topic, request["channel"].encode())
    answer = rewind(topic, ch, request["to"], router.opts.node_id, router.plan.acceptors, fresh_id=False)
    return {"created": True, **answer}


OPS = {"channel_rewind": channel_rewind, "channel_create_from": channel_create_from}
