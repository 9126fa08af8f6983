"""The two clients `make bench` can load a broker with, behind one interface.

- ``NsqTools``: nsq 1.3.0's own ``bench_writer`` and ``bench_reader`` (built by
  ``../shared/tools/build-nsq.sh``). They have no connection-count flag: each opens one
  connection per Go ``GOMAXPROCS``, so the count is set through that variable. Both print
  one ``log`` line on stderr (``duration: 8.0001s - 34.332mb/s - 180000.000ops/s -
  5.555us/op``), which is parsed here. ``bench_writer`` sends ``MPUB`` even at
  ``--batch-size 1`` (``nsq.MultiPublish`` of a one-message batch: bench/bench_writer in
  nsq 1.3.0), so its "PUB" rows are one-message MPUBs, one round trip each.
- ``OwnClient``: nsqmp's bench client (``nsqmp/bench/tool.py``, its loops in
  ``native/bench/client.c``), which sends a real ``PUB`` at batch size 1.

Both return what ``tool.run`` returns: a dict with at least ``messages``, ``seconds`` and
``msgs_per_sec``.
"""
from __future__ import annotations

import os
import re
import subprocess
import threading
from types import SimpleNamespace
from typing import Protocol

from nsqmp.bench.tool import BenchFailed, run

_LINE = re.compile(r"duration: (\S+) - ([\d.]+)mb/s - ([\d.]+)ops/s")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_PART = re.compile(r"([\d.]+)(h|ms|us|µs|ns|m|s)")


def go_duration(text: str) -> float:
    """Seconds of a Go time.Duration's String() (``8.0001s``, ``1m0.5s``, ``950ms``)."""
    parts = _GO_PART.findall(text)
    if not parts:
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def parse_result(kind: str, output: str, size: int = 200) -> dict:
    """A bench_writer/bench_reader run's figures from its output (the last result line)."""
    found = _LINE.findall(output)
    if not found:
        raise BenchFailed(f"bench_{kind} printed no result: {output.strip()[-500:]!r}")
    duration, _mb, ops = found[-1]
    seconds, rate = go_duration(duration), float(ops)
    return {"kind": kind, "messages": round(rate * seconds), "seconds": round(seconds, 3),
            "msgs_per_sec": round(rate, 1), "mb_per_sec": round(rate * size / 1e6, 3),
            "slowest_answer_ms": None}


class Client(Protocol):
    """What a workload asks of a client: publish for runfor, drain for runfor, both at once."""

    name: str
    size: int  # body bytes of each message

    def writer(self, addr: str, topic: str, conns: int, batch: int, runfor: float) -> dict: ...

    def reader(self, addr: str, topic: str, channel: str, conns: int, runfor: float) -> dict: ...

    def mixed(self, addr: str, topic: str, channel: str, writers: int, batch: int, readers: int,
              runfor: float) -> dict: ...


class NsqTools:
    """nsq's bench_writer and bench_reader, one subprocess per run."""

    def __init__(self, writer: str, reader: str, size: int = 200) -> None:
        self.writer_path, self.reader_path, self.size = writer, reader, size
        self.name = "nsq 1.3.0's bench_writer/bench_reader"

    def _start(self, path: str, conns: int, flags: list[str]) -> subprocess.Popen:
        env = {**os.environ, "GOMAXPROCS": str(conns)}  # one connection per P
        return subprocess.Popen([path, *flags], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def _finish(self, kind: str, proc: subprocess.Popen, runfor: float) -> dict:
        try:
            out, _ = proc.communicate(timeout=runfor + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            raise BenchFailed(f"bench_{kind} did not finish: {out.strip()[-500:]!r}") from None
        if proc.returncode != 0:
            raise BenchFailed(f"bench_{kind} exited with {proc.returncode}: {out.strip()[-500:]!r}")
        return parse_result(kind, out, self.size)

    def _writer_flags(self, addr: str, topic: str, batch: int, runfor: float) -> list[str]:
        return [f"--nsqd-tcp-address={addr}", f"--topic={topic}", f"--size={self.size}",
                f"--batch-size={batch}", f"--runfor={runfor:g}s"]

    def _reader_flags(self, addr: str, topic: str, channel: str, runfor: float) -> list[str]:
        return [f"--nsqd-tcp-address={addr}", f"--topic={topic}", f"--channel={channel}",
                f"--size={self.size}", "--rdy=2500", f"--runfor={runfor:g}s"]

    def writer(self, addr: str, topic: str, conns: int, batch: int, runfor: float) -> dict:
        """bench_writer with GOMAXPROCS=conns."""
        proc = self._start(self.writer_path, conns, self._writer_flags(addr, topic, batch, runfor))
        return {**self._finish("writer", proc, runfor), "conns": conns, "batch_size": batch}

    def reader(self, addr: str, topic: str, channel: str, conns: int, runfor: float) -> dict:
        """bench_reader with GOMAXPROCS=conns (RDY 2500, FIN per message)."""
        proc = self._start(self.reader_path, conns, self._reader_flags(addr, topic, channel, runfor))
        return {**self._finish("reader", proc, runfor), "conns": conns}

    def mixed(self, addr: str, topic: str, channel: str, writers: int, batch: int, readers: int,
              runfor: float) -> dict:
        """Both tools at once; the writer's result with the reader's rate as msgs_out_per_sec."""
        r = self._start(self.reader_path, readers, self._reader_flags(addr, topic, channel, runfor))
        w = self._start(self.writer_path, writers, self._writer_flags(addr, topic, batch, runfor))
        try:
            wrote = self._finish("writer", w, runfor)
        finally:
            read = self._finish("reader", r, runfor)
        return {**wrote, "conns": writers, "batch_size": batch, "msgs_out_per_sec": read["msgs_per_sec"]}


class OwnClient:
    """nsqmp's bench client (nsqmp/bench/tool.py): one process per connection."""

    name = "nsqmp's bench client (nsqmp bench writer/reader)"

    def __init__(self, size: int = 200) -> None:
        self.size = size

    def writer(self, addr: str, topic: str, conns: int, batch: int, runfor: float) -> dict:
        """`nsqmp bench writer`: PUB at batch 1, MPUB otherwise."""
        return run("writer", SimpleNamespace(nsqd_tcp_address=addr, topic=topic, runfor=runfor,
                                             size=self.size, conns=conns, batch_size=batch))

    def reader(self, addr: str, topic: str, channel: str, conns: int, runfor: float) -> dict:
        """`nsqmp bench reader`: RDY 2500, FIN per message."""
        return run("reader", SimpleNamespace(nsqd_tcp_address=addr, topic=topic, channel=channel,
                                             runfor=runfor, size=self.size, conns=conns, rdy=2500,
                                             max_messages=0))

    def mixed(self, addr: str, topic: str, channel: str, writers: int, batch: int, readers: int,
              runfor: float) -> dict:
        """Readers in a thread while the writers run here; the writers' result with the
        readers' rate as msgs_out_per_sec."""
        results: dict = {}

        def read() -> None:
            try:
                results["reader"] = self.reader(addr, topic, channel, readers, runfor)
            except BenchFailed as exc:  # raised below, after the join
                results["reader_error"] = exc

        t = threading.Thread(target=read)
        t.start()
        try:
            out = self.writer(addr, topic, writers, batch, runfor)
        finally:
            t.join()
        if "reader_error" in results:
            raise results["reader_error"]
        return {**out, "msgs_out_per_sec": results["reader"]["msgs_per_sec"]}
