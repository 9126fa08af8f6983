"""NSQ's own nsqd and nsqlookupd 1.3.0 with the interface of nsqmp's launchers (Broker,
Lookupd), so the browser tests can run the same cluster on real NSQ. The binaries come
from $NSQ_BIN or PATH (build them with ../shared/tools/build-nsq.sh); CI has none.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


from nsqmp.launcher import Daemon


def go_binary(name: str) -> str | None:
    """The Go daemon `name` from $NSQ_BIN or PATH, or None."""
    where = os.environ.get("NSQ_BIN")
    if where and (Path(where) / name).is_file():
        return str(Path(where) / name)
    return shutil.which(name)


def have_go_nsq() -> bool:
    return bool(go_binary("nsqd") and go_binary("nsqlookupd"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GoDaemon(Daemon):
    """A Go daemon on free ports, ready once its /ping answers."""

    name = ""

    def __init__(self, *args: str, log_path: Path) -> None:
        self.args = list(args)
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None
        self.tcp_port = _free_port()
        self.http_port = _free_port()

    def start(self, timeout: float = 20.0):
        cmd = [go_binary(self.name), f"-tcp-address=127.0.0.1:{self.tcp_port}",
               f"-http-address=127.0.0.1:{self.http_port}", "-broadcast-address=127.0.0.1", *self.args]
        self._log = open(self.log_path, "ab")
        self._log_start = self._log.tell()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.close()
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{self.log_text()}")
            try:
                if self.http("GET", "/ping")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"{self.name} did not answer /ping:\n{self.log_text()}")


class GoNsqd(GoDaemon):
    """nsqd 1.3.0: Broker's interface (start, stop, http, stats, addresses)."""

    name = "nsqd"

    def __init__(self, data_path: Path, *args: str, log_path: Path) -> None:
        Path(data_path).mkdir(parents=True, exist_ok=True)
        super().__init__(f"-data-path={data_path}", *args, log_path=log_path)

    def stats(self, **params: str) -> dict:
        stats = self.get("/stats?" + "&".join(f"{k}={v}" for k, v in {"format": "json", **params}.items()))
        if stats["topics"] is None:
            stats["topics"] = []
        return stats


class GoLookupd(GoDaemon):
    """nsqlookupd 1.3.0: Lookupd's interface."""

    name = "nsqlookupd"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
