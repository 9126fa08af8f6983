"""The locust load test (loadtest/) against the real broker: a short, bounded, mixed run.

locust runs as a subprocess (it monkey-patches the whole process with gevent) against the
`broker` fixture on 127.0.0.1. Any locust failure fails the test: locust's exit code
(non-zero on any failure or user exception), the CSV stats and failures, and the HTML
report. Publishes are cross-checked against the broker's own /stats.
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from tests.harness import wait_for

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "loadtest" / "locustfile.py"
TOPIC = "locust_t"
BATCH = 10

def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NSQMP_", "LOCUST_", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_mixed_scenario_has_no_failures(broker, tmp_path):
    out = tmp_path / "locust"
    html = tmp_path / "locust.html"
    cmd = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE),
        "--headless", "-u", "6", "-r", "6", "--run-time", "10s", "--stop-timeout", "2",
        "--csv", str(out), "--html", str(html), "--only-summary", "--loglevel", "WARNING",
        "--nsqd-tcp-address", broker.tcp_address, "--scenario", "mixed",
        "--topic", TOPIC, "--channel", "c", "--msg-size", "200", "--batch-size", str(BATCH),
        "--mpub-ratio", "0.5", "--pub-rate", "20", "--rdy", "10", "--process-ms", "2",
        "--req-ratio", "0.05", "--timeout-ratio", "0.02",
        "--msg-timeout-ms", "1000", "--heartbeat-ms", "1000",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60,
                          check=False)
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-6000:]}"
    # locust exits non-zero on any failure or exception, counted over the whole run
    assert proc.returncode == 0, report

    stats = {(r["Type"], r["Name"]): r for r in _rows(Path(f"{out}_stats.csv"))}
    for kind in ("PUB", "MPUB", "MSG"):
        row = stats.get((kind, TOPIC))
        assert row is not None, f"no {kind} row in the stats\n{report}"
        assert int(row["Request Count"]) > 0, row
        assert int(row["Failure Count"]) == 0, row
    # the --req-ratio and --timeout-ratio shares came back
    assert int(stats[("MSG", f"{TOPIC} redelivered")]["Request Count"]) > 0, report
    assert all(int(r["Failure Count"]) == 0 for r in stats.values()), stats
    assert _rows(Path(f"{out}_failures.csv")) == [], report
    assert _rows(Path(f"{out}_exceptions.csv")) == [], report
    assert html.stat().st_size > 0
    assert "<html" in html.read_text(errors="replace").lower()

    # every publish locust counted as OK is in the broker (the CSV is written once a second,
    # so it may count fewer than were sent; never more)
    published = int(stats[("PUB", TOPIC)]["Request Count"]) + BATCH * int(stats[("MPUB", TOPIC)]["Request Count"])

    def topic_count() -> int:
        topics = {t["topic_name"]: t for t in broker.stats(topic=TOPIC)["topics"]}
        return topics[TOPIC]["message_count"] if TOPIC in topics else 0

    wait_for(lambda: topic_count() >= published, timeout=5, what=f"message_count >= {published}")
