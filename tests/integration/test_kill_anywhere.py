"""SIGKILL of the supervisor at any instant leaves nothing behind (issue 20).

A seeded random delay spreads the kills over the broker's start-up (before the port is
bound, while routers and the timer fork, while they boot, while acceptors fork, just
after ready) and over a respawn (a child is SIGKILLed, then the supervisor a random
0-20 ms later: before, during or after the replacement's fork). Each try checks that
every process of the broker's session is gone within KILL_GRACE and that the next broker
starts on the same ports and data directory at once (the next try is that broker; a
start that fails on its own fails the test). At the end a broker starts fully and the
killed runs' shared memory is gone. The children are found by session id (the broker
runs in its own session and nothing in it calls setsid), so a child killed between its
fork and its first log line counts too.
"""
from __future__ import annotations

import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsqmp.bench.death import session_pids

# how long the processes of a killed broker may take to be gone (they take milliseconds;
# this is for a loaded CI machine)
KILL_GRACE = 3.0


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _children(pid: int) -> dict[str, int]:
    """Title -> pid of the supervisor's children."""
    out = {}
    for child in session_pids(pid):
        try:
            stat = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            title = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(stat[1]) == pid:
            out[title] = child
    return out


class Runs:
    """Brokers started one after the other on the same ports and data directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.data = tmp_path / "data"
        self.log_path = tmp_path / "broker.log"
        self.tcp, self.http = _free_ports(2)
        self.killed: list[int] = []

    def start(self) -> subprocess.Popen:
        self.log = open(self.log_path, "wb")
        cmd = [sys.executable, "-m", "nsqmp", "serve", "--data-path", str(self.data),
               "--tcp-address", f"127.0.0.1:{self.tcp}", "--http-address", f"127.0.0.1:{self.http}",
               "--acceptors", "2", "--routers", "2"]
        return subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, proc: subprocess.Popen, timeout: float = 30.0) -> float:
        t = time.monotonic()
        while "nsqmp ready" not in self.text():
            assert proc.poll() is None, f"the broker exited with {proc.returncode}:\n{self.text()}"
            assert time.monotonic() - t < timeout, self.text()
            time.sleep(0.005)
        return time.monotonic() - t

    def kill(self, proc: subprocess.Popen, where: str) -> None:
        """SIGKILL the supervisor; every process of its session must be gone."""
        assert proc.poll() is None, f"the broker exited on its own ({where}):\n{self.text()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        self.log.close()
        self.killed.append(proc.pid)
        deadline = time.monotonic() + KILL_GRACE
        while left := session_pids(proc.pid):
            if time.monotonic() > deadline:
                for pid in left:  # end what we started before failing
                    os.kill(pid, signal.SIGKILL)
                pytest.fail(f"orphans of the supervisor killed {where}: {left}\n{self.text()}")
            time.sleep(0.002)

    def finish(self) -> None:
        """A broker starts fully on the same ports, answers, and the killed runs' shared
        memory is gone."""
        proc = self.start()
        try:
            self.wait_ready(proc)
            socket.create_connection(("127.0.0.1", self.tcp), timeout=5).close()
            left = [e for e in os.listdir("/dev/shm") for pid in self.killed if e.startswith(f"nsqmp.{pid}.")]
            assert not left, left
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, self.text()
            self.log.close()


def kill_during_start_up(runs: Runs, rng: random.Random, tries: int) -> None:
    proc = runs.start()
    span = runs.wait_ready(proc) * 1.2  # the start-up's length here and now, and a bit after
    runs.kill(proc, "after ready")
    for i in range(tries):
        proc = runs.start()
        delay = rng.uniform(0, span)
        time.sleep(delay)
        runs.kill(proc, f"{delay * 1e3:.1f} ms into start-up (try {i})")


def kill_during_respawn(runs: Runs, rng: random.Random, tries: int) -> None:
    for i in range(tries):
        proc = runs.start()
        runs.wait_ready(proc)
        title, victim = rng.choice(sorted(_children(proc.pid).items()))
        delay = rng.uniform(0, 0.02)
        os.kill(victim, signal.SIGKILL)
        time.sleep(delay)
        runs.kill(proc, f"{delay * 1e3:.1f} ms after {title} was killed (try {i})")


def test_kill_anywhere_leaves_nothing(tmp_path):
    """About 100 kills, seeded: 80 over start-up, 20 over a respawn."""
    runs = Runs(tmp_path)
    rng = random.Random(20)
    kill_during_start_up(runs, rng, 80)
    kill_during_respawn(runs, rng, 20)
    runs.finish()


@pytest.mark.slow
def test_kill_anywhere_many_more(tmp_path):
    """The same with another seed, 300 + 100 kills."""
    runs = Runs(tmp_path)
    rng = random.Random(2020)
    kill_during_start_up(runs, rng, 300)
    kill_during_respawn(runs, rng, 100)
    runs.finish()


def _pub(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"  V2" + b"PUB restarts\n" + struct.pack(">I", 5) + b"hello")
        data = b""
        while len(data) < 10:
            chunk = s.recv(64)
            assert chunk, "the broker closed the connection"
            data += chunk
        return data[8:10]


@pytest.mark.slow
def test_sigkill_then_restart_100_times(tmp_path):
    """As a client library's harness does: start on fixed ports, a client publishes, SIGKILL,
    wait for the process it started, start the next at once. Never a port in use, never
    an orphan, and once the killed supervisor is reaped nothing accepts on its port."""
    runs = Runs(tmp_path)
    for i in range(100):
        proc = runs.start()
        runs.wait_ready(proc)
        assert _pub(runs.tcp) == b"OK"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)  # what the harness waits for; then it starts the next one at once
        refused = False
        deadline = time.monotonic() + 0.05
        while not refused and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", runs.tcp), timeout=0.05).close()
            except OSError:
                refused = True
        assert refused, f"try {i}: the port still accepted 50 ms after the supervisor was reaped"
        runs.log.close()
        runs.killed.append(proc.pid)
        deadline = time.monotonic() + KILL_GRACE
        while left := session_pids(proc.pid):
            assert time.monotonic() < deadline, f"try {i}: orphans {left}"
            time.sleep(0.002)
    runs.finish()
