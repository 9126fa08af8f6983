"""History without Graphite: a sampler polls the brokers every --history-interval seconds and
keeps the last --history-window seconds per topic and per channel in fixed rings.

Memory is bounded by construction: one shared ring of timestamps, and per series three or four
float32 rings of window/interval slots (depth, publish rate, delivery rate; a topic also keeps its
channels' depth): 1,000 topics x 10 channels at the defaults (360 slots) is about 49 MB, whatever
the number of brokers (brokers are summed before storing). A series unseen for a whole window is
dropped, so topic churn does not grow it. Rates are computed from per-broker counter deltas, so a
broker restarting (its counters going backwards) adds 0 for that step instead of a negative rate.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from array import array

from aiohttp import web

from nsqmp.admin.cluster import AllFailed, Cluster, Errors

log = logging.getLogger("nsqmp.admin")

NAN = math.nan


class Series:
    """One topic's or channel's rings (float32; NaN where nothing was sampled)."""

    __slots__ = ("depth", "publish", "delivery", "channels_depth", "last_seen")

    def __init__(self, slots: int, topic: bool) -> None:
        blank = array("f", [NAN]) * slots
        self.depth, self.publish, self.delivery = array("f", blank), array("f", blank), array("f", blank)
        self.channels_depth = array("f", blank) if topic else None
        self.last_seen = 0.0


def _reduce(raw: dict, addr: str, hostname: str) -> tuple[str, dict]:
    """One broker's /stats cut to the counters the sampler needs:
    {topic: (message_count, depth, {channel: (message_count, depth, left)})}, where `left` counts
    the messages that left the channel (finished): message_count - depth - in flight - deferred."""
    out = {}
    for t in raw.get("topics") or ():
        chans = {}
        for c in t.get("channels") or ():
            mc, depth = c.get("message_count", 0), c.get("depth", 0)
            chans[c.get("channel_name", "")] = (mc, depth, mc - depth - c.get("in_flight_count", 0)
                                                - c.get("deferred_count", 0))
        out[t.get("topic_name", "")] = (t.get("message_count", 0), t.get("depth", 0), chans)
    return addr, out


def _delta(now: int, before: int | None) -> int:
    return now - before if before is not None and now >= before else 0


class Sampler:
    """The rings and the task that fills them."""

    def __init__(self, interval: float, window: float) -> None:
        self.interval = interval
        self.window = window
        self.slots = max(2, int(window // interval))
        self.ts = array("d", [NAN]) * self.slots
        self.head = 0  # the slot the next sample goes to
        self.topics: dict[str, Series] = {}
        self.channels: dict[tuple[str, str], Series] = {}
        self.prev: dict[str, dict] = {}  # node -> its last _reduce answer
        self.prev_ts: dict[str, float] = {}

    # -- recording ---------------------------------------------------------------------------
    def record(self, now: float, parts: list[tuple[str, dict]]) -> None:
        """Store one sample taken at `now` from every broker's `_reduce` answer."""
        topic_vals: dict[str, list] = {}   # name -> [depth, pub, dlv, channels depth]
        chan_vals: dict[tuple[str, str], list] = {}  # (topic, channel) -> [depth, pub, dlv]
        for addr, topics in parts:
            before, then = self.prev.get(addr, {}), self.prev_ts.get(addr)
            dt = now - then if then is not None and now > then else None
            for name, (mc, depth, chans) in topics.items():
                was = before.get(name)
                tv = topic_vals.setdefault(name, [0.0, 0.0 if dt else NAN, 0.0 if dt else NAN, 0.0])
                tv[0] += depth
                if dt:
                    tv[1] += _delta(mc, was[0] if was else None) / dt
                for cname, (cmc, cdepth, left) in chans.items():
                    cwas = was[2].get(cname) if was else None
                    cv = chan_vals.setdefault((name, cname), [0.0, 0.0 if dt else NAN, 0.0 if dt else NAN])
                    cv[0] += cdepth
                    tv[3] += cdepth
                    if dt:
                        cv[1] += _delta(cmc, cwas[0] if cwas else None) / dt
                        rate = _delta(left, cwas[2] if cwas else None) / dt
                        cv[2] += rate
                        tv[2] += rate
            self.prev[addr], self.prev_ts[addr] = topics, now
        slot = self.head
        self.ts[slot] = now
        self._store(self.topics, topic_vals, slot, now, topic=True)
        self._store(self.channels, chan_vals, slot, now, topic=False)
        self.head = (slot + 1) % self.slots

    def _store(self, series: dict, values: dict, slot: int, now: float, topic: bool) -> None:
        for key, vals in values.items():
            s = series.get(key)
            if s is None:
                s = series[key] = Series(self.slots, topic)
            s.depth[slot], s.publish[slot], s.delivery[slot] = vals[0], vals[1], vals[2]
            if topic:
                s.channels_depth[slot] = vals[3]
            s.last_seen = now
        for key in [k for k, s in series.items() if k not in values]:
            s = series[key]
            if now - s.last_seen > self.window:
                del series[key]
                continue
            s.depth[slot] = s.publish[slot] = s.delivery[slot] = NAN
            if topic:
                s.channels_depth[slot] = NAN

    # -- reading -----------------------------------------------------------------------------
    def _ordered(self, ring: array) -> list:
        """The ring oldest first, only the slots ever written; NaN (not sampled) as None."""
        items = ring[self.head:].tolist() + ring[:self.head].tolist()
        return [None if v != v else v for v in items[self._skip():]]  # v != v: NaN

    def _skip(self) -> int:
        ts = self.ts[self.head:].tolist() + self.ts[:self.head].tolist()
        return next((i for i, t in enumerate(ts) if not math.isnan(t)), len(ts))

    def rates(self, topic: str) -> tuple[float | None, float | None]:
        """The topic's publish and delivery rates at the last sample (None if unknown)."""
        s = self.topics.get(topic)
        if s is None:
            return None, None
        last = (self.head - 1) % self.slots
        pub, dlv = s.publish[last], s.delivery[last]
        return (None if math.isnan(pub) else pub), (None if math.isnan(dlv) else dlv)

    def history(self, topic: str, channel: str = "") -> dict:
        """API.md's columnar answer for a topic or a channel."""
        s = self.channels.get((topic, channel)) if channel else self.topics.get(topic)
        out = {"topic_name": topic, "channel_name": channel, "interval": self.interval, "window": self.window}
        if s is None:
            out.update(ts=[], depth=[], publish_rate=[], delivery_rate=[])
            if not channel:
                out["channels_depth"] = []
            return out
        out.update(ts=self._ordered(self.ts), depth=self._ordered(s.depth),
                   publish_rate=self._ordered(s.publish), delivery_rate=self._ordered(s.delivery))
        if not channel:
            out["channels_depth"] = self._ordered(s.channels_depth)
        return out

    # -- polling -----------------------------------------------------------------------------
    async def sample(self, cluster: Cluster) -> None:
        """Poll every broker once and record what answered."""
        errors = Errors()
        try:
            producers = await cluster.producers(errors, topics=False)
            parts = await cluster.node_reduce(producers, _reduce, errors)
        except AllFailed as exc:
            log.warning("history: %s", exc)
            parts = []
        self.record(time.time(), parts)

    async def run(self, cluster: Cluster) -> None:
        """Sample every `interval` seconds until cancelled."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await self.sample(cluster)
            next_at += self.interval
            await asyncio.sleep(max(0.0, next_at - loop.time()))


HISTORY: web.AppKey[Sampler] = web.AppKey("history", Sampler)
_TASK: web.AppKey[asyncio.Task] = web.AppKey("history_task", asyncio.Task)


async def h_history(request: web.Request) -> web.Response:
    """GET /api/history/topics/:topic[/:channel] (nsqmp): the last window of samples."""
    from nsqmp.admin.server import reply

    info = request.match_info
    return reply(request.app[HISTORY].history(info["topic"], info.get("channel", "")))


def add_routes(router: web.UrlDispatcher, base: str) -> None:
    """The history routes under the base path."""
    router.add_get(base + "/api/history/topics/{topic}", h_history)
    router.add_get(base + "/api/history/topics/{topic}/{channel}", h_history)


def attach(app: web.Application) -> None:
    """Run the sampler for the app's lifetime."""
    from nsqmp.admin.server import CLUSTER, OPTS

    async def start(app: web.Application) -> None:
        opts = app[OPTS]
        app[HISTORY] = Sampler(opts.history_interval, opts.history_window)
        app[_TASK] = asyncio.get_running_loop().create_task(app[HISTORY].run(app[CLUSTER]))

    async def stop(app: web.Application) -> None:
        app[_TASK].cancel()
        try:
            await app[_TASK]
        except asyncio.CancelledError:
            pass

    app.on_startup.append(start)
    app.on_cleanup.insert(0, stop)
