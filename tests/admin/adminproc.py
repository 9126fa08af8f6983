"""The admin as a subprocess (`python -m nsqmp admin ...`) and a small HTTP client for it.

tests/admin/browser/ (helper admin-ui) may use it too.
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

import orjson

_LISTEN = re.compile(r"HTTP: listening on ([\d.]+):(\d+)")


class Admin:
    """`nsqmp admin <args>` (or `nsqmp-nsqadmin`'s entry with go=True) on 127.0.0.1:<free port>."""

    def __init__(self, log_path: Path, *args: str, go: bool = False) -> None:
        self.args = list(args)
        self.go = go
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def command(self) -> list[str]:
        if self.go:
            return [sys.executable, "-c", "from nsqmp.admin.cli import nsqadmin_main; nsqadmin_main()",
                    "-http-address=127.0.0.1:0", *self.args]
        return [sys.executable, "-m", "nsqmp", "admin", "--http-address", "127.0.0.1:0", *self.args]

    def start(self, timeout: float = 20.0) -> "Admin":
        self._log = open(self.log_path, "ab")
        start = self._log.tell()
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=dict(os.environ))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = _LISTEN.search(self.log_path.read_bytes()[start:].decode(errors="replace"))
            if found:
                self.port = int(found.group(2))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"admin exited {self.proc.returncode}:\n{self.log_text()}")
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"admin did not listen:\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    # -- HTTP ------------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: object = None, headers: dict | None = None,
                timeout: float = 20.0) -> tuple[int, bytes, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = orjson.dumps(body) if body is not None and not isinstance(body, bytes) else body
            conn.request(method, path, body=data, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read(), dict(resp.getheaders())
        finally:
            conn.close()

    def get(self, path: str, **headers: str) -> dict:
        status, body, _ = self.request("GET", path, headers=headers)
        assert status == 200, (path, status, body)
        return orjson.loads(body)

    def token(self, base: str = "") -> str:
        return self.get(base + "/api/config")["csrf_token"]

    def act(self, method: str, path: str, body: object = None, user: str | None = None,
            header: str = "X-Forwarded-User", base: str = "") -> tuple[int, dict]:
        """A mutating request as the UI sends it (with the CSRF token)."""
        headers = {"X-NSQMP-CSRF-Token": self.token(base), "Content-Type": "application/json"}
        if user is not None:
            headers[header] = user
        status, raw, _ = self.request(method, base + path, body, headers)
        return status, orjson.loads(raw) if raw else {}
