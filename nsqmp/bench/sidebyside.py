"""The brokers `make bench` measures side by side, and one run of a workload on one of them.

A target is a kind of broker started fresh for every run (its own data dir, port 0):

- ``nsqmp``: this checkout (``python -m nsqmp serve``, default flags);
- ``nsqd``: an nsqd binary (``--nsqd``), with ``NSQD_FLAGS``, the flags equivalent to
  nsqmp's defaults, spelled out so the output can say which;
- ``baseline``: another nsqmp checkout (``--baseline DIR``: its own ``python -m nsqmp``
  with ``PYTHONPATH=DIR``; its extensions must be built in place there), so one command
  gives before / after / nsqd in the same hour.

The order of the targets turns by one every repetition (``order``): with nsqd and nsqmp,
nsqd runs first on odd repetitions and nsqmp first on even ones.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from nsqmp.bench.nsqtools import Client
from nsqmp.bench.tool import BenchFailed
from nsqmp.launcher import Broker, Nsqd

# nsqd's flags equal to nsqmp's defaults (nsqmp/config/options.py); they are nsqd 1.3.0's
# defaults too, given explicitly so a change of either default shows here
NSQD_FLAGS = ("--mem-queue-size=10000", "--sync-every=2500", "--sync-timeout=2s",
              "--max-bytes-per-file=104857600", "--max-rdy-count=2500", "--msg-timeout=60s")
TOPIC, CHANNEL = "sub_bench", "ch"


class Baseline(Broker):
    """nsqmp from another checkout: the same command run with PYTHONPATH=that checkout."""

    def __init__(self, checkout: str, data_path: Path, *args: str, log_path: Path | None = None) -> None:
        super().__init__(data_path, *args, log_path=log_path)
        self.checkout = str(Path(checkout).resolve())

    def command(self) -> list[str]:
        # env execs python in place: the PID Popen knows stays the supervisor's
        return ["env", f"PYTHONPATH={self.checkout}", *super().command()]


@dataclass
class Target:
    """One kind of broker: ``label`` in the table, how to start it fresh."""

    label: str
    nsqd: str | None = None  # path of the nsqd binary
    checkout: str | None = None  # a baseline nsqmp checkout
    extra: list[str] = field(default_factory=list)  # more flags for every start

    def start(self, workdir: Path, flags: tuple[str, ...]) -> Broker:
        """A fresh broker of this kind in workdir, started and ready."""
        data, log = workdir / "data", workdir / "broker.log"
        if self.nsqd:
            broker: Broker = Nsqd(self.nsqd, data, *NSQD_FLAGS, *flags, *self.extra, log_path=log)
        elif self.checkout:
            broker = Baseline(self.checkout, data, *flags, *self.extra, log_path=log)
        else:
            broker = Broker(data, *flags, *self.extra, log_path=log)
        return broker.start()


def order(targets: list[Target], rep: int) -> list[Target]:
    """The targets of repetition rep (0-based), turned by one each repetition."""
    k = rep % len(targets)
    return targets[k:] + targets[:k]


def memory(broker: Broker) -> dict[str, dict[str, int]]:
    """RSS and PSS (KiB) of the broker's process and each child, by process title."""
    procs = {"supervisor": broker.proc.pid, **broker.children()}  # type: ignore[union-attr]
    out = {}
    for title, pid in procs.items():
        fields = {}
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss"):
                    fields[key.lower()] = int(rest.split()[0])
        except FileNotFoundError:
            continue
        out[title] = fields
    return out


def _channel(broker: Broker, topic: str) -> None:
    """Create topic and channel over HTTP (nsqd's API), so the channel gets every write."""
    q = urlencode({"topic": topic, "channel": CHANNEL})
    status, body, _ = broker.http("POST", f"/channel/create?{q}")
    if status != 200:
        raise BenchFailed(f"/channel/create answered {status}: {body[:200]!r}")


def _depth(broker: Broker, topic: str) -> int | None:
    """The channel's depth from /stats, or None if the broker does not say."""
    try:
        for t in broker.stats(topic=topic)["topics"]:
            for c in t.get("channels") or []:
                if t["topic_name"] == topic and c["channel_name"] == CHANNEL:
                    return int(c["depth"])
    except (OSError, AssertionError, KeyError, ValueError):
        return None
    return None


def _workload(broker: Broker, client: Client, w: dict, runfor: float) -> dict:
    """The client part of one run (the broker is up)."""
    addr, topic, kind = broker.tcp_address, w.get("topic", TOPIC), w["kind"]
    if kind == "writer":
        return client.writer(addr, topic, w["conns"], w["batch"], runfor)
    _channel(broker, topic)
    if kind == "mixed":
        return client.mixed(addr, topic, CHANNEL, w["conns"], w["batch"], 2, runfor)
    # reader: a backlog first, written by 4 MPUB 200 connections for half the time
    client.writer(addr, topic, 4, 200, runfor / 2)
    backlog = _depth(broker, topic)
    result = client.reader(addr, topic, CHANNEL, w["conns"], runfor)
    # left = 0 means the reader ran dry before runfor: its rate is then a lower bound
    return {**result, "backlog": backlog, "left": _depth(broker, topic)}


def run_one(target: Target, client: Client, w: dict, runfor: float) -> dict:
    """One run of workload w on a fresh broker of target; a failure comes back as
    {"error"} so the suite goes on."""
    started = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="nsqmp-bench-") as tmp:
            workdir = Path(tmp)
            broker = target.start(workdir, tuple(w.get("flags", ())))
            try:
                result = _workload(broker, client, w, runfor)
                result["memory_kib"] = memory(broker)
            finally:
                code = broker.stop()
            if code != 0 and not (target.nsqd and code in (-15, 0)):
                raise BenchFailed(f"broker exited with {code}: {broker.log_text()[-500:]}")
    except (BenchFailed, Exception) as exc:  # noqa: BLE001 - reported with the run, then on
        return {"error": f"{type(exc).__name__}: {exc}", "started": started}
    return {**result, "started": started}
