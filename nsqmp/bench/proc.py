"""What the benchmarks read of a broker process from /proc, and how their consumer
processes read and answer frames."""
from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a live process; NaN if it is gone (a crash: the
    benchmark says which)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / _TICK


def _children_cpu() -> float:
    """CPU seconds of this process's finished children: the bench tools, once waited for."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def with_cpu(procs: dict[str, int], run: Callable[[], dict]) -> dict:
    """run()'s result with ``cpu_us_per_msg``: the CPU the server's processes (procs: title
    -> PID of a broker's supervisor and roles) and the client processes used during it, per
    message moved (published plus delivered). On a machine whose cores the two share, cores
    / (broker + client) bounds the rate either broker can reach with that client: the
    measurement behind "the limit is the machine". And ``sched`` (see _sched): whether it
    was the machine, or one thread of the server. Without procs (a server in a forked
    Python process), run()'s result as it is."""
    if not procs:
        return run()
    before = {p: cpu_seconds(p) for p in procs.values()}
    client0 = _children_cpu()
    threads0, machine0, t0 = thread_times(procs), machine_idle(), time.monotonic()
    with _Sampler(procs) as sampler:  # threads that end before the run does keep their last look
        result = run()
    wall = time.monotonic() - t0
    threads1, machine1 = sampler.seen, machine_idle()
    each = {title: cpu_seconds(p) - before[p] for title, p in procs.items()}
    used = sum(each.values())
    client = _children_cpu() - client0
    moved = _moved(result)
    if moved and used == used:  # NaN: a process of the broker died during the run
        result["cpu_us_per_msg"] = {"broker": round(used * 1e6 / moved, 2), "client": round(client * 1e6 / moved, 2)}
        result["sched"] = _sched(threads0, threads1, machine0, machine1, wall)
        # the cores each used over the run: which side of the machine the load went to
        result["cores"] = {**{t: round(c / wall, 3) for t, c in each.items()}, "tools": round(client / wall, 3)}
    return result


def thread_times(procs: dict[str, int]) -> dict[tuple[str, int], tuple[int, int]]:
    """Each thread of the processes, by (name, tid), the name "<title>" for a main thread
    and "<title> / <thread name>" for another: (ns it ran, ns it waited runnable for a
    CPU), from /proc/<pid>/task/<tid>/schedstat. Threads that end meanwhile are left out."""
    out = {}
    for title, pid in procs.items():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in map(int, tids):
            try:
                ran, waited = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[:2]
                name = title if tid == pid else \
                    f"{title} / {Path(f'/proc/{pid}/task/{tid}/comm').read_text().strip()}"
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
            out[name, tid] = (int(ran), int(waited))
    return out


class _Sampler:
    """thread_times(procs) looked at every quarter second from a thread of its own while
    the block runs, and once more at its end: the latest figures of every thread seen."""

    def __init__(self, procs: dict[str, int]) -> None:
        self.procs = procs
        self.seen: dict[tuple[str, int], tuple[int, int]] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sched-sampler", daemon=True)

    def __enter__(self) -> "_Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        self.seen.update(thread_times(self.procs))

    def _run(self) -> None:
        while not self._done.wait(0.25):
            self.seen.update(thread_times(self.procs))


# a suite run from which the hypervisor stole more than this share of the machine's CPU
# time is run again (suite._unstolen): runs of this machine kind lost up to 30 % to it
STEAL_MAX = 0.05


def machine_idle() -> tuple[int, int, int]:
    """(idle + iowait, steal, all) clock ticks of every CPU since boot, from /proc/stat.
    Steal is the time the hypervisor ran something else while this machine's CPUs had
    work: on a shared host, the share of a run it took is why that run was slow."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return ticks[3] + ticks[4], ticks[7], sum(ticks[:8])  # guest time is counted in user already


def autogroup() -> bool | None:
    """Whether the kernel's autogroup is on (/proc/sys/kernel/sched_autogroup_enabled), or
    None where it cannot say. On, the scheduler shares the CPUs between sessions first:
    a broker started in a session of its own (launcher.Broker, nsqd too) and the bench's
    tools each get half of a full machine, whatever their thread counts."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return f.read().strip() == "1"
    except OSError:
        return None


def _sched(threads0: dict, threads1: dict, machine0: tuple[int, int, int], machine1: tuple[int, int, int],
           wall: float) -> dict:
    """What held the run back: the machine's idle and stolen shares (of all its CPUs) and the server's
    busiest thread (the one runnable longest), with the shares of the run it ran and it
    waited for a CPU. A thread runnable nearly all the run while CPUs sat idle is the
    limit itself (its work per message, and the CPUs its wake-ups put others on); a busy
    machine with no such thread is the limit of the cores."""
    ticks = max(1, machine1[2] - machine0[2])
    idle = (machine1[0] - machine0[0]) / ticks
    steal = (machine1[1] - machine0[1]) / ticks
    # a thread started during the run (a server's thread per connection) counts from 0
    deltas = {n: (t[0] - threads0.get(n, (0, 0))[0], t[1] - threads0.get(n, (0, 0))[1]) for n, t in threads1.items()}
    out: dict = {"idle": round(idle, 3), "steal": round(steal, 3)}
    if deltas and wall > 0:
        (name, _), (ran, waited) = max(deltas.items(), key=lambda kv: kv[1][0] + kv[1][1])
        out.update(thread=name, ran=round(ran / 1e9 / wall, 3), waited=round(waited / 1e9 / wall, 3))
    return out


def _moved(result: dict) -> int:
    """Messages a run moved: published, delivered (the reader's backlog), or both (mixed)."""
    if "backlog" in result:
        return result["backlog"] - (result.get("left") or 0)
    out = result.get("msgs_out_per_sec")
    return int(result.get("messages") or 0) + (int(out * result["seconds"]) if out and result.get("seconds") else 0)


def readable_frames(sel, readers: dict, timeout: float):
    """Each readable connection of the selector and the complete frames it brought, as
    (socket, [(frame type, payload), ...], wall clock ns when the bytes were read); a
    connection the broker closed is unregistered. readers: socket -> its
    wire.FrameReader."""
    for key, _ in sel.select(timeout):
        s = key.fileobj
        try:
            data = s.recv(1 << 20)
        except BlockingIOError:
            continue
        if not data:
            sel.unregister(s)
            continue
        arrived = time.time_ns()
        yield s, readers[s].feed(data), arrived


def send_all(s, data: bytes) -> None:
    """All of data on a non-blocking socket (blocking while it is written)."""
    s.setblocking(True)
    s.sendall(data)
    s.setblocking(False)
