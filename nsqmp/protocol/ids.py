"""Message IDs: 16 ASCII hex characters of a 64-bit snowflake, as nsqd generates them.

    id = (ms since the Twitter epoch) << 22 | node (10 bits) << 12 | sequence (12 bits)

Each acceptor is its own generator with node = (node_id + acceptor index) % 1024, so two
acceptors never mint the same ID. When the 12-bit sequence runs out inside one
millisecond the generator borrows from the next millisecond instead of sleeping, which
keeps IDs unique and increasing.

IdGenerator is native/ids.c's unless NSQMP_PURE_PYTHON=1 or the extension is not built:
a publish run (native/segtail.c) mints IDs from its state in place. The class below is
the reference and the twin (PyIdGenerator); the tests run both.
"""
from __future__ import annotations

import os
import time

_EPOCH_MS = 1288834974657


class IdGenerator:
    def __init__(self, node: int) -> None:
        self.node = node & 0x3FF
        # the state: the millisecond of the last ID and how many of its IDs are taken
        # (public: the publish run, nsqmp.diskqueue.pubrun, mints IDs from it in C)
        self.ms = 0
        self.seq = 0

    def next_block(self, count: int) -> int:
        """Reserve `count` (1..4096) consecutive IDs; returns the first of them."""
        if not 0 < count <= 0x1000:
            raise ValueError("1 to 4096 IDs per block")
        ms = time.time_ns() // 1_000_000 - _EPOCH_MS
        if ms > self.ms:
            self.ms, self.seq = ms, 0
        if self.seq + count > 0x1000:
            self.ms, self.seq = self.ms + 1, 0
        first = self.ms << 22 | self.node << 12 | self.seq
        self.seq += count
        return first


PyIdGenerator = IdGenerator  # the reference (and the twin of native/ids.c)
if os.environ.get("NSQMP_PURE_PYTHON", "") != "1":
    try:  # the C one: the segment tail (native/segtail.c) advances its state in place
        from nsqmp._native import IdGenerator as _NativeIdGenerator
        IdGenerator = _NativeIdGenerator  # type: ignore[misc,assignment]
    except ImportError:  # extension not built
        pass


def hex_id(value: int) -> bytes:
    return b"%016x" % value
