"""One shared gathering of every broker's topics and channels, cut to numbers.

The topic list (/api/stats/topics, /api/topics from nsqd addresses) and the history sampler
need the same thing: each broker's whole /stats, a few MB of JSON that parses into ~10 MB of
dicts per broker at 1,000 topics x 10 channels. Gathering it once for all of them is what
keeps the admin fast and small on a big cluster:

- each broker's answer is cut to compact tuples (`compact`) as soon as it is parsed, so one
  parsed /stats is the most held at a time; names are interned, so ten brokers' "c00" are
  one string;
- concurrent callers share one gathering in flight (`Gatherer.snapshot`), and a finished one
  is reused for `max_age` seconds (the page's poll right after the sampler's, a navigation
  right after a poll);
- every POST the admin sends to a peer (an action) bumps `Cluster.generation`: a gathering
  begun before it is never handed to a caller after it, so an action's effect shows at once.
"""
from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field

from nsqmp.admin.cluster import Cluster, Errors

# one broker's channel: (name, depth, message_count, left) where left = message_count - depth
# - in_flight - deferred (the messages done with: the sampler's delivery counter)
Channel = tuple[str, int, int, int]
# one broker's topic: (name, depth, backend_depth, message_count, paused, channels)
Topic = tuple[str, int, int, int, bool, list[Channel]]


def compact(raw: dict) -> list[Topic]:
    """One broker's /stats as `Topic` tuples (names interned): what the topic list and the
    history need, a tenth of the parsed dicts' memory."""
    # per channel of every broker: plain tuple building, no per-channel function call
    intern = sys.intern
    out: list[Topic] = []
    for t in raw.get("topics") or ():
        chans = []
        for c in t.get("channels") or ():
            mc, depth = c.get("message_count", 0), c.get("depth", 0)
            chans.append((intern(c.get("channel_name", "")), depth, mc,
                          mc - depth - c.get("in_flight_count", 0) - c.get("deferred_count", 0)))
        out.append((intern(t.get("topic_name", "")), t.get("depth", 0), t.get("backend_depth", 0),
                    t.get("message_count", 0), bool(t.get("paused")), chans))
    return out


@dataclass
class Snapshot:
    """One gathering: per broker (node, when its answer was parsed (epoch s), its topics)."""

    nodes: list[tuple[str, float, list[Topic]]]
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
    """Per-topic totals over every broker's `Topic` list (no per-node rows, no clients)."""
    out: dict[str, dict] = {}
    names: dict[str, set] = {}
    for part in parts:
        for name, depth, backend, count, paused, channels in part:
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
            t["paused"] = t["paused"] or paused
            names[name].update(c[0] for c in channels)
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
        """A gathering begun at most `max_age` s ago and after the last action, else the one in
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

        def cut(raw: dict, addr: str, hostname: str) -> tuple[str, float, list[Topic]]:
            return addr, time.time(), compact(raw)

        nodes = await self.cluster.node_reduce(producers, cut, errors)
        snap = Snapshot(nodes, errors, started, generation)
        if self.cluster.generation == generation:
            self._last = snap
        return snap


def _retrieve(task: asyncio.Task) -> None:
    """Mark a failed gathering's exception retrieved (every waiter got it already, or none is
    left to): no "exception was never retrieved" at exit."""
    if not task.cancelled():
        task.exception()
