"""The control block: one shared-memory page the supervisor reads to watch its children.

Layout (little-endian)::

    0  magic 'NQCT' u32 | 4 version u16 | 6 slots u16 | 8..63 reserved
    64 + 64 * slot:
       +0 pid u32 | +4 generation u32 | +8 state u32
       +12 errno u32 of the slot's last failed disk write (0: none since its last success)
       +16 heartbeat u64: CLOCK_MONOTONIC ns of the child's last beat
       +24 failed_at u64: CLOCK_MONOTONIC ns of that failure
       +32 ok_at u64: CLOCK_MONOTONIC ns of a recent successful write (noted at most 1/s)
       +40 connections u32: the TCP connections an acceptor holds (the supervisor's steering)

The broker is unhealthy while the newest failure of any slot is newer than the newest
success of any slot: a write that works anywhere means the disk has room again.

A child writes only its own slot; the supervisor only reads (and resets a slot before it
forks the slot's next incarnation). Aligned 8-byte stores are single writes on every CPU
we run on, so a torn heartbeat cannot be read.
"""
from __future__ import annotations

import mmap
import struct
import time

from nsqmp.ipc import shm

MAGIC = 0x5443514E
VERSION = 1
HEAD = struct.Struct("<IHH")
SLOT = struct.Struct("<IIIIQ")
SLOT_BASE = 64
SLOT_SIZE = 64

BOOTING, READY, STOPPING = 0, 1, 2


def size_for(slots: int) -> int:
    return max(mmap.PAGESIZE, SLOT_BASE + SLOT_SIZE * slots)


class ControlBlock:
    def __init__(self, buf: mmap.mmap) -> None:
        magic, version, slots = HEAD.unpack_from(buf, 0)
        if magic != MAGIC or version != VERSION:
            raise ValueError("not an nsqmp control block")
        self.buf = buf
        self.slots = slots

    @classmethod
    def create(cls, name: str, slots: int) -> "ControlBlock":
        buf = shm.create(name, size_for(slots))
        HEAD.pack_into(buf, 0, MAGIC, VERSION, slots)
        return cls(buf)

    @classmethod
    def attach(cls, name: str) -> "ControlBlock":
        return cls(shm.attach(name))

    def reset(self, slot: int, generation: int) -> None:
        SLOT.pack_into(self.buf, SLOT_BASE + SLOT_SIZE * slot, 0, generation, BOOTING, 0, 0)
        self.set_connections(slot, 0)  # the predecessor's connections died with it

    def announce(self, slot: int, pid: int, generation: int, state: int) -> None:
        SLOT.pack_into(self.buf, SLOT_BASE + SLOT_SIZE * slot, pid, generation, state, 0, time.monotonic_ns())

    def note_failure(self, slot: int, err: int) -> None:
        base = SLOT_BASE + SLOT_SIZE * slot
        struct.pack_into("<Q", self.buf, base + 24, time.monotonic_ns())
        struct.pack_into("<I", self.buf, base + 12, err)

    def note_success(self, slot: int) -> None:
        base = SLOT_BASE + SLOT_SIZE * slot
        struct.pack_into("<Q", self.buf, base + 32, time.monotonic_ns())
        struct.pack_into("<I", self.buf, base + 12, 0)

    def health(self, slots) -> int:
        """errno of the newest failure among `slots` if no success came after it, else 0."""
        newest_fail, err, newest_ok = 0, 0, 0
        for slot in slots:
            base = SLOT_BASE + SLOT_SIZE * slot
            e = struct.unpack_from("<I", self.buf, base + 12)[0]
            failed_at, ok_at = struct.unpack_from("<QQ", self.buf, base + 24)
            if e and failed_at > newest_fail:
                newest_fail, err = failed_at, e
            newest_ok = max(newest_ok, ok_at)
        return err if newest_fail > newest_ok else 0

    def set_connections(self, slot: int, count: int) -> None:
        struct.pack_into("<I", self.buf, SLOT_BASE + SLOT_SIZE * slot + 40, count)

    def connections(self, slot: int) -> int:
        """The TCP connections the slot's acceptor said it holds."""
        return struct.unpack_from("<I", self.buf, SLOT_BASE + SLOT_SIZE * slot + 40)[0]

    def beat(self, slot: int) -> None:
        struct.pack_into("<Q", self.buf, SLOT_BASE + SLOT_SIZE * slot + 16, time.monotonic_ns())

    def read(self, slot: int) -> tuple[int, int, int, int]:
        """(pid, generation, state, heartbeat_ns) of a slot."""
        pid, gen, state, _, hb = SLOT.unpack_from(self.buf, SLOT_BASE + SLOT_SIZE * slot)
        return pid, gen, state, hb

    def close(self) -> None:
        try:
            self.buf.close()
        except BufferError:
            pass
