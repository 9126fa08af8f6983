"""Debian's Prometheus server scrapes a running broker and a lookupd every second; its HTTP
API then answers for a counter the test moved by publishing."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest

from nsqmp.client import Connection
from nsqmp.lookupd.launcher import Lookupd
from tests.harness import wait_for

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            answer = json.load(resp)
    except OSError:
        return []
    return answer["data"]["result"] if answer.get("status") == "success" else []


def test_prometheus_scrapes_the_broker_and_the_lookupd(tmp_path, make_broker):
    if not shutil.which(PROMETHEUS):
        pytest.fail("Debian's prometheus is not installed: run `make test` as root (it installs it)")
    lookupd = Lookupd(log_path=tmp_path / "lookupd.log").start()
    prom = None
    log = open(tmp_path / "prometheus.log", "wb")
    try:
        broker = make_broker("--lookupd-tcp-address", f"127.0.0.1:{lookupd.tcp_port}")
        web = _free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: nsqmp\n    static_configs: [{{targets: ['127.0.0.1:{broker.http_port}']}}]\n"
            f"  - job_name: lookupd\n    static_configs: [{{targets: ['127.0.0.1:{lookupd.http_port}']}}]\n")
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{web}"], stdout=log, stderr=subprocess.STDOUT)
        with Connection.connect(broker.tcp_address) as c:
            for i in range(7):
                c.pub("scraped", b"m%d" % i)

        def published():
            result = _query(web, 'nsqmp_topic_messages_total{job="nsqmp",topic="scraped"}')
            return result and float(result[0]["value"][1]) == 7 and result
        wait_for(published, 60, 0.5, what=lambda: "7 messages in Prometheus; its log:\n"
                 + (tmp_path / "prometheus.log").read_text()[-3000:])

        def registered():
            result = _query(web, 'nsqmp_lookupd_topic_producers{job="lookupd",topic="scraped"}')
            return result and float(result[0]["value"][1]) == 1
        wait_for(registered, 30, 0.5, what="the lookupd's producer count in Prometheus")
        # both targets are up and every sample of the broker was taken (no scrape error)
        up = {r["metric"]["job"]: r["value"][1] for r in _query(web, "up")}
        assert up == {"nsqmp": "1", "lookupd": "1"}
        hist = _query(web, 'sum(nsqmp_fire_lateness_seconds_bucket{kind="timeouts",le="+Inf"})')
        assert hist and hist[0]["value"][1] == "0"
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(30)
        log.close()
        lookupd.stop()
