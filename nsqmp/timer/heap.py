"""Deadlines by token, earliest first: a binary heap with lazy deletion.

Reference implementation; the delivery-guarantees work replaces the hot part with an
indexed heap in native/ and keeps this one as its twin.
"""
from __future__ import annotations

import heapq


class DeadlineHeap:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int]] = []  # (deadline_ns, owner, token)
        self._live: dict[tuple[int, int], int] = {}  # (owner, token) -> deadline_ns

    def __len__(self) -> int:
        return len(self._live)

    def arm(self, owner: int, token: int, deadline: int) -> None:
        self._live[(owner, token)] = deadline
        heapq.heappush(self._heap, (deadline, owner, token))

    def disarm(self, owner: int, token: int) -> None:
        self._live.pop((owner, token), None)

    def forget_owner(self, owner: int) -> None:
        for key in [k for k in self._live if k[0] == owner]:
            del self._live[key]

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            deadline, owner, token = heap[0]
            if self._live.get((owner, token)) == deadline:
                return deadline
            heapq.heappop(heap)  # stale: disarmed or re-armed
        return None

    def pop_due(self, now: int) -> list[tuple[int, int]]:
        """(owner, token) of every deadline <= now, removed."""
        due = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, owner, token = heapq.heappop(heap)
            if self._live.get((owner, token)) == deadline:
                del self._live[(owner, token)]
                due.append((owner, token))
        return due
