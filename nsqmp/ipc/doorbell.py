"""Doorbells: one eventfd per process slot, created by the supervisor before it forks.

A producer rings the consumer's doorbell only when a ring push reports that the consumer
announced it was going to sleep (Ring.prepare_sleep), so a busy consumer costs no syscall.
A restarted child inherits the same eventfd from the supervisor.
"""
from __future__ import annotations

import os


class Doorbell:
    __slots__ = ("fd", "rings")

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.rings = 0  # writes issued by this process (for the syscall count)

    def ring(self) -> None:
        self.rings += 1
        try:
            os.eventfd_write(self.fd, 1)
        except BlockingIOError:  # counter saturated: the sleeper is certainly woken
            pass

    def clear(self) -> None:
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)
