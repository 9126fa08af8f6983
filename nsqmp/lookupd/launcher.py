"""Start nsqlookupd (ours) as a subprocess and talk to it: tests, the benchmark, examples.

It runs the drop-in (``python -m nsqmp.lookupd``, nsqlookupd's command line) in its own
process group, on 127.0.0.1 port 0 unless told otherwise, and reads the ports from its
start-up lines. Callers end only what they started: stop() signals the PID it started,
kill() its process group.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from nsqmp.launcher import Daemon

LISTEN = re.compile(r"INFO: (TCP|HTTP): listening on (\S+):(\d+)$", re.MULTILINE)


DROPIN = [sys.executable, "-m", "nsqmp.lookupd"]  # nsqlookupd's command line (nsqmp-nsqlookupd)


class Lookupd(Daemon):
    """``program`` (default: the drop-in) with ``args``; unless ``port0`` is False, the
    addresses not given in ``args`` are 127.0.0.1:0."""

    def __init__(self, *args: str, log_path: Path | None = None, program: list[str] | None = None,
                 port0: bool = True) -> None:
        self.args = list(args)
        self.program = list(program or DROPIN)
        self.port0 = port0
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="lookupd-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None
        self.tcp_port = 0
        self.http_port = 0
        self._log_start = 0

    def command(self) -> list[str]:
        base = list(self.program)
        for name in ("tcp-address", "http-address"):
            if self.port0 and not any(a.lstrip("-").startswith(name) for a in self.args):
                base.append(f"--{name}=127.0.0.1:0")
        return base + self.args

    def start(self, timeout: float = 20.0) -> Lookupd:
        self._log = open(self.log_path, "ab")
        self._log_start = self._log.tell()
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_text()
            ports = {kind: int(port) for kind, _host, port in LISTEN.findall(text)}
            if len(ports) == 2:
                self.tcp_port, self.http_port = ports["TCP"], ports["HTTP"]
                return self
            if self.proc.poll() is not None:
                self._log.close()
                raise RuntimeError(f"lookupd exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"lookupd did not start in {timeout}s:\n{self.log_text()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
