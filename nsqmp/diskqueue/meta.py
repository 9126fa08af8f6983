"""A topic's metadata, rewritten whole on every change: temporary file, fsync, rename.

    {"version": 1, "paused": false, "next_channel_id": 3, "counts": {...},
     "channels": [{"name": "c", "id": 1, "paused": false, "counts": {...},
                   "start": {"0": [seq, offset], ...} | null}]}

`counts` are the /stats counters (message_count, requeue_count, ...) as of the last
write: a graceful stop writes them last, so a restart shows the same numbers.
`backlog_start` (same form as `start`): /topic/empty dropped the topic's own backlog
up to there; a first channel created later does not adopt those records.
`paused_at` (same form as `start`, null unless the topic is paused): records after it are
held at the topic, not handed to its channels, until /topic/unpause (nsqd's topic pause).
`deferred` (written by a graceful stop, cleared by the next start) lists the channel's
messages deferred by REQ with a delay: [acceptor, seq, offset, due unix ns, attempts];
`attempts` (same life) the delivery attempts of its queued messages that were already
delivered at least once: [acceptor, seq, offset, attempts].

Written only when set (an older file without them reads as unset): `ttl_ms` (the topic's
own message TTL, POST /topic/ttl), and per channel `max_attempts` and `dead_letter_to`
(POST /channel/dead-letter; max_attempts 0 = dead letters off for this channel, absent =
the broker's --max-attempts).

`retention` (written only once set by POST /topic/retention): [seconds, bytes], the
topic's own retention-time and retention-bytes in place of the flags' ([0, 0]: none).

`kept` (written only while retention keeps files): the finished segment files kept for
replay, [acceptor, seq, records, end, bytes, K, [[offset, records before], ...]]: every
channel with an id below K had finished the file when it was written down, so recovery
need not read it for them (router/retention.py).

`start` is where the channel began: per acceptor stream, the position (seq, offset) of
the last record published before the channel existed; records at or before it are not
the channel's. An acceptor missing from it had published nothing yet. null means the
channel adopted everything (it was the topic's first channel).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

FILE = "meta.json"
VERSION = 1


@dataclass
class ChannelMeta:
    name: str
    id: int
    paused: bool = False
    start: dict[int, tuple[int, int]] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    deferred: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    attempts: list[tuple[int, int, int, int]] = field(default_factory=list)
    max_attempts: int | None = None  # None: the broker's --max-attempts
    dead_letter_to: str | None = None  # None: "<topic>.dead"


@dataclass
class TopicMeta:
    paused: bool = False
    next_channel_id: int = 1
    channels: list[ChannelMeta] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    backlog_start: dict[int, tuple[int, int]] = field(default_factory=dict)
    paused_at: dict[int, tuple[int, int]] | None = None
    ttl_ms: int | None = None  # None: the broker's --msg-ttl
    retention: tuple[float, int] | None = None
    kept: list = field(default_factory=list)

    def to_json(self) -> bytes:
        extra: dict = {} if self.ttl_ms is None else {"ttl_ms": self.ttl_ms}
        if self.retention is not None:
            extra["retention"] = list(self.retention)
        if self.kept:
            extra["kept"] = self.kept
        return json.dumps({
            "version": VERSION,
            "paused": self.paused,
            "next_channel_id": self.next_channel_id,
            "counts": self.counts,
            "backlog_start": {str(a): list(p) for a, p in self.backlog_start.items()},
            "paused_at": None if self.paused_at is None else {str(a): list(p) for a, p in self.paused_at.items()},
            "channels": [
                {"name": c.name, "id": c.id, "paused": c.paused, "counts": c.counts,
                 "deferred": [list(d) for d in c.deferred],
                 "attempts": [list(a) for a in c.attempts],
                 "start": None if c.start is None else {str(a): list(p) for a, p in c.start.items()},
                 **_dead_letter_json(c)}
                for c in self.channels
            ],
            **extra,
        }, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "TopicMeta":
        raw = json.loads(data)
        if raw.get("version") != VERSION:
            raise ValueError(f"unknown topic metadata version {raw.get('version')!r}")
        meta = cls(
            paused=bool(raw.get("paused", False)),
            next_channel_id=int(raw.get("next_channel_id", 1)),
            counts={k: int(v) for k, v in raw.get("counts", {}).items()},
            backlog_start={int(a): (int(p[0]), int(p[1])) for a, p in raw.get("backlog_start", {}).items()},
            paused_at=None if raw.get("paused_at") is None
            else {int(a): (int(p[0]), int(p[1])) for a, p in raw["paused_at"].items()},
            retention=None if raw.get("retention") is None
            else (float(raw["retention"][0]), int(raw["retention"][1])),
            kept=list(raw.get("kept", [])),
            channels=[
                ChannelMeta(c["name"], int(c["id"]), bool(c.get("paused", False)),
                            None if c.get("start") is None
                            else {int(a): (int(p[0]), int(p[1])) for a, p in c["start"].items()},
                            {k: int(v) for k, v in c.get("counts", {}).items()},
                            [(int(d[0]), int(d[1]), int(d[2]), int(d[3]), int(d[4]))
                             for d in c.get("deferred", [])],
                            [(int(a[0]), int(a[1]), int(a[2]), int(a[3])) for a in c.get("attempts", [])],
                            None if c.get("max_attempts") is None else int(c["max_attempts"]),
                            c.get("dead_letter_to"))
                for c in raw.get("channels", [])
            ],
        )
        if raw.get("ttl_ms") is not None:
            meta.ttl_ms = int(raw["ttl_ms"])
        return meta


def _dead_letter_json(c: ChannelMeta) -> dict:
    """A channel's dead-letter settings, only those set (unset: no key, the file as before)."""
    out: dict = {}
    if c.max_attempts is not None:
        out["max_attempts"] = c.max_attempts
    if c.dead_letter_to is not None:
        out["dead_letter_to"] = c.dead_letter_to
    return out


def read(topic_dir: str) -> TopicMeta | None:
    try:
        with open(os.path.join(topic_dir, FILE), "rb") as f:
            return TopicMeta.from_json(f.read())
    except FileNotFoundError:
        return None


def write(topic_dir: str, meta: TopicMeta) -> None:
    """Atomically replace the topic's metadata (survives a crash at any point)."""
    os.makedirs(topic_dir, exist_ok=True)
    path = os.path.join(topic_dir, FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, meta.to_json())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    dfd = os.open(topic_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
