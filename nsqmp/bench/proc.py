"""What the benchmarks read of a broker process from /proc."""
from __future__ import annotations

import os
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
