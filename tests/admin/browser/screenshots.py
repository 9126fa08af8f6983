"""Screenshots of the admin's main pages for docs/admin.md, from a real cluster with a few
minutes of varying traffic so the charts have something to show. Run by hand:

    python -m tests.admin.browser.screenshots docs/admin [seconds of traffic, default 150]
"""
from __future__ import annotations

import math
import sys
import tempfile
import threading
import time
from pathlib import Path

from nsqmp.client import Connection
from nsqmp.client.sync import NSQError
from tests.admin.browser.cluster import start_cluster
from tests.admin.browser.driving import open_page

WIDTH = 1440  # the page's max width: a screen operators keep the admin on
SCALE = 0.8  # 1152-pixel-wide PNGs: readable, and all of them a few hundred KB
PAGES = [("topics", "/"), ("topic", "/topics/orders"), ("channel", "/topics/orders/billing"),
         ("nodes", "/nodes"), ("node", None), ("lookup", "/lookup"), ("counter", "/counter")]


def publisher(address: str, stop: threading.Event, base: float) -> None:
    """Publish to orders at a rate that swings between about base/2 and 1.5 * base."""
    with Connection.connect(address) as c:
        start = time.monotonic()
        while not stop.is_set():
            t = time.monotonic() - start
            n = max(1, int(base * (1 + 0.5 * math.sin(t / 20)) / 5))
            c.mpub("orders", [b"order"] * n)
            time.sleep(0.2)


def worker(address: str, stop: threading.Event, client_id: str) -> None:
    """Consume billing at a steady pace, finishing everything."""
    with Connection.connect(address) as c:
        c.identify(client_id=client_id, hostname=f"{client_id}.example", user_agent="go-nsq/1.1.0", deflate=False)
        c.sub("orders", "billing", rdy=5)
        c.sock.settimeout(None)  # a timeout mid-frame would lose the frame's start
        while not stop.is_set():
            try:
                msg = c.read_message()
            except NSQError:  # a FIN the broker no longer knew about: keep consuming
                continue
            except (OSError, EOFError):  # the broker stopped: we are done
                return
            c.fin(msg.id)
            time.sleep(0.025)


def extras(brokers) -> None:
    """A few more topics, so the list looks like a cluster: a backlog, a paused channel."""
    for name, channels, count, where in [("payments", ["ledger", "fraud-check"], 1200, brokers),
                                         ("clicks", ["sessions"], 40000, brokers[:1]),
                                         ("emails", ["sender"], 350, brokers[1:])]:
        for b in where:
            assert b.http("POST", f"/topic/create?topic={name}")[0] == 200
            for ch in channels:
                assert b.http("POST", f"/channel/create?topic={name}&channel={ch}")[0] == 200
            with Connection.connect(b.tcp_address) as c:
                for i in range(0, count, 500):
                    c.mpub(name, [b"x" * 64] * min(500, count - i))
    assert brokers[1].http("POST", "/channel/pause?topic=emails&channel=sender")[0] == 200


def viewport(browser, height: int) -> None:
    """Lay the page out WIDTH x height CSS pixels, drawn at SCALE (headless Chromium clamps
    window resizes to its screen; the DevTools protocol does not)."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": WIDTH, "height": height, "deviceScaleFactor": SCALE, "mobile": False})


def chromium():
    """Headless Chromium, WIDTH wide, scrollbars hidden."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", f"--window-size={WIDTH},800", f"--user-data-dir={tempfile.mkdtemp()}"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def shoot(browser, cluster, out: Path) -> None:
    """One PNG per page of PAGES, cut to the page's height."""
    for name, path in PAGES:
        open_page(browser, cluster.admin, path or f"/nodes/{cluster.brokers[0].http_address}")
        viewport(browser, 1400)
        time.sleep(3)  # a couple of polls: rates and charts settle
        bottom = browser.execute_script(
            "return Math.ceil(document.querySelector('.page').getBoundingClientRect().bottom)")
        viewport(browser, max(480, min(bottom, 1100)))
        time.sleep(0.5)
        browser.save_screenshot(str(out / f"{name}.png"))
        print(out / f"{name}.png", flush=True)


def main(out: Path, seconds: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cluster = start_cluster(Path(tempfile.mkdtemp(prefix="nsqmp-shots-")), "--history-interval", "2",
                            "--refresh-interval", "2")
    stop = threading.Event()
    threads = [threading.Thread(target=publisher, args=(b.tcp_address, stop, rate), daemon=True)
               for b, rate in zip(cluster.brokers, (40, 25))]
    threads += [threading.Thread(target=worker, args=(b.tcp_address, stop, f"worker-{i}"), daemon=True)
                for i, b in enumerate(cluster.brokers)]
    browser = None
    try:
        extras(cluster.brokers)
        for t in threads:
            t.start()
        browser = chromium()
        time.sleep(seconds)
        shoot(browser, cluster, out)
    finally:
        if browser is not None:
            browser.quit()
        stop.set()
        print("\n".join(cluster.stop()))
        for t in threads:
            if t.is_alive():
                t.join(5)


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 150.0)
