"""How long this process's background syncs (fdatasync) took: a histogram with one bucket
per doubling of microseconds, its count and its sum.

``segment.sync_file`` adds each sync it runs on the syncing thread: in an acceptor those
are its segment files' syncs (--sync-every, --sync-timeout, a full file's last), in a
router its ack logs'. The strict --sync-every=1 sync inside each append is not timed
(that is the per-message path). /metrics gathers every process's (nsqmp/metrics).
"""
from __future__ import annotations

BUCKETS = 28  # bucket i holds syncs of at most 2**i us; the last holds the rest (over ~67 s)


class SyncTimes:
    """Durations of syncs; added to by the syncing thread, read by the loop's thread
    (a snapshot may lag one sync behind between its fields: a scrape's view, no more)."""

    __slots__ = ("counts", "total_ns")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.total_ns = 0

    def add(self, ns: int) -> None:
        """One sync that took ns nanoseconds."""
        i = 0 if ns <= 1000 else min(BUCKETS - 1, ((ns - 1) // 1000).bit_length())
        self.counts[i] += 1
        self.total_ns += ns

    def snapshot(self) -> dict:
        """Plain data for a reply or a file: {"counts": [...], "total_ns": n}."""
        return {"counts": list(self.counts), "total_ns": self.total_ns}


SYNCS = SyncTimes()
