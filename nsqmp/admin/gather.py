"""One shared gathering of every broker's topics and channels, cut to numbers.

The topic list (/api/stats/topics, /api/topics from nsqd addresses) and the history sampler
need the same thing: each broker's whole /stats, a few MB of JSON that parses into ~10 MB of
dicts per broker at 1,000 topics x 10 channels. Gathering it once for all of them is what
keeps the admin fast and small on a big cluster:

- each broker's answer is parsed a topic at a time (`compact_body`) straight into flat arrays
  (`NodeTopics`), so a few KB of dicts are alive at a time, not ~10 MB (plus orjson's own
  document); names are interned, so ten brokers' "c00" are one string;
- concurrent callers share one gathering in flight (`Gatherer.snapshot`), and a finished one
  is reused for `max_age` seconds (the page's poll right after the sampler's, a navigation
  right after a poll), then let go;
- every POST the admin sends to a peer (an action) bumps `Cluster.generation`: a gathering
  begun before it is never handed to a caller after it, so an action's effect shows at once.
"""
from __future__ import annotations

import asyncio
import sys
import time
from array import array
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import orjson

from nsqmp.admin.cluster import Cluster, Errors


class NodeTopics:
    """One broker's topics and channels as flat arrays (no object per channel: a tenth of the
    parsed dicts' memory, and nothing pinning the allocator's arenas between gatherings).

    Topic i: `names[i]`, `tvals[4i:4i+4]` = depth, backend_depth, message_count, paused, its
    channels `cend[i-1]:cend[i]` (0 for i = 0). Channel j: `cnames[j]`, `cvals[3j:3j+3]` =
    depth, message_count, left (message_count - depth - in_flight - deferred: the messages
    done with, the sampler's delivery counter). Names are interned: ten brokers' "c00" are one
    string.
    """

    __slots__ = ("names", "tvals", "cend", "cnames", "cvals")

    def __init__(self, topics: Iterable[dict]) -> None:
        intern = sys.intern
        names: list[str] = []
        cnames: list[str] = []
        tvals, cend, cvals = array("q"), array("q"), array("q")
        # every channel of every broker: appends only, no function call of ours per channel
        for t in topics:
            names.append(intern(t.get("topic_name", "")))
            tvals.extend((t.get("depth", 0), t.get("backend_depth", 0), t.get("message_count", 0),
                          1 if t.get("paused") else 0))
            for c in t.get("channels") or ():
                cnames.append(intern(c.get("channel_name", "")))
                mc, depth = c.get("message_count", 0), c.get("depth", 0)
                cvals.extend((depth, mc, mc - depth - c.get("in_flight_count", 0) - c.get("deferred_count", 0)))
            cend.append(len(cnames))
        self.names, self.tvals, self.cend, self.cnames, self.cvals = names, tvals, cend, cnames, cvals


def compact(raw: dict) -> NodeTopics:
    """One broker's parsed /stats cut to what the topic list and the history need."""
    return NodeTopics(raw.get("topics") or ())


_TOPIC = b'{"topic_name":'
_BETWEEN = frozenset(b", \t\r\n")


def _topics_one_by_one(body: bytes | bytearray) -> Iterator[dict]:
    """Each topic object of a /stats body laid out as nsqd's and nsqmp's encoders write it
    (every topic object opens with its topic_name), parsed one at a time.

    Why: parsed whole, a broker's 3 MB /stats is ~10 MB of dicts plus orjson's own document at
    once (35 MB traced at the peak), the admin's peak; a topic at a time, a few KB. The bytes `{"topic_name":`
    cannot occur inside a JSON string (its quote would be escaped) nor in a channel, client or
    e2e object (none has that key), so each one opens a topic, and the next one (or, for the
    last, the end orjson reports) closes it."""
    view = memoryview(body)
    start = body.find(_TOPIC)
    while start >= 0:
        after = body.find(_TOPIC, start + 1)
        if after >= 0:
            end = after
            while end > start and body[end - 1] in _BETWEEN:
                end -= 1
            yield orjson.loads(view[start:end])
        else:
            try:
                yield orjson.loads(view[start:])  # only if the body ends with this topic
            except orjson.JSONDecodeError as exc:  # "unexpected content after document"
                yield orjson.loads(view[start:start + exc.pos])
        start = after


def compact_body(body: bytes | bytearray) -> NodeTopics:
    """One broker's /stats body cut like `compact`, parsed a topic at a time when it is laid out
    as nsqd's and nsqmp's are (`_topics_one_by_one`), else whole."""
    if body.find(_TOPIC) >= 0:
        try:
            return NodeTopics(_topics_one_by_one(body))
        except (orjson.JSONDecodeError, UnicodeDecodeError):  # not the layout assumed: whole
            pass
    raw = orjson.loads(body)
    if isinstance(raw, dict) and "status_code" in raw and "data" in raw:  # pre-1.0 nsqd's envelope
        raw = raw["data"]
    return compact(raw if isinstance(raw, dict) else {})


@dataclass
class Snapshot:
    """One gathering: per broker (node, when its answer was parsed (epoch s), its topics)."""

    nodes: list[tuple[str, float, NodeTopics]]
    errors: Errors
    started: float  # the event loop's clock when the gathering began
    generation: int  # Cluster.generation when it began
    _summaries: dict[str, dict] | None = field(default=None, repr=False)

    def summaries(self) -> dict[str, dict]:
        """Per-topic totals over every broker (the topic list's rows, without rates); computed
        once per snapshot. Callers must not change the dicts (copy a row to add to it)."""
        if self._summaries is None:
            self._summaries = topic_summaries(topics for _, _, topics in self.nodes)
        return self._summaries

    def topic_names(self) -> list[str]:
        """Every topic name on any broker, sorted."""
        return sorted(self.summaries())


def topic_summaries(parts) -> dict[str, dict]:
    """Per-topic totals over every broker's `NodeTopics` (no per-node rows, no clients)."""
    out: dict[str, dict] = {}
    names: dict[str, set] = {}
    for part in parts:
        tvals, cend, cnames, start = part.tvals, part.cend, part.cnames, 0
        for i, name in enumerate(part.names):
            depth, backend, count, paused = tvals[4 * i:4 * i + 4]
            t = out.get(name)
            if t is None:
                t = out[name] = {"topic_name": name, "depth": 0, "memory_depth": 0, "backend_depth": 0,
                                 "message_count": 0, "channel_count": 0, "node_count": 0, "paused": False}
                names[name] = set()
            t["depth"] += depth
            t["memory_depth"] += depth - backend
            t["backend_depth"] += backend
            t["message_count"] += count
            t["node_count"] += 1
            t["paused"] = t["paused"] or bool(paused)
            names[name].update(cnames[start:cend[i]])
            start = cend[i]
    for name, t in out.items():
        t["channel_count"] = len(names[name])
    return out


class Gatherer:
    """Hands out `Snapshot`s: a fresh enough finished one, the one in flight, or a new one."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._last: Snapshot | None = None
        self._task: asyncio.Task | None = None
        self._task_generation = -1

    async def snapshot(self, max_age: float = 1.0) -> Snapshot:
        """A gathering begun at most `max_age` s (<= 1) ago and after the last action, else the one in
        flight (if begun after the last action), else a new one. Raises AllFailed."""
        loop = asyncio.get_running_loop()
        generation = self.cluster.generation
        last = self._last
        if last is not None and last.generation == generation and loop.time() - last.started <= max_age:
            return last
        task = self._task
        if task is None or task.done() or self._task_generation != generation:
            task = self._task = loop.create_task(self._gather(generation))
            self._task_generation = generation
            task.add_done_callback(_retrieve)
        # shielded: a caller going away (a closed page) does not cancel the others' gathering
        return await asyncio.shield(task)

    async def _gather(self, generation: int) -> Snapshot:
        loop = asyncio.get_running_loop()
        errors, started = Errors(), loop.time()
        producers = await self.cluster.producers(errors, topics=False)

        def cut(body: bytes, addr: str, hostname: str) -> tuple[str, float, NodeTopics]:
            return addr, time.time(), compact_body(body)

        nodes = await self.cluster.node_reduce(producers, cut, errors, parse=False)
        snap = Snapshot(nodes, errors, started, generation)
        if self.cluster.generation == generation:
            self._last = snap
            # no caller takes it after max_age (1 s at most): let it go rather than hold every
            # broker's numbers until the next gathering
            loop.call_later(1.0, self._expire, snap)
        return snap

    def _expire(self, snap: Snapshot) -> None:
        if self._last is snap:
            self._last = None


def _retrieve(task: asyncio.Task) -> None:
    """Mark a failed gathering's exception retrieved (every waiter got it already, or none is
    left to): no "exception was never retrieved" at exit."""
    if not task.cancelled():
        task.exception()
