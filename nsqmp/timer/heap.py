"""Deadlines keyed by (owner, token), earliest first: picks the implementation.

``DeadlineHeap`` is the native indexed heap ``nsqmp._native.DeadlineHeap`` (``native/heap.h``)
unless the environment variable ``NSQMP_PURE_PYTHON=1`` is set or the extension is missing
or lacks it, in which case it is the pure-Python twin :class:`PyDeadlineHeap` defined here.
Both have the same API, errors and results; the tests run the same scripts on both.

An entry is a key (owner u32, token u64) with a deadline (i64, CLOCK_MONOTONIC ns). The
owner is the slot number of the router that armed it. Entries are ordered by
(deadline, owner, token), a total order, so the order of ``pop_due`` is fully determined.

API (``/`` marks positional-only parameters)::

    arm(owner, token, deadline, /) -> bool     True if the key was new; an armed key moves
    disarm(owner, token, /) -> bool            True if it was armed
    get(owner, token, /) -> int | None         its deadline
    arm_many(owner, buf, /) -> int             buf = ARM record payload: little-endian
                                               (token u64, deadline i64) pairs, applied in
                                               order; returns how many keys were new
    disarm_many(owner, buf, /) -> int          buf = DISARM payload: little-endian u64 tokens;
                                               returns how many were armed
    next_deadline() -> int | None
    pop_due(now, max_count=None) -> list[tuple[int, bytes]]
        removes the entries with deadline <= now (at most max_count, earliest first) and
        returns [(owner, tokens)] sorted by owner, each tokens the little-endian u64 tokens
        in the order they left the heap: the payload of that owner's FIRE record
    forget_owner(owner, /) -> int              drops every entry of owner
    len(heap)

Errors: TypeError for a non-integer argument or a non-bytes-like / non-contiguous buffer;
ValueError for owner outside [0, 2**32), token outside [0, 2**64), deadline outside the
i64 range, a negative max_count, and a buffer whose length is not a multiple of 16
(arm_many) or 8 (disarm_many); a rejected call changes nothing. ``now`` may be any
integer (beyond the i64 range it means "before/after everything").
"""

from __future__ import annotations

import heapq
import os
import sys
from array import array
from operator import index
from typing import Any

from nsqmp.ipc.records import TOKEN, TOKEN_DEADLINE

__all__ = ["DeadlineHeap", "NativeDeadlineHeap", "PyDeadlineHeap"]

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_PAIR = TOKEN_DEADLINE  # an ARM's entry (nsqmp.ipc.records)
_TOKEN = TOKEN  # a DISARM's or FIRE's entry
_SWAP = sys.byteorder != "little"


def _owner(value: Any) -> int:
    v = index(value)
    if not 0 <= v <= _U32:
        raise ValueError(f"owner must be an integer in [0, {_U32}]")
    return v


def _token(value: Any) -> int:
    v = index(value)
    if not 0 <= v <= _U64:
        raise ValueError(f"token must be an integer in [0, {_U64}]")
    return v


def _deadline(value: Any) -> int:
    v = index(value)
    if not _I64_MIN <= v <= _I64_MAX:
        raise ValueError("deadline must be an integer in [-2**63, 2**63 - 1]")
    return v


def _records(buf: Any, unit: int) -> memoryview:
    """buf as a flat byte view whose length is a multiple of unit (the native checks)."""
    try:
        view = memoryview(buf)
    except TypeError:
        raise TypeError(
            f"buf must be a contiguous bytes-like object, not {type(buf).__name__}"
        ) from None
    if not view.c_contiguous:
        raise TypeError(
            f"buf must be a contiguous bytes-like object, not {type(buf).__name__}"
        )
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if view.nbytes % unit:
        raise ValueError(f"buf length {view.nbytes} is not a multiple of {unit}")
    return view


class PyDeadlineHeap:
    """Pure-Python twin of ``nsqmp._native.DeadlineHeap``: a binary heap with lazy deletion.

    ``_live`` maps each armed key to its deadline; ``_heap`` holds (deadline, owner, token)
    tuples, some of them stale (disarmed or moved). A tuple counts only while ``_live``
    still maps its key to its deadline; a stale copy equal to the live tuple is harmless
    because whichever copy pops first removes the key. The heap is rebuilt from ``_live``
    when stale tuples outnumber live ones, so memory stays proportional to the entries.
    """

    __slots__ = ("_heap", "_live", "_peak")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int]] = []
        self._live: dict[tuple[int, int], int] = {}
        self._peak = 0  # most entries since the dict was last rebuilt

    def __len__(self) -> int:
        return len(self._live)

    def __repr__(self) -> str:
        return f"<PyDeadlineHeap entries={len(self._live)}>"

    # -- internal -------------------------------------------------------------------
    def _compact(self, stale: bool = False) -> None:
        """Drop stale tuples once they outnumber the live ones (or now, if stale) and
        give memory back once three quarters of the entries are gone."""
        live = len(self._live)
        if live > self._peak:
            self._peak = live
        elif live * 4 < self._peak and self._peak > 1024:
            # a dict never shrinks on deletion: copy it, and rebuild the heap with it
            self._live = dict(self._live)
            self._peak = live
            stale = True
        if stale or len(self._heap) > 2 * live + 1024:
            self._rebuild()

    def _rebuild(self) -> None:
        heap = [(d, o, t) for (o, t), d in self._live.items()]
        heapq.heapify(heap)
        self._heap = heap

    # -- one entry ------------------------------------------------------------------
    def arm(self, owner: int, token: int, deadline: int, /) -> bool:
        owner, token, deadline = _owner(owner), _token(token), _deadline(deadline)
        key = (owner, token)
        old = self._live.get(key)
        if old == deadline:
            return False
        self._live[key] = deadline
        heapq.heappush(self._heap, (deadline, owner, token))
        if old is None:
            self._peak = max(self._peak, len(self._live))
            return True
        self._compact()
        return False

    def disarm(self, owner: int, token: int, /) -> bool:
        key = (_owner(owner), _token(token))
        if self._live.pop(key, None) is None:
            return False
        self._compact()
        return True

    def get(self, owner: int, token: int, /) -> int | None:
        return self._live.get((_owner(owner), _token(token)))

    # -- batches (record payloads) -----------------------------------------------------
    def arm_many(self, owner: int, buf: Any, /) -> int:
        owner = _owner(owner)
        added = 0
        live = self._live
        heap = self._heap
        push = heapq.heappush
        with _records(buf, _PAIR.size) as view:
            for token, deadline in _PAIR.iter_unpack(view):
                key = (owner, token)
                old = live.get(key)
                if old == deadline:
                    continue
                live[key] = deadline
                push(heap, (deadline, owner, token))
                if old is None:
                    added += 1
        self._compact()
        return added

    def disarm_many(self, owner: int, buf: Any, /) -> int:
        owner = _owner(owner)
        removed = 0
        pop = self._live.pop
        with _records(buf, _TOKEN.size) as view:
            for (token,) in _TOKEN.iter_unpack(view):
                if pop((owner, token), None) is not None:
                    removed += 1
        if removed:
            self._compact()
        return removed

    # -- due entries ----------------------------------------------------------------
    def next_deadline(self) -> int | None:
        heap = self._heap
        live = self._live
        while heap:
            deadline, owner, token = heap[0]
            if live.get((owner, token)) == deadline:
                return deadline
            heapq.heappop(heap)  # stale: disarmed or moved
        return None

    def pop_due(
        self, now: int, max_count: int | None = None
    ) -> list[tuple[int, bytes]]:
        now = index(now)
        if max_count is None:
            limit = -1
        else:
            limit = index(max_count)
            if limit < 0:
                raise ValueError("max_count must be >= 0 or None")
        heap = self._heap
        live = self._live
        heappop = heapq.heappop
        groups: dict[int, list[int]] = {}
        popped = 0
        while heap and popped != limit and heap[0][0] <= now:
            deadline, owner, token = heappop(heap)
            key = (owner, token)
            if live.get(key) != deadline:
                continue
            del live[key]
            popped += 1
            tokens = groups.get(owner)
            if tokens is None:
                groups[owner] = [token]
            else:
                tokens.append(token)
        out = []
        for owner in sorted(groups):
            packed = array("Q", groups[owner])
            if _SWAP:  # pragma: no cover - big-endian hosts
                packed.byteswap()
            out.append((owner, packed.tobytes()))
        if popped:
            self._compact()
        return out

    def forget_owner(self, owner: int, /) -> int:
        owner = _owner(owner)
        live = self._live
        gone = [key for key in live if key[0] == owner]
        for key in gone:
            del live[key]
        if gone:
            self._compact(stale=True)
        return len(gone)


NativeDeadlineHeap: Any
try:
    from nsqmp import _native
except ImportError:  # extension not built
    NativeDeadlineHeap = None
else:
    NativeDeadlineHeap = getattr(_native, "DeadlineHeap", None)

DeadlineHeap: Any
if NativeDeadlineHeap is not None and os.environ.get("NSQMP_PURE_PYTHON", "") != "1":
    DeadlineHeap = NativeDeadlineHeap
else:
    DeadlineHeap = PyDeadlineHeap
