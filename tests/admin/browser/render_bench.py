"""The topic list page's time in a real browser over issue 22's big cluster (10 brokers x
1,000 topics x 10 channels; `nsqmp bench admin`'s set-up: one real broker, the rest replay
its /stats). `nsqmp bench admin` times the admin's answers; this times what the operator
waits for: from navigation to the page showing every topic, and one poll (fetch + render in
place). Run by hand:

    python -m tests.admin.browser.render_bench [--brokers 10] [--topics 1000] [--channels 10]
        [--history-interval 2] [--history-window 720]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import orjson
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from nsqmp.bench.admin import Replays, _get, _populate, _rss_kib, _start_admin
from nsqmp.launcher import Broker


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--window-size=1440,900", f"--user-data-dir={tempfile.mkdtemp()}"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def measure(driver, url: str, topics: int, polls: int) -> dict:
    """Navigation -> every row shown (ms), and `polls` refreshes' fetch + render (ms)."""
    loads = []
    for _ in range(3):
        driver.get(url)
        while driver.execute_script("return document.querySelectorAll('#topics-table tbody tr').length") < topics:
            time.sleep(0.01)
        loads.append(driver.execute_script("return performance.now()"))  # ms since navigation start
    refreshes, fetches = [], []
    seen = driver.execute_script("return Number(document.body.dataset.loaded)")
    while len(refreshes) < polls:
        n = driver.execute_script("return Number(document.body.dataset.loaded)")
        if n > seen:
            seen = n
            refreshes.append(float(driver.execute_script("return document.body.dataset.refreshMs")))
            fetches.append(driver.execute_script(  # the API request's own time (Resource Timing)
                "const e = performance.getEntriesByType('resource')"
                ".filter((r) => r.name.includes('/api/stats/topics'));"
                "return e[e.length - 1].duration;"))
        time.sleep(0.05)
    renders = [r - f for r, f in zip(refreshes, fetches)]
    return {"page_shown_ms_median": round(statistics.median(loads)), "page_shown_ms_max": round(max(loads)),
            "poll_fetch_render_ms_median": round(statistics.median(refreshes)),
            "poll_fetch_render_ms_max": round(max(refreshes)),
            "poll_api_fetch_ms_median": round(statistics.median(fetches)),
            "poll_render_ms_median": round(statistics.median(renders)), "poll_render_ms_max": round(max(renders))}


def main() -> None:
    p = argparse.ArgumentParser(prog="render_bench")
    p.add_argument("--brokers", type=int, default=10)
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--channels", type=int, default=10)
    p.add_argument("--polls", type=int, default=5)
    # the sampler every 2 s (5x the default) so that its gatherings meet the page's polls; the
    # window keeps the default's 360 slots per series (3600 s / 10 s), so the history rings take
    # what they take at the defaults (~25 MB here) and the memory figure is the default set-up's
    p.add_argument("--history-interval", type=float, default=2.0)
    p.add_argument("--history-window", type=float, default=720.0)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nsqmp-render-bench-"))
    real = Broker(work / "data0", "--acceptors", "1", "--routers", "1", log_path=work / "broker.log").start()
    replays = admin = driver = None
    try:
        asyncio.run(_populate(real.http_port, args.topics, args.channels))
        first = real.http_port
        replays = Replays(_get(first, "/stats?format=json"), _get(first, "/stats?format=json&include_clients=false"),
                          orjson.loads(_get(first, "/info")), args.brokers - 1)
        addrs = [real.http_address] + [f"127.0.0.1:{port}" for port in replays.start()]
        admin, port = _start_admin(addrs, work / "admin.log", interval=args.history_interval,
                                   window=args.history_window)
        driver = browser()
        result = {"brokers": args.brokers, "topics": args.topics, "channels_per_topic": args.channels,
                  "history_interval_s": args.history_interval, "history_window_s": args.history_window,
                  **measure(driver, f"http://127.0.0.1:{port}/", args.topics, args.polls)}
        rss, peak = _rss_kib(admin.pid)
        result.update(admin_rss_mib=round(rss / 1024, 1), admin_peak_rss_mib=round(peak / 1024, 1))
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    finally:
        if driver is not None:
            driver.quit()
        if admin is not None:
            os.kill(admin.pid, signal.SIGTERM)
            admin.wait(30)
        if replays is not None:
            replays.stop()
        real.stop()


if __name__ == "__main__":
    main()
