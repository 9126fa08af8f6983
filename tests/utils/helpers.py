"""Running the utilities as a user does: ``python -m nsqmp <tool> ...`` in a process of
its own (its own session), stopped by its PID."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest


class Util:
    """A utility started in the background; its stderr goes to a file."""

    def __init__(self, args: list[str], log: Path, stdin=None, stdout=subprocess.DEVNULL) -> None:
        self.log = log
        self._err = open(log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "nsqmp", *args], stdin=stdin,
                                     stdout=stdout, stderr=self._err, start_new_session=True)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Signal it and wait: its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._close()

    def _close(self) -> None:
        self._err.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.proc.stdin is not None:
            self.proc.stdin.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._close()

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


def run(*args: str, input: bytes | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run a utility to its end."""
    return subprocess.run([sys.executable, "-m", "nsqmp", *args], input=input, capture_output=True,
                          timeout=timeout)


@pytest.fixture
def utils(tmp_path):
    """start(*args, stdin=, stdout=) -> Util; every one still running after the test is killed."""
    started: list[Util] = []

    def start(*args: str, stdin=None, stdout=subprocess.DEVNULL) -> Util:
        u = Util(list(args), tmp_path / f"util{len(started)}.log", stdin, stdout)
        started.append(u)
        return u

    yield start
    for u in started:
        if u.proc.poll() is None:
            u.kill()
