"""Frames a router sent ahead of a consumer's credit, held until the consumer frees room.

A consumer's FIN frees room for one more message, but a router learns of it only after a
trip through the ring, its loop and the ring back; under load that trip is most of the
time between a consumer's FIN and its next message. So a router sends a consumer with a
large RDY up to RDY more frames than its credit, as DELIVER_AHEAD
(nsqmp.router.flight.Consumer, `reserve`), and the consumer's acceptor holds them here.
It writes one for each FIN or REQ the consumer sends, at once, and tells the router how
many in the FIN record (a FIN record without IDs after a REQ). An exchange leaves the
number the client has in flight as it was, and a router sends ahead only while that
number is within the client's RDY, so the client never has more than its RDY in flight,
as with nsqd.

Held frames go back to the router unwritten (UNSENT; their attempt is not counted) when
the consumer lowers its RDY below the RDY they were sent under, sends CLS, goes, or has
held them for HOLD_MAX_NS: no frame is written after its message could have timed out (a
router sends ahead only under a msg_timeout of a second or more). A FIN or REQ the router
refuses (E_FIN_FAILED, E_REQ_FAILED: a wrong ID, or one that timed out) freed no room: the
next FIN or REQ writes one frame fewer (`owe`).
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from nsqmp.protocol.frames import frame_ends  # native/readback.c, or its twin

__all__ = ["HOLD_CHECK_S", "HOLD_MAX_NS", "Ahead"]

# Frames held longer than this go back to the router (looked for every HOLD_CHECK_S): far
# less than the shortest msg_timeout a router sends ahead under (a second)
HOLD_MAX_NS = 200_000_000
HOLD_CHECK_S = 0.1


class Ahead:
    """One consumer's held frames: DELIVER_AHEAD payloads in arrival order, each with
    where its frames end (frame_ends, taken as it arrives: walking them later, when the
    FINs come, missed the cache once a frame); the first one written up to `pos`, its
    first `done` frames; `owed`: frames the next FINs write fewer."""

    __slots__ = ("chunks", "pos", "done", "owed")

    def __init__(self) -> None:
        # (frames, CLOCK_MONOTONIC ns held, their ends: a memoryview of u32)
        self.chunks: deque[tuple[memoryview, int, memoryview]] = deque()
        self.pos = 0
        self.done = 0
        self.owed = 0

    def __bool__(self) -> bool:
        """Frames are held."""
        return bool(self.chunks)

    def hold(self, frames: memoryview) -> int:
        """Hold frames; how many whole ones they are."""
        ends = memoryview(frame_ends(frames)).cast("I")
        self.chunks.append((frames, time.monotonic_ns(), ends))
        return len(ends)

    def owe(self) -> None:
        """A FIN or REQ was refused: it freed no room."""
        self.owed += 1

    def write(self, k: int, write: Callable[[memoryview], None]) -> int:
        """k FINs or REQs came: write up to k held frames (fewer by what is owed), oldest
        first, in one write per DELIVER_AHEAD; how many were written."""
        if self.owed:
            skip = min(self.owed, k)
            self.owed -= skip
            k -= skip
        return self._write_oldest(k, write)

    def write_within(self, frames: memoryview, write: Callable[[memoryview], None]) -> None:
        """A DELIVER's frames, within the client's RDY: as many of the oldest frames, so
        that what is held does not fall behind what is sent after it (the router counts
        how many are held, not which)."""
        self._write_oldest(self.hold(frames), write)

    def _write_oldest(self, k: int, write: Callable[[memoryview], None]) -> int:
        written = 0
        chunks = self.chunks
        while written < k and chunks:
            frames, _, ends = chunks[0]
            upto = min(self.done + k - written, len(ends))
            if upto > self.done:
                end = ends[upto - 1]
                write(frames[self.pos:end])
                written += upto - self.done
            if upto >= len(ends):
                chunks.popleft()
                self.pos = self.done = 0
            else:
                self.pos, self.done = end, upto
        return written

    def take(self, older_than: int | None = None) -> bytes:
        """The held frames not yet written (only those held since before older_than,
        CLOCK_MONOTONIC ns, when given), no longer held."""
        out = []
        chunks = self.chunks
        while chunks and (older_than is None or chunks[0][1] < older_than):
            out.append(chunks.popleft()[0][self.pos:])
            self.pos = self.done = 0
        return b"".join(out)
