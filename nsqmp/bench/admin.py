"""`nsqmp bench admin`: the admin's topic list over a big cluster: time and memory.

Issue 22's case is 10 brokers x 1,000 topics x 10 channels. Starting ten brokers and creating
100,000 channels is too heavy for a shared 2-core machine, so by default ONE real nsqmp broker
(1 acceptor, 1 router) gets the topics and channels, its real /stats and /info answers are
recorded, and the other brokers are replays of them on their own ports (same bytes, their own
port in /info); `--real N` starts N real brokers instead. The admin runs as its own process
(`nsqmp admin --nsqd-http-address ...` x brokers) and the bench times, over --reps requests:
GET /api/stats/topics (nsqmp's topic list: every broker's /stats gathered and summed),
GET /api/topics (nsqadmin's list), each 1.2 s apart so that each one gathers (the admin reuses a
gathering for a second), /api/stats/topics back to back (reused), and GET /api/topics/<one> (a
topic page), then reads the admin's RSS and peak RSS (the history rings are allocated for the whole window at a series'
first sample, so one sample shows the full-hour footprint). Prints one JSON object.

    nsqmp bench admin [--brokers 10] [--topics 1000] [--channels 10] [--real 1] [--reps 5]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from nsqmp.launcher import Broker


async def _populate(http_port: int, topics: int, channels: int) -> None:
    """Create every topic and channel on one broker over its HTTP API (16 at a time)."""
    sem = asyncio.Semaphore(16)
    async with aiohttp.ClientSession() as s:
        async def post(path: str) -> None:
            async with sem, s.post(f"http://127.0.0.1:{http_port}{path}") as r:
                assert r.status == 200, (path, r.status, await r.text())

        await asyncio.gather(*(post(f"/topic/create?topic=t{t:04d}") for t in range(topics)))
        await asyncio.gather(*(post(f"/channel/create?topic=t{t:04d}&channel=c{c:02d}")
                               for t in range(topics) for c in range(channels)))


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        return r.read()


class Replays:
    """Brokers answering /ping, /info and /stats with a real broker's recorded bytes."""

    def __init__(self, stats: bytes, stats_light: bytes, info: dict, count: int) -> None:
        self.stats, self.stats_light, self.info, self.count = stats, stats_light, info, count
        self.ports: list[int] = []
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cache: dict[tuple[int, str], bytes] = {}

    def _one_topic(self, body: bytes, topic: str) -> bytes:
        key = (id(body), topic)
        if key not in self._cache:
            whole = orjson.loads(body)
            whole["topics"] = [t for t in whole["topics"] or () if t["topic_name"] == topic] or None
            self._cache[key] = orjson.dumps(whole)
        return self._cache[key]

    def start(self) -> list[int]:
        threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True).start()
        self._ready.wait(30)
        return self.ports

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        runners = []
        for _ in range(self.count):
            app = web.Application()
            port_box: list[int] = []

            async def info(request: web.Request, box=port_box) -> web.Response:
                return web.json_response(dict(self.info, http_port=box[0], tcp_port=box[0] + 1))

            async def stats(request: web.Request) -> web.Response:
                light = request.query.get("include_clients") == "false"
                body = self.stats_light if light else self.stats
                if request.query.get("topic"):  # as a broker filters: that topic only
                    body = self._one_topic(body, request.query["topic"])
                return web.Response(body=body, content_type="application/json")

            app.router.add_get("/info", info)
            app.router.add_get("/stats", stats)
            app.router.add_get("/ping", lambda r: web.Response(text="OK"))
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port_box.append(site._server.sockets[0].getsockname()[1])
            self.ports.append(port_box[0])
            runners.append(runner)
        self._ready.set()
        await self._stop.wait()
        for r in runners:
            await r.cleanup()


def _rss_kib(pid: int) -> tuple[int, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    grab = lambda key: int(re.search(rf"^{key}:\s+(\d+) kB", text, re.M).group(1))  # noqa: E731
    return grab("VmRSS"), grab("VmHWM")


def _start_admin(addrs: list[str], log: Path, interval: float,
                 window: float | None = None) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, "-m", "nsqmp", "admin", "--http-address", "127.0.0.1:0",
           "--history-interval", str(interval), "--http-client-request-timeout", "30"]
    if window is not None:
        cmd += ["--history-window", str(window)]
    for a in addrs:
        cmd += ["--nsqd-http-address", a]
    out = open(log, "wb")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"listening on [\d.]+:(\d+)", log.read_text())
        if found:
            return proc, int(found.group(1))
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(log.read_text())


def _timed(port: int, path: str, reps: int, gap: float = 0.0) -> dict:
    times, size = [], 0
    for _ in range(reps):
        time.sleep(gap)
        t0 = time.perf_counter()
        size = len(_get(port, path))
        times.append(time.perf_counter() - t0)
    return {"median_s": round(statistics.median(times), 3), "max_s": round(max(times), 3), "bytes": size}


def run(brokers: int, topics: int, channels: int, real: int, reps: int, workdir: Path,
        history_interval: float = 10.0) -> dict:
    """Build the cluster, start the admin, time its answers and read its memory."""
    # one router: its /stats part for 10,000 channels (~2.6 MB) travels in REPLY_PART pieces
    started = [Broker(workdir / f"data{i}", "--acceptors", "1", "--routers", "1",
                      log_path=workdir / f"broker{i}.log").start() for i in range(real)]
    replays = None
    admin = None
    try:
        t0 = time.monotonic()
        for b in started:
            asyncio.run(_populate(b.http_port, topics, channels))
        populate_s = time.monotonic() - t0
        addrs = [f"127.0.0.1:{b.http_port}" for b in started]
        first = started[0].http_port
        if brokers > real:
            replays = Replays(_get(first, "/stats?format=json"),
                              _get(first, "/stats?format=json&include_clients=false"),
                              orjson.loads(_get(first, "/info")), brokers - real)
            addrs += [f"127.0.0.1:{p}" for p in replays.start()]
        stats_mib = len(_get(first, "/stats?format=json&include_clients=false")) / 2**20
        admin, port = _start_admin(addrs, workdir / "admin.log", interval=history_interval)
        idle = _rss_kib(admin.pid)
        time.sleep(history_interval + 2)  # two history samples: every series' rings allocated
        result = {
            "brokers": brokers, "real_brokers": real, "history_interval_s": history_interval, "topics": topics, "channels_per_topic": channels,
            "populate_s": round(populate_s, 1), "broker_stats_json_mib": round(stats_mib, 2),
            # 1.2 s apart: each request gathers (the admin reuses a gathering for 1 s at most)
            "api_stats_topics": _timed(port, "/api/stats/topics", reps, gap=1.2),
            "api_topics": _timed(port, "/api/topics", reps, gap=1.2),
            # back to back: the second of two requests within a second (a navigation after a poll)
            "api_stats_topics_reused": _timed(port, "/api/stats/topics", reps),
            "api_topic_page": _timed(port, "/api/topics/t0500", reps),
        }
        rss, peak = _rss_kib(admin.pid)
        result.update(admin_rss_idle_mib=round(idle[0] / 1024, 1), admin_rss_mib=round(rss / 1024, 1),
                      admin_peak_rss_mib=round(peak / 1024, 1))
        return result
    finally:
        if admin is not None:
            os.kill(admin.pid, signal.SIGTERM)
            admin.wait(30)
        if replays is not None:
            replays.stop()
        for b in started:
            b.stop()


def main(argv: list[str] | None = None) -> int:
    """`nsqmp bench admin`: print one JSON object with the figures."""
    p = argparse.ArgumentParser(prog="nsqmp bench admin", description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", type=int, default=10)
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--channels", type=int, default=10)
    p.add_argument("--real", type=int, default=1, help="real nsqmp brokers; the rest replay the first's /stats")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--history-interval", type=float, default=10.0, help="the admin's sampling interval, s")
    args = p.parse_args(argv)
    if not 1 <= args.real <= args.brokers:
        p.error("--real must be between 1 and --brokers")
    with tempfile.TemporaryDirectory(prefix="nsqmp-bench-admin-") as tmp:
        print(orjson.dumps(run(args.brokers, args.topics, args.channels, args.real, args.reps, Path(tmp),
                                               args.history_interval),
                           option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
