"""locust's own `--host tcp://HOST:PORT` names the broker (issue 21), as a locust user
expects; `--nsqd-tcp-address` still works and wins; an http:// host is refused. Real
headless locust runs against the `broker` fixture, as tests/loadtest/test_locust.py."""
from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.loadtest.test_locust import LOCUSTFILE, ROOT, _env

# loadtest/ is not a package; nsq_address imports no locust (which would monkey-patch this
# process with gevent: the other tests' blocking sockets would turn non-blocking)
_spec = importlib.util.spec_from_file_location("nsq_address", ROOT / "loadtest" / "nsq_address.py")
assert _spec is not None and _spec.loader is not None
nsq_address = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nsq_address)


def _locust(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "locust"
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2", "-r", "2",
           "--run-time", "3s", "--stop-timeout", "2", "--csv", str(out), "--only-summary", "--loglevel", "INFO",
           "--scenario", "publish", "--pub-rate", "20", "--batch-size", "5", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60, check=False)
    stats: dict = {}
    if Path(f"{out}_stats.csv").exists():
        with open(f"{out}_stats.csv", newline="") as f:
            stats = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    return proc, stats


def _published(broker, topic: str) -> int:
    topics = {t["topic_name"]: t for t in broker.stats(topic=topic)["topics"]}
    return topics[topic]["message_count"] if topic in topics else 0


def test_locust_host_names_the_broker(broker, tmp_path):
    """`--host tcp://HOST:PORT` alone: the publishers reach the broker, nothing fails."""
    proc, stats = _locust(tmp_path, "--host", f"tcp://{broker.tcp_address}", "--topic", "host_t")
    report = f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, report
    assert f"against {broker.tcp_address}" in proc.stderr, report
    pubs = stats[("PUB", "host_t")]
    assert int(pubs["Request Count"]) > 0 and int(pubs["Failure Count"]) == 0, report
    assert _published(broker, "host_t") > 0


def test_nsqd_tcp_address_wins_over_host(broker, tmp_path):
    """Both given: --nsqd-tcp-address is used (the --host here points nowhere)."""
    proc, stats = _locust(tmp_path, "--host", "tcp://127.0.0.1:9", "--nsqd-tcp-address", broker.tcp_address,
                          "--topic", "flag_t")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert int(stats[("PUB", "flag_t")]["Request Count"]) > 0
    assert _published(broker, "flag_t") > 0


def test_an_http_host_is_refused(tmp_path):
    """The users speak NSQ's TCP protocol: http://... stops locust with a clear line, exit 2."""
    proc, _ = _locust(tmp_path, "--host", "http://127.0.0.1:4151")
    assert proc.returncode == 2
    assert "--host must be tcp://HOST:PORT" in proc.stderr


@pytest.mark.parametrize("flag, host, want", [
    ("10.0.0.5:4150", "tcp://127.0.0.1:1", "10.0.0.5:4150"),
    (None, "tcp://broker.example:4150", "broker.example:4150"),
    (None, "tcp://[::1]:4150/", "[::1]:4150"),
    (None, "127.0.0.1:4150", "127.0.0.1:4150"),
    (None, None, "127.0.0.1:4150"),
    (None, "", "127.0.0.1:4150"),
])
def test_broker_address(flag, host, want):
    assert nsq_address.broker_address(flag, host) == want


@pytest.mark.parametrize("host", ["http://127.0.0.1:4151", "tcp://nohost", "tcp://:4150", "tcp://h:port"])
def test_broker_address_refuses(host):
    with pytest.raises(ValueError, match="--host must be tcp://HOST:PORT"):
        nsq_address.broker_address(None, host)
