"""What the benchmarks read of a broker process from /proc, and how their consumer
processes read and answer frames."""
from __future__ import annotations

import os
import resource
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


def with_cpu(pids: list[int], run: Callable[[], dict]) -> dict:
    """run()'s result with ``cpu_us_per_msg``: the CPU the server's processes (pids: a
    broker's supervisor and roles) and the client processes used during it, per message
    moved (published plus delivered). On a machine whose cores the two share, cores /
    (broker + client) bounds the rate either broker can reach with that client: the
    measurement behind "the limit is the machine". Without pids (a server in a forked
    Python process), run()'s result as it is."""
    if not pids:
        return run()
    before = {p: cpu_seconds(p) for p in pids}
    client0 = _children_cpu()
    result = run()
    used = sum(cpu_seconds(p) - t for p, t in before.items())
    client = _children_cpu() - client0
    moved = _moved(result)
    if moved and used == used:  # NaN: a process of the broker died during the run
        result["cpu_us_per_msg"] = {"broker": round(used * 1e6 / moved, 2), "client": round(client * 1e6 / moved, 2)}
    return result


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
