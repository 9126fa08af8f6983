"""The broker's statsd push received by a real statsd daemon (Etsy's, from npm: installed in
tests/metrics/statsd by `make test`), read back through its management interface."""
from __future__ import annotations

import os
import re
import signal
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from nsqmp.client import Connection
from tests.harness import wait_for

STATSD = Path(__file__).parent / "statsd" / "node_modules" / "statsd" / "stats.js"
_ENTRY = re.compile(r"'([^']+)': (-?[0-9.e+]+)")


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Statsd:
    """One statsd daemon on 127.0.0.1: UDP `port` for metrics, TCP `mgmt` for its commands."""

    def __init__(self, tmp_path: Path) -> None:
        if not STATSD.exists() or shutil.which("node") is None:
            pytest.fail(f"statsd is not installed ({STATSD}): run `make test` (npm ci in tests/metrics/statsd)")
        self.port, self.mgmt = _free_port(socket.SOCK_DGRAM), _free_port(socket.SOCK_STREAM)
        config = tmp_path / "statsd.js"
        # no backend, no flush during the test: the counters add up every push until read
        config.write_text(f'{{ port: {self.port}, address: "127.0.0.1", mgmt_port: {self.mgmt}, '
                          f'mgmt_address: "127.0.0.1", backends: [], flushInterval: 3600000 }}\n')
        self.log = open(tmp_path / "statsd.log", "wb")
        self.proc = subprocess.Popen(["node", str(STATSD), str(config)], stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self._listening, 20, what="statsd's management port")

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.mgmt), timeout=1).close()
            return True
        except OSError:
            return False

    def read(self, command: str) -> dict[str, float]:
        """The daemon's answer to `counters` or `gauges`, as name -> value."""
        with socket.create_connection(("127.0.0.1", self.mgmt), timeout=5) as s:
            s.sendall(command.encode() + b"\n")
            text = b""
            while not text.rstrip().endswith(b"END"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                text += chunk
        return {name: float(value) for name, value in _ENTRY.findall(text.decode())}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture
def statsd(tmp_path):
    daemon = Statsd(tmp_path)
    yield daemon
    daemon.stop()


def test_the_daemon_receives_nsqds_names_and_the_counters_add_up(statsd, make_broker):
    b = make_broker("--statsd-address", f"127.0.0.1:{statsd.port}", "--statsd-interval", "1s",
                    "--statsd-prefix", "nsq.%s", "--broadcast-address", "box.local", "--statsd-exclude-ephemeral")
    prefix = "nsq.box_local_0."  # --http-address 127.0.0.1:0: nsqd takes the flag's port
    with Connection.connect(b.tcp_address) as c:
        c.pub("orders", b"a")
        c.pub("orders#ephemeral", b"e")
        b.http("POST", "/channel/create?topic=orders&channel=billing")
        for i in range(9):  # some before a push, some after: the differences must add up
            c.pub("orders", b"x" * (i + 1))
            time.sleep(0.15)
    counters = wait_for(lambda: (got := statsd.read("counters")).get(f"{prefix}topic.orders.message_count") == 10
                        and got, 15, what=lambda: f"10 messages counted: {statsd.read('counters')}")
    assert counters[f"{prefix}topic.orders.message_bytes"] == 1 + sum(range(1, 10))
    assert counters[f"{prefix}topic.orders.channel.billing.message_count"] >= 1
    assert counters[f"{prefix}topic.orders.channel.billing.requeue_count"] == 0
    assert not [name for name in counters if "ephemeral" in name]
    gauges = statsd.read("gauges")
    assert gauges[f"{prefix}topic.orders.channel.billing.clients"] == 0
    assert gauges[f"{prefix}topic.orders.channel.billing.depth"] == counters[
        f"{prefix}topic.orders.channel.billing.message_count"]
    assert gauges[f"{prefix}mem.heap_in_use_bytes"] > 0  # --statsd-mem-stats is on by default
    assert f"{prefix}mem.gc_runs" in counters


def test_a_restarted_acceptor_0_pushes_differences_not_totals_again(statsd, make_broker):
    b = make_broker("--statsd-address", f"127.0.0.1:{statsd.port}", "--statsd-interval", "1s",
                    "--statsd-prefix", "p", "--statsd-mem-stats=false")
    name = "p.topic.kept.message_count"
    with Connection.connect(b.tcp_address) as c:
        for _ in range(5):
            c.pub("kept", b"m")
    wait_for(lambda: statsd.read("counters").get(name) == 5, 15, what="5 messages counted")
    old = b.children()["nsqmp acceptor 0"]
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: b.children().get("nsqmp acceptor 0") not in (None, old), 15, what="acceptor 0 restarted")
    b.wait_ping()
    with Connection.connect(b.tcp_address) as c:
        c.pub("kept", b"m")
    wait_for(lambda: statsd.read("counters").get(name) == 6, 15, what=lambda: f"6: {statsd.read('counters')}")
    time.sleep(2.5)  # two more pushes: nothing counted twice
    assert statsd.read("counters")[name] == 6
