"""Retention: a topic's finished segment files kept for replay (/channel/rewind).

Without retention a segment file goes as soon as every channel is done with it and its
acceptor has rolled past it (router/topicfiles.py). With `--retention-time` or
`--retention-bytes`, such a file is *kept* instead: it stays in the topic's segments
(so its ack-log entries stay live and a rewind can hand its records to a channel as
file ranges) and is deleted by `sweep`, which the topic's periodic sync runs:

- a kept file older than retention-time goes (its age: the file's mtime, which is the
  time of its last record's write: the acceptor never writes a file it rolled past);
- while the kept files of the topic hold more than retention-bytes, the oldest goes.

A kept file that a rewound channel still reads (refs > 0) is never deleted; it is
swept once that channel is done with it again. Deletion runs on the syncing thread, as
every other deletion does. Kept bytes are not the topic's `disk_bytes` (max-topic-bytes
counts what channels still have to deliver, not what is kept for replay).

Restarts. The kept files are written down in meta.json (`kept`, at the next periodic
sync): each with its record count, end, bytes, marks and K, the topic's next channel id
when the file was last finished by every channel. Recovery (router/recovery.py) reads a
kept file only for the channels that may still want it (an id of K or more, which only a
rewind or a channel created later has, and a start inside or before the file); for the
others it takes the figures from meta.json, so a restart does not read gigabytes of
retained records. Their ack-log entries are dead once the file is written down (the
compaction drops them): nobody needs them any more. A file not yet written down (a crash
within a sync period) is scanned as any other. The mtime is the file's own, so a restart
does not make a file younger.
"""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from nsqmp.layouts import DEFER, DUE, MESSAGE_HEAD, RECORD_HEAD, SEGMENT_HEADER_SIZE

if TYPE_CHECKING:
    from nsqmp.router.topicfiles import Segment

_FIRST_TS = RECORD_HEAD.size + MESSAGE_HEAD.size + DUE.size  # enough of a first record for its timestamp


class Retention:
    """One topic's kept files, and the rule that deletes them (retention-time, -bytes)."""

    __slots__ = ("time_ns", "max_bytes", "kept", "bytes", "dirty")

    def __init__(self, time_s: float, max_bytes: int) -> None:
        self.time_ns = int(time_s * 1e9)
        self.max_bytes = max_bytes
        # (acceptor, seq) -> [seg, mtime ns, K, written down in meta.json]
        self.kept: dict[tuple[int, int], list] = {}
        self.bytes = 0  # record bytes of the kept files
        self.dirty = False  # meta.json's list is behind

    def keep(self, seg: Segment, next_id: int) -> bool:
        """seg is finished by every channel (ids below next_id) and rolled past: kept from
        now on; False if it was already."""
        key = (seg.acceptor, seg.seq)
        entry = self.kept.get(key)
        if entry is not None:
            if entry[2] != next_id:  # finished again, by the channels made since too
                entry[2], entry[3], self.dirty = next_id, False, True
            return False
        try:
            mtime = os.stat(seg.path).st_mtime_ns
        except OSError:
            mtime = time.time_ns()
        self.kept[key] = [seg, mtime, next_id, False]
        self.bytes += seg.bytes
        self.dirty = True
        return True

    def reread(self, seg: Segment) -> None:
        """A rewind hands seg to a channel again: its ack-log entries are live again."""
        entry = self.kept.get((seg.acceptor, seg.seq))
        if entry is not None and entry[3]:
            entry[3], self.dirty = False, True

    def written(self) -> tuple[list, int]:
        """meta.json's `kept` list now (module doc), and the ack-log entries that this
        makes dead; every entry counts as written down from now on."""
        out, dead = [], 0
        for entry in self.kept.values():
            seg, _, k, saved = entry
            out.append([seg.acceptor, seg.seq, seg.records, seg.end, seg.bytes, k, [list(m) for m in seg.marks]])
            if not saved and seg.refs <= 0:
                dead += seg.acked
            entry[3] = True
        self.dirty = False
        return out, dead

    def unneeded(self) -> set[tuple[int, int]]:
        """The kept files written down whose ack-log entries nobody needs."""
        return {key for key, entry in self.kept.items() if entry[3] and entry[0].refs <= 0}

    def forget(self, seg: Segment) -> None:
        """seg is deleted (or the topic goes)."""
        if self.kept.pop((seg.acceptor, seg.seq), None) is not None:
            self.bytes -= seg.bytes
            self.dirty = True

    def due(self, now_ns: int) -> list[Segment]:
        """The kept files to delete now, oldest first: older than retention-time, then the
        oldest while the kept bytes pass retention-bytes. Files a channel reads stay."""
        out: list[Segment] = []
        left = self.bytes
        for seg, mtime, _, _ in sorted(self.kept.values(), key=lambda e: (e[1], e[0].acceptor, e[0].seq)):
            expired = self.time_ns and now_ns - mtime > self.time_ns
            over = self.max_bytes and left > self.max_bytes
            if not (expired or over):
                if self.time_ns and not self.max_bytes:
                    break  # sorted by age: nothing younger is expired
                continue
            if seg.refs > 0:
                continue  # a rewound channel still reads it
            out.append(seg)
            left -= seg.bytes
        return out

    def oldest(self) -> Segment | None:
        """The kept file with the oldest mtime (for /stats)."""
        if not self.kept:
            return None
        return min(self.kept.values(), key=lambda e: e[1])[0]

    def stats(self) -> dict:
        """nsqmp's per-topic /stats fields: kept bytes and files, the oldest kept
        message's timestamp (unix ns, 0 with none)."""
        seg = self.oldest()
        return {"nsqmp_retained_bytes": self.bytes, "nsqmp_retained_files": len(self.kept),
                "nsqmp_retained_oldest_ts": first_timestamp(seg.path) if seg is not None else 0}


def first_timestamp(path: str) -> int:
    """The timestamp (unix ns) of a segment file's first record; 0 if it has none."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        data = os.pread(fd, _FIRST_TS, SEGMENT_HEADER_SIZE)
    finally:
        os.close(fd)
    if len(data) < RECORD_HEAD.size + MESSAGE_HEAD.size:
        return 0
    word = RECORD_HEAD.unpack_from(data)[0]
    if not word:
        return 0
    at = RECORD_HEAD.size + (DUE.size if word & DEFER else 0)
    if len(data) < at + MESSAGE_HEAD.size:
        return 0
    return MESSAGE_HEAD.unpack_from(data, at)[0]


def apply(topic, time_s: float, max_bytes: int) -> None:
    """The topic's own retention (POST /topic/retention, or its meta.json at recovery) in
    place of the flags'; both 0: none for this topic, and the kept files nobody reads go."""
    if not topic.durable:
        return
    if time_s or max_bytes:
        if topic.retention is None:
            topic.retention = Retention(time_s, max_bytes)
        else:
            topic.retention.time_ns, topic.retention.max_bytes = int(time_s * 1e9), max_bytes
        return
    kept, topic.retention = topic.retention, None
    if kept is not None:
        for seg, _, _, _ in list(kept.kept.values()):
            if seg.refs <= 0:
                topic.delete(seg)
        # one a rewound channel still reads goes when it is released (nothing keeps it now)


def topic_retention(router, request) -> dict:
    """CONTROL op: POST /topic/retention (persisted in meta.json)."""
    topic = router.topics.get(request["topic"].encode())
    if topic is None:
        return {"error": "TOPIC_NOT_FOUND"}
    if not topic.durable:
        return {"error": "EPHEMERAL_TOPIC"}
    time_s, max_bytes = float(request["time"]), int(request["bytes"])
    apply(topic, time_s, max_bytes)
    topic.meta.retention = (time_s, max_bytes)
    topic.save_meta()
    return {}


def configure(links, opts) -> None:
    """The retention options onto the router's TopicLinks (new topics take them)."""
    links.retention_time = float(getattr(opts, "retention_time", 0) or 0)
    links.retention_bytes = int(getattr(opts, "retention_bytes", 0) or 0)
