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

After a restart recovery scans every file, kept ones included, and the same rule keeps
them again (router/recovery.py): the mtime is the file's own, so a restart does not
make a file younger.
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

    __slots__ = ("time_ns", "max_bytes", "kept", "bytes")

    def __init__(self, time_s: float, max_bytes: int) -> None:
        self.time_ns = int(time_s * 1e9)
        self.max_bytes = max_bytes
        self.kept: dict[tuple[int, int], tuple[Segment, int]] = {}  # (acceptor, seq) -> (seg, mtime ns)
        self.bytes = 0  # record bytes of the kept files

    def keep(self, seg: Segment) -> bool:
        """seg is finished and rolled past: kept from now on; False if it was already."""
        key = (seg.acceptor, seg.seq)
        if key in self.kept:
            return False
        try:
            mtime = os.stat(seg.path).st_mtime_ns
        except OSError:
            mtime = time.time_ns()
        self.kept[key] = (seg, mtime)
        self.bytes += seg.bytes
        return True

    def forget(self, seg: Segment) -> None:
        """seg is deleted (or the topic goes)."""
        if self.kept.pop((seg.acceptor, seg.seq), None) is not None:
            self.bytes -= seg.bytes

    def due(self, now_ns: int) -> list[Segment]:
        """The kept files to delete now, oldest first: older than retention-time, then the
        oldest while the kept bytes pass retention-bytes. Files a channel reads stay."""
        out: list[Segment] = []
        left = self.bytes
        for seg, mtime in sorted(self.kept.values(), key=lambda e: (e[1], e[0].acceptor, e[0].seq)):
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
        for seg, _ in list(kept.kept.values()):
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
