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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from nsqmp.bench.nsqtools import Client
from nsqmp.client import wire
from nsqmp.client.sync import Connection
from nsqmp.bench.proc import with_cpu
from nsqmp.bench.tool import BenchFailed
from nsqmp.launcher import Broker, Nsqd

# nsqd's flags equal to nsqmp's defaults (nsqmp/config/options.py); they are nsqd 1.3.0's
# defaults too, given explicitly so a change of either default shows here
NSQD_FLAGS = ("--mem-queue-size=10000", "--sync-every=2500", "--sync-timeout=2s",
              "--max-bytes-per-file=104857600", "--max-rdy-count=2500", "--msg-timeout=60s")
TOPIC, CHANNEL = "sub_bench", "ch"


class Baseline(Broker):
    """nsqmp from another checkout: the same command run in that checkout, with
    PYTHONPATH=that checkout. Both are needed: ``python -m`` puts the current directory
    first on the path, so a baseline started from this checkout ran this checkout's code
    (the baseline columns of 2026-11-24 compared this code with itself)."""

    def __init__(self, checkout: str, data_path: Path, *args: str, log_path: Path | None = None) -> None:
        super().__init__(data_path, *args, log_path=log_path)
        self.checkout = str(Path(checkout).resolve())
        self.cwd = self.checkout

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


def _processes(broker: Broker) -> dict[str, int]:
    """Title -> PID of the broker's process ("supervisor"; "nsqd", its only one) and each child."""
    main = "nsqd" if isinstance(broker, Nsqd) else "supervisor"
    return {main: broker.proc.pid, **broker.children()}  # type: ignore[union-attr]


def memory(broker: Broker) -> dict[str, dict[str, int]]:
    """RSS and PSS (KiB) of the broker's process and each child, by process title."""
    procs = _processes(broker)
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
    for path, params in (("/topic/create", {"topic": topic}),
                         ("/channel/create", {"topic": topic, "channel": CHANNEL})):
        status, body, _ = broker.http("POST", f"{path}?{urlencode(params)}")
        if status != 200:
            raise BenchFailed(f"{path} answered {status}: {body[:200]!r}")


def _depth(broker: Broker, topic: str) -> tuple[int, int] | None:
    """(the topic's depth, the channel's) from /stats, or None if the broker does not say.
    nsqd moves a topic's messages to its channels behind the publishes: until the topic's
    depth is 0 the channel does not hold them all."""
    try:
        for t in broker.stats(topic=topic, channel=CHANNEL, include_clients="false")["topics"]:
            for c in t.get("channels") or []:
                if t["topic_name"] == topic and c["channel_name"] == CHANNEL:
                    return int(t["depth"]), int(c["depth"])
    except (OSError, AssertionError, KeyError, ValueError):
        return None
    return None


def _settled(broker: Broker, topic: str, timeout: float = 120.0) -> int | None:
    """Wait until the topic's messages are all in the channel; the channel's depth then."""
    deadline = time.monotonic() + timeout
    while (depth := _depth(broker, topic)) is not None and depth[0] > 0:
        if time.monotonic() > deadline:
            raise BenchFailed(f"the topic still held {depth[0]} messages after {timeout:g} s")
        time.sleep(0.05)
    return None if depth is None else depth[1]


def fill(addr: str, topic: str, messages: int, size: int = 200, conns: int = 4) -> None:
    """Publish messages (rounded up to MPUBs of 200) on conns connections, each waiting
    for its OKs: the reader's backlog, the same count on every broker."""
    cmd = wire.mpub(topic, [b"a" * size] * 200)
    per = -(-messages // (200 * conns))
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            with Connection.connect(addr, timeout=60) as c:
                for _ in range(per):
                    c.send(cmd)
                    c.expect_ok()
        except BaseException as exc:  # noqa: BLE001 - raised after the join
            errors.append(exc)

    threads = [threading.Thread(target=publish) for _ in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise BenchFailed(f"filling the backlog failed: {errors[0]!r}")


def _drain(broker: Broker, client: Client, topic: str, conns: int, runfor: float) -> dict:
    """The reader on the backlog. Its rate is the backlog over the time from the last poll
    (every 50 ms) that saw the whole backlog to the first that saw the channel empty (no
    client's start-up inside it); the reader's own figure if it never emptied it."""
    backlog = _settled(broker, topic)
    result: dict = {}

    def read() -> None:
        try:
            result.update(client.reader(broker.tcp_address, topic, CHANNEL, conns, runfor))
        except BenchFailed as exc:  # raised after the join
            result["error"] = exc

    t = threading.Thread(target=read)
    t.start()
    began = drained = None
    while t.is_alive():
        now, depth = time.monotonic(), _depth(broker, topic)
        if depth is not None and drained is None:
            if depth[1] == backlog:
                began = now
            elif depth == (0, 0):
                drained = now
        time.sleep(0.05)
    t.join()
    if "error" in result:
        raise result["error"]
    out = {**result, "backlog": backlog, "left": (_depth(broker, topic) or (None, None))[1],
           "reader_msgs_per_sec": result["msgs_per_sec"], "drained_after": None}
    if began is not None and drained is not None and backlog:
        out["drained_after"] = round(drained - began, 3)
        out["msgs_per_sec"] = round(backlog / (drained - began), 1)
    return out


def _workload(broker: Broker, client: Client, w: dict, runfor: float) -> dict:
    """The client part of one run (the broker is up), with the CPU it cost (proc.with_cpu)."""
    addr, topic, kind = broker.tcp_address, w.get("topic", TOPIC), w["kind"]
    if kind == "writer":
        return with_cpu(_processes(broker), lambda: client.writer(addr, topic, w["conns"], w["batch"], runfor))
    _channel(broker, topic)
    if kind == "mixed":
        return with_cpu(_processes(broker), lambda: client.mixed(addr, topic, CHANNEL, w["conns"], w["batch"], 2, runfor))
    fill(addr, topic, backlog_size(runfor))
    return with_cpu(_processes(broker), lambda: _drain(broker, client, topic, w["conns"], runfor))


def backlog_size(runfor: float) -> int:
    """The reader's backlog: 500,000 messages per second of runfor (4M for 8 s), the same
    on every broker, so no reader runs dry before its time on a broker that writes slower."""
    return max(20_000, int(500_000 * runfor))


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
