"""The "memory" block of /stats: nsqd's Go runtime figures, as a Python broker has them.

nsqd reports its one Go process's runtime.MemStats. nsqmp is several processes, so each
field is an honest Python/Linux counterpart, summed (or merged) over the broker:

| nsqd field            | here                                                                 |
|-----------------------|----------------------------------------------------------------------|
| heap_objects          | sys.getallocatedblocks() (live pymalloc blocks ~ live small objects), |
|                       | summed over the Python processes that answer (the acceptor serving    |
|                       | /stats and every router)                                             |
| heap_in_use_bytes     | RssAnon from /proc/<pid>/status (anonymous resident memory: Python   |
|                       | heap, malloc, native heaps; not file pages, such as the ack logs the |
|                       | routers map, nor the shared-memory rings), summed over every broker  |
|                       | process: supervisor, acceptors, routers, timer                       |
| heap_idle_bytes       | free bytes glibc malloc holds (mallinfo2 fordblks: freed, not yet    |
|                       | given back), summed over the answering processes                      |
| heap_released_bytes   | 0: neither CPython nor glibc counts memory given back to the kernel  |
| gc_pause_usec_100/99/95 | percentiles (nsqd's rule) of the durations of the last 256         |
|                       | collections of each answering process, timed by a gc callback, merged |
| next_gc_bytes         | 0: CPython starts a collection after a number of allocations, not at |
|                       | a heap size, so there is no byte target to report                    |
| gc_total_runs         | collections of every generation (gc.get_stats()), summed over the    |
|                       | answering processes                                                   |

The timer process runs no Python collections worth reporting (its heap is native) and is
only counted in heap_in_use_bytes.
"""
from __future__ import annotations

import ctypes
import gc
import math
import sys
import time
from collections import deque

_PAUSES: deque[int] = deque(maxlen=256)  # ns, as Go keeps its last 256 pauses
_started = 0


def _on_gc(phase: str, info: dict) -> None:
    global _started
    if phase == "start":
        _started = time.perf_counter_ns()
    elif _started:
        _PAUSES.append(time.perf_counter_ns() - _started)


def install() -> None:
    """Start timing this process's collections (once per process)."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


_mallinfo2: list = []  # the looked-up function, or None where there is none


def _malloc_free() -> int:
    """Bytes free inside glibc malloc's arenas (0 where mallinfo2 is missing)."""
    if not _mallinfo2:
        try:
            fn = ctypes.CDLL(None).mallinfo2
            fn.restype = _MallInfo2
        except (AttributeError, OSError):
            fn = None
        _mallinfo2.append(fn)
    fn = _mallinfo2[0]
    return int(fn().fordblks) if fn is not None else 0


def sample() -> dict:
    """This process's Python-side figures (what a router sends the acceptor)."""
    return {
        "blocks": sys.getallocatedblocks(),
        "collections": sum(g["collections"] for g in gc.get_stats()),
        "pauses_ns": list(_PAUSES),
        "malloc_free": _malloc_free(),
    }


def rss_anon(pid: int) -> int:
    """Anonymous resident bytes of a process (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _percentile(perc: float, ordered: list[int]) -> int:
    """nsqd's percentile(): index floor(perc% * n + 0.5), capped at the last."""
    if not ordered:
        return 0
    i = min(int(math.floor(perc / 100.0 * len(ordered) + 0.5)), len(ordered) - 1)
    return ordered[i]


def combine(samples: list[dict], pids: list[int]) -> dict:
    """nsqd's memStats fields from the answering processes' samples and every broker pid."""
    pauses = sorted(p for s in samples for p in s.get("pauses_ns", ()))
    return {
        "heap_objects": sum(s.get("blocks", 0) for s in samples),
        "heap_idle_bytes": sum(s.get("malloc_free", 0) for s in samples),
        "heap_in_use_bytes": sum(rss_anon(pid) for pid in set(pids) if pid > 0),
        "heap_released_bytes": 0,
        "gc_pause_usec_100": _percentile(100.0, pauses) // 1000,
        "gc_pause_usec_99": _percentile(99.0, pauses) // 1000,
        "gc_pause_usec_95": _percentile(95.0, pauses) // 1000,
        "next_gc_bytes": 0,
        "gc_total_runs": sum(s.get("collections", 0) for s in samples),
    }


FIELDS = ("heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes", "gc_pause_usec_100",
          "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes", "gc_total_runs")
