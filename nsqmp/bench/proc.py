"""What the benchmarks read of a broker process from /proc, and how their consumer
processes read and answer frames."""
from __future__ import annotations

import os
import time
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
