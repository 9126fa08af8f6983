"""What the kernel and the shared memory say about the broker, read without asking any
process: CPU seconds and resident memory of a pid (/proc/<pid>/stat), established TCP
connections to a local port (/proc/net/tcp, tcp6), ring occupancy (each ring's head and
tail words), and the segment files under the data path.
"""
from __future__ import annotations

import mmap
import os
import struct

import posix_ipc

from nsqmp.ipc.pyring import OFF_CAPACITY, OFF_HEAD, OFF_TAIL

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_U64 = struct.Struct("<Q")
_ESTABLISHED = "01"


def cpu_and_rss(pid: int) -> tuple[float, int] | None:
    """(user + system CPU seconds, resident bytes) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # the name in field 2 may hold spaces or ')': split after its last ')'
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    # fields[0] is field 3 (state): utime is field 14, stime 15, rss (pages) 24
    return (int(fields[11]) + int(fields[12])) / _TICK, int(fields[21]) * _PAGE


def established(ports: dict[int, str]) -> dict[str, int]:
    """Established TCP connections whose local port is one of `ports` (port -> name), by
    name: the broker's clients whichever acceptor holds them (this network namespace)."""
    counts = {name: 0 for name in ports.values()}
    wanted = {f"{port:04X}": name for port, name in ports.items() if port > 0}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)  # the heading
                for line in f:
                    parts = line.split(None, 4)
                    # parts: sl, local address:port, remote address:port, state, ...
                    if parts[3] == _ESTABLISHED:
                        name = wanted.get(parts[1].rpartition(":")[2])
                        if name is not None:
                            counts[name] += 1
        except OSError:
            continue
    return counts


class RingGauges:
    """Read-only views of every ring of a run: bytes used and capacity, by ring name."""

    def __init__(self, plan) -> None:
        self._maps: dict[str, mmap.mmap] = {}
        for ring in plan.ring_names():
            seg = posix_ipc.SharedMemory(plan.shm_name(ring), read_only=True)
            try:  # the header's first page is all we read
                self._maps[ring] = mmap.mmap(seg.fd, mmap.PAGESIZE, prot=mmap.PROT_READ)
            finally:
                seg.close_fd()

    def read(self) -> list[tuple[str, int, int]]:
        """(ring, used bytes, capacity) of each ring. head and tail are aligned 8-byte
        words, each a single load; used = head - tail (tail read first: never negative)."""
        out = []
        for ring, buf in self._maps.items():
            tail = _U64.unpack_from(buf, OFF_TAIL)[0]
            head = _U64.unpack_from(buf, OFF_HEAD)[0]
            out.append((ring, max(0, head - tail), _U64.unpack_from(buf, OFF_CAPACITY)[0]))
        return out

    def close(self) -> None:
        """Unmap every view."""
        for buf in self._maps.values():
            buf.close()
        self._maps.clear()


def segment_usage(topics_root: str) -> tuple[int, int]:
    """(segment files, bytes they occupy on disk) under <data-path>/topics."""
    files = size = 0
    try:
        topics = list(os.scandir(topics_root))
    except OSError:
        return 0, 0
    for topic in topics:
        try:
            entries = list(os.scandir(topic.path))
        except OSError:  # deleted meanwhile, or not a directory
            continue
        for e in entries:
            if e.name.endswith(".seg"):
                try:
                    st = e.stat()
                except OSError:
                    continue
                files += 1
                size += st.st_blocks * 512  # allocated, not apparent: what the disk holds
    return files, size

