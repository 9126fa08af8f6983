"""Start the real broker as a subprocess and talk to it (tests, bench suite, examples).

The broker runs in its own process group with its own data dir, on port 0 unless told
otherwise (the ports are read from its start-up lines). Callers end only what they
started: the supervisor by its PID, its children by the PIDs read from /proc, or the
process group this module created.
"""
from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

_LISTEN = re.compile(r"(TCP|HTTP): listening on ([\d.]+):(\d+)")


class Daemon:
    """What every daemon started here shares: its log, stopping it, its addresses.

    Subclasses set ``proc``, ``log_path``, ``_log``, ``_log_start``, ``tcp_port`` and
    ``http_port`` in their start().
    """

    proc: subprocess.Popen | None
    log_path: Path
    _log: IO[bytes]
    _log_start: int
    tcp_port: int
    http_port: int

    def log_text(self) -> str:
        """What the process wrote since this start()."""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_start)
            return f.read().decode(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the process we started (SIGTERM) and wait; returns its exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        """Abandon it: SIGKILL every process of the group we created."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        self._log.close()

    def http(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
             timeout: float = 10.0) -> tuple[int, bytes, dict[str, str]]:
        """One request to its HTTP port: (status, body, headers)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read(), dict(resp.getheaders())
        finally:
            conn.close()

    def get(self, path: str) -> dict:
        """GET a JSON endpoint that must answer 200."""
        import orjson

        status, body, _ = self.http("GET", path)
        assert status == 200, (path, status, body)
        return orjson.loads(body)

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"


class Broker(Daemon):
    def __init__(self, data_path: Path, *args: str, log_path: Path | None = None) -> None:
        self.data_path = Path(data_path)
        self.args = list(args)
        self.log_path = log_path or self.data_path.parent / f"{self.data_path.name}.log"
        self.proc: subprocess.Popen | None = None
        self.tcp_port = 0
        self.http_port = 0
        self.cwd: str | None = None  # where the broker starts (None: here)

    # -- life ---------------------------------------------------------------------------
    def command(self) -> list[str]:
        args = self.args
        base = [sys.executable, "-m", "nsqmp", "serve", "--data-path", str(self.data_path)]
        if not any(a.startswith("--tcp-address") for a in args):
            base += ["--tcp-address", "127.0.0.1:0"]
        if not any(a.startswith("--http-address") for a in args):
            base += ["--http-address", "127.0.0.1:0"]
        if not any(a.startswith("--https-address") for a in args):
            base += ["--https-address", "127.0.0.1:0"]  # listened on only when TLS is configured
        return base + args

    def start(self, timeout: float = 20.0) -> "Broker":
        self._log = open(self.log_path, "ab")
        self._log_start = self._log.tell()
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=self.cwd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_text()
            if self._ready(text):
                for kind, _host, port in _LISTEN.findall(text):
                    if kind == "TCP":
                        self.tcp_port = int(port)
                    else:
                        self.http_port = int(port)
                return self
            if self.proc.poll() is not None:
                self._log.close()
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start in {timeout}s:\n{self.log_text()}")

    def _ready(self, text: str) -> bool:
        """The supervisor's line once every child announced READY."""
        return "nsqmp ready" in text

    # -- processes ------------------------------------------------------------------------
    def children(self) -> dict[str, int]:
        """Process title -> PID of the supervisor's children."""
        assert self.proc is not None
        out = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                if ppid != self.proc.pid:
                    continue
                title = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            out[title] = int(entry)
        return out

    # -- HTTP ------------------------------------------------------------------------------
    def stats(self, **params: str) -> dict:
        import orjson
        from urllib.parse import urlencode

        query = urlencode({"format": "json", **params})
        status, body, _ = self.http("GET", f"/stats?{query}")
        assert status == 200, body
        stats = orjson.loads(body)
        if stats["topics"] is None:  # nsqd's answer for a topic it does not have; callers iterate
            stats["topics"] = []
        return stats

    def wait_ping(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.http("GET", "/ping", timeout=1.0)[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("/ping did not answer OK")
            time.sleep(0.05)


class Nsqd(Broker):
    """A real nsqd binary at ``program``, started with the same flags as the broker (the
    benchmarks that report nsqd's figure beside ours). Ready once it logged both ports
    and answers /ping."""

    def __init__(self, program: str, data_path: Path, *args: str, log_path: Path | None = None) -> None:
        super().__init__(data_path, *args, log_path=log_path)
        self.program = program

    def command(self) -> list[str]:
        self.data_path.mkdir(parents=True, exist_ok=True)  # nsqd does not create it
        flags = super().command()[4:]  # what follows "python -m nsqmp serve"
        return [self.program] + flags

    def _ready(self, text: str) -> bool:
        ports = {kind: int(port) for kind, _host, port in _LISTEN.findall(text)}
        if len(ports) < 2:
            return False
        self.http_port = ports["HTTP"]
        try:
            return self.http("GET", "/ping", timeout=1.0)[0] == 200
        except OSError:
            return False
