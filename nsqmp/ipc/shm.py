"""Named POSIX shared-memory segments: the supervisor creates and unlinks, children attach.

Every segment of one broker run is named ``/nsqmp.<supervisor pid>.<what>``, so a
supervisor starting after a crash can find the segments of dead runs and unlink them.
"""
from __future__ import annotations

import logging
import mmap
import os

import posix_ipc

log = logging.getLogger("nsqmp.ipc")

PREFIX = "nsqmp."
_SHM_DIR = "/dev/shm"


def segment_name(run_pid: int, what: str) -> str:
    return f"/{PREFIX}{run_pid}.{what}"


def create(name: str, size: int) -> mmap.mmap:
    """Create a zero-filled segment (fails if it exists) and map it."""
    shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
    try:
        return mmap.mmap(shm.fd, size)
    finally:
        shm.close_fd()


def attach(name: str) -> mmap.mmap:
    """Map an existing segment created by the supervisor."""
    shm = posix_ipc.SharedMemory(name)
    try:
        return mmap.mmap(shm.fd, shm.size)
    finally:
        shm.close_fd()


def unlink(name: str) -> None:
    try:
        posix_ipc.unlink_shared_memory(name)
    except posix_ipc.ExistentialError:
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Unlink segments left by broker runs whose supervisor is gone; returns their names."""
    removed: list[str] = []
    try:
        entries = os.listdir(_SHM_DIR)
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not entry.startswith(PREFIX):
            continue
        pid_text = entry[len(PREFIX):].split(".", 1)[0]
        if not pid_text.isdigit() or _pid_alive(int(pid_text)):
            continue
        unlink("/" + entry)
        removed.append(entry)
    if removed:
        log.info("removed %d stale shared-memory segments of dead runs", len(removed))
    return removed
