"""What a process asks of the kernel's scheduler: a shorter time slice.

Linux's EEVDF scheduler (6.6+) gives each task a slice (about 1.4 ms on this machine
kind); since 6.12 a task may ask for its own, between 0.1 and 100 ms, with
sched_setattr's ``sched_runtime``, and no privilege is needed. A task with a shorter
slice has an earlier virtual deadline: when it wakes it preempts a task with a longer
one instead of waiting for that task's slice to end. That suits a process that sleeps
most of the time and whose wake-ups are deadlines (the timer): it asks for the shortest.
On an older kernel, or another OS, the request fails and nothing changes.

The layout of ``struct sched_attr`` (SCHED_ATTR_SIZE_VER1, 56 bytes), from
include/uapi/linux/sched/types.h:

    u32 size | u32 sched_policy | u64 sched_flags | s32 sched_nice | u32 sched_priority |
    u64 sched_runtime | u64 sched_deadline | u64 sched_period | u32 util_min | u32 util_max
"""
from __future__ import annotations

import ctypes
import os
import platform
import struct

_ATTR = struct.Struct("<IIQiIQQQII")
_SCHED_OTHER = 0
_SCHED_FLAG_KEEP_POLICY = 0x08  # keep SCHED_OTHER or SCHED_BATCH, as the broker was started
# sched_setattr / sched_getattr syscall numbers
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}
MIN_SLICE_NS = 100_000


def _numbers() -> tuple[int, int] | None:
    return _SYSCALLS.get(platform.machine()) if os.name == "posix" else None


def set_slice(ns: int) -> bool:
    """Ask for a time slice of ns (clamped by the kernel to 0.1-100 ms) for the calling
    thread, keeping its policy and niceness. True if the kernel took it."""
    numbers = _numbers()
    if numbers is None:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        packed = _ATTR.pack(_ATTR.size, _SCHED_OTHER, _SCHED_FLAG_KEEP_POLICY, nice, 0, ns, 0, 0, 0, 0)
        attr = ctypes.create_string_buffer(packed, _ATTR.size)
        return libc.syscall(numbers[0], 0, attr, 0) == 0
    except (OSError, AttributeError):
        return False


def get_slice() -> int | None:
    """The calling thread's slice in ns as the kernel reports it, or None."""
    numbers = _numbers()
    if numbers is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        attr = ctypes.create_string_buffer(_ATTR.size)
        if libc.syscall(numbers[1], 0, attr, _ATTR.size, 0) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return _ATTR.unpack(attr.raw)[5]


def set_realtime() -> bool:
    """SCHED_FIFO priority 1 for this process, not for the children it forks
    (SCHED_RESET_ON_FORK), when it may (CAP_SYS_NICE, or RLIMIT_RTPRIO >= 1): the
    supervisor, which sleeps nearly always, so that SIGKILLed it gets a core at once to
    die on, and its death wakes the children's lifeline watchers (docs/lifecycle.md).
    False when refused: the supervisor keeps the shortest slice."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(1))
    except (OSError, AttributeError):
        return False
    return True
