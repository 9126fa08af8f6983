"""History without Graphite: a sampler polls the brokers every --history-interval seconds and
keeps the last --history-window seconds per topic and per channel in fixed rings.

Memory is bounded by construction and small per series: one shared ring of timestamps; per
series one uint16 ring per column (depth, publish rate, delivery rate; a topic also its channels'
depth), each value stored as round(log1p(v) x 2370), which keeps 0.05 % relative precision from 0
to 10^12 (a chart's needs) in 2 bytes; 0xFFFF marks "not sampled". At the defaults (10 s, 1 h:
360 slots), 1,000 topics x 10 channels take about 25 MB whatever the number of brokers, since
brokers are summed before storing. A broker's previous counters are kept in flat int64 arrays by
series number (16 bytes per series per broker). The sampler takes the brokers' numbers from the
shared gathering (gather.py: the topic list's, when under a second old), already cut to flat
arrays, and folds them in one pass without a call per channel. A series unseen for a whole window
is dropped and its number reused, so topic churn does not grow the rings. Rates come from
per-broker counter deltas: a broker restarting (its counters going backwards) adds 0 for that step.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from array import array

from aiohttp import web

from nsqmp.admin.cluster import AllFailed
from nsqmp.admin.gather import Gatherer, NodeTopics, compact

log = logging.getLogger("nsqmp.admin")

_K = 2370.0  # log1p(1e12) x _K < 0xFFFF
_NONE = 0xFFFF
DEPTH, PUBLISH, DELIVERY, CHANNELS_DEPTH = range(4)
_COLUMNS = ("depth", "publish_rate", "delivery_rate", "channels_depth")


def encode(value: float) -> int:
    """A non-negative value as its uint16 log code (NaN -> "not sampled")."""
    if value != value:  # NaN
        return _NONE
    return min(_NONE - 1, round(math.log1p(max(value, 0.0)) * _K))


def decode(code: int, integer: bool = False) -> float | None:
    """The value a code stands for (None: not sampled); depths are rounded to integers."""
    if code == _NONE:
        return None
    value = math.expm1(code / _K)
    return float(round(value)) if integer else value


class Series:
    """One topic's or channel's rings: `columns` x `slots` uint16 codes, column-major."""

    __slots__ = ("number", "codes", "columns", "last_seen", "tick")

    def __init__(self, number: int, slots: int, columns: int) -> None:
        self.number = number
        self.codes = array("H", [_NONE]) * (slots * columns)
        self.columns = columns
        self.last_seen = 0.0
        self.tick: list[float] | None = None  # the sample being built (None: not seen yet)


class Sampler:
    """The rings, the per-broker counters, and the task that fills them."""

    def __init__(self, interval: float, window: float) -> None:
        self.interval = interval
        self.window = window
        self.slots = max(2, int(window // interval))
        self.ts = array("d", [math.nan]) * self.slots
        self.head = 0  # the slot the next sample goes to
        self.series: dict[str | tuple[str, str], Series] = {}  # topic name or (topic, channel)
        self._free: list[int] = []  # series numbers to reuse
        self._next = 0
        self._prev: dict[str, tuple[array, array, float]] = {}  # node -> (counts, lefts, ts)
        self._rated = False

    # -- recording ---------------------------------------------------------------------------
    def _number(self) -> int:
        if self._free:
            return self._free.pop()
        self._next += 1
        return self._next - 1

    def _grow(self, counts: array, lefts: array) -> None:
        """Make room in one broker's counters for every series number (-1: never seen there)."""
        if len(counts) < self._next:
            more = array("q", [-1]) * (self._next - len(counts))
            counts.extend(more)
            lefts.extend(more)

    def _new(self, key: str | tuple[str, str], columns: int) -> Series:
        s = self.series[key] = Series(self._number(), self.slots, columns)
        return s

    def fold(self, node: str, raw: dict, now: float) -> None:
        """Add one broker's /stats (taken at `now`) to the sample being built."""
        self.fold_topics(node, compact(raw), now)

    def fold_topics(self, node: str, topics: NodeTopics, now: float) -> None:
        """Add one broker's topics (gather.NodeTopics, taken at `now`) to the sample being
        built: depths summed, rates from this broker's counter deltas since its previous sample."""
        counts, lefts, then = self._prev.get(node, (array("q"), array("q"), None))
        dt = now - then if then is not None and now > then else 0.0
        self._rated = self._rated or bool(dt)
        series, tvals, cend, cnames, cvals = self.series, topics.tvals, topics.cend, topics.cnames, topics.cvals
        start = 0
        # one pass over every channel of every broker: lookups inlined, no call per channel
        for i, name in enumerate(topics.names):
            s = series.get(name) or self._new(name, 4)
            tv = s.tick
            if tv is None:
                tv = s.tick = [0.0, 0.0, 0.0, 0.0]
            tn = s.number
            if tn >= len(counts):
                self._grow(counts, lefts)
            mc = tvals[4 * i + 2]
            tv[DEPTH] += tvals[4 * i]
            if dt and 0 <= counts[tn] <= mc:
                tv[PUBLISH] += (mc - counts[tn]) / dt
            counts[tn] = mc
            end = cend[i]
            for j in range(start, end):
                key = (name, cnames[j])
                c = series.get(key) or self._new(key, 3)
                cv = c.tick
                if cv is None:
                    cv = c.tick = [0.0, 0.0, 0.0]
                cn = c.number
                if cn >= len(counts):
                    self._grow(counts, lefts)
                cdepth, cmc, left = cvals[3 * j:3 * j + 3]
                cv[DEPTH] += cdepth
                tv[CHANNELS_DEPTH] += cdepth
                if dt and 0 <= counts[cn] <= cmc:
                    cv[PUBLISH] += (cmc - counts[cn]) / dt
                if dt and 0 <= lefts[cn] <= left:
                    rate = (left - lefts[cn]) / dt
                    cv[DELIVERY] += rate
                    tv[DELIVERY] += rate
                counts[cn], lefts[cn] = cmc, left
            start = end
        self._prev[node] = (counts, lefts, now)

    def begin(self) -> None:
        """Start a sample: nothing folded yet."""
        for s in self.series.values():
            s.tick = None
        self._rated = False

    def commit(self, now: float) -> None:
        """Store the folded sample in the next slot; series not seen get "not sampled", and
        rates too when no broker had a previous sample to compare with."""
        slot, slots = self.head, self.slots
        self.ts[slot] = now
        for key, s in list(self.series.items()):
            vals, s.tick = s.tick, None
            if vals is None:
                if now - s.last_seen > self.window:
                    self._drop(key, s)
                    continue
                for col in range(s.columns):
                    s.codes[col * slots + slot] = _NONE
                continue
            s.last_seen = now
            for col in range(s.columns):
                unknown = col in (PUBLISH, DELIVERY) and not self._rated
                s.codes[col * slots + slot] = _NONE if unknown else encode(vals[col])
        self.head = (slot + 1) % slots

    def _drop(self, key: str | tuple[str, str], s: Series) -> None:
        del self.series[key]
        for counts, lefts, _ in self._prev.values():
            if s.number < len(counts):
                counts[s.number] = lefts[s.number] = -1
        self._free.append(s.number)

    def record(self, now: float, stats: list[tuple[str, dict]]) -> None:
        """One whole sample from (node, /stats) pairs (the sampler folds as answers come)."""
        self.begin()
        for node, raw in stats:
            self.fold(node, raw, now)
        self.commit(now)

    # -- reading -----------------------------------------------------------------------------
    def _order(self) -> tuple[list[int], int]:
        """Slot numbers oldest first, starting at the first slot ever written."""
        order = list(range(self.head, self.slots)) + list(range(self.head))
        skip = next((i for i, slot in enumerate(order) if not math.isnan(self.ts[slot])), len(order))
        return order[skip:], skip

    def rates(self, topic: str) -> tuple[float | None, float | None]:
        """The topic's publish and delivery rates at the last sample (None if unknown)."""
        s = self.series.get(topic)
        if s is None:
            return None, None
        last = (self.head - 1) % self.slots
        return (decode(s.codes[PUBLISH * self.slots + last]),
                decode(s.codes[DELIVERY * self.slots + last]))

    def history(self, topic: str, channel: str = "") -> dict:
        """API.md's columnar answer for a topic or a channel."""
        s = self.series.get((topic, channel) if channel else topic)
        out: dict = {"topic_name": topic, "channel_name": channel, "interval": self.interval,
                     "window": self.window}
        columns = 3 if channel else 4
        order, _ = self._order() if s is not None else ([], 0)
        out["ts"] = [self.ts[i] for i in order]
        for col in range(columns):
            base = col * self.slots
            integer = col in (DEPTH, CHANNELS_DEPTH)
            out[_COLUMNS[col]] = [decode(s.codes[base + i], integer) for i in order] if s is not None else []
        return out

    # -- polling -----------------------------------------------------------------------------
    async def sample(self, gatherer: Gatherer) -> None:
        """One sample from the shared gathering (the page's, when it is under a second old)."""
        self.begin()
        try:
            snap = await gatherer.snapshot(max_age=min(1.0, self.interval / 4))
            for node, taken, topics in snap.nodes:
                self.fold_topics(node, topics, taken)
        except AllFailed as exc:
            log.warning("history: %s", exc)
        self.commit(time.time())

    async def run(self, gatherer: Gatherer) -> None:
        """Sample every `interval` seconds until cancelled."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await self.sample(gatherer)
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
    from nsqmp.admin.server import GATHER, OPTS

    async def start(app: web.Application) -> None:
        opts = app[OPTS]
        app[HISTORY] = Sampler(opts.history_interval, opts.history_window)
        app[_TASK] = asyncio.get_running_loop().create_task(app[HISTORY].run(app[GATHER]))

    async def stop(app: web.Application) -> None:
        app[_TASK].cancel()
        try:
            await app[_TASK]
        except asyncio.CancelledError:
            pass

    app.on_startup.append(start)
    app.on_cleanup.insert(0, stop)
