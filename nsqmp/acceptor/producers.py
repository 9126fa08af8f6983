"""/stats "producers": the TCP connections that have published, on every acceptor.

nsqd lists every connection that has published (its pub_counts per topic). Here a
connection lives on one acceptor and /stats is answered by whichever acceptor the HTTP
request reached, so each acceptor publishes a snapshot of its producers in a small file
next to the run's shared-memory segments (``/dev/shm/nsqmp.<run pid>.producers.<i>``,
JSON, replaced atomically) at most every FLUSH_INTERVAL after a change; /stats reads its
own connections live and the other acceptors' snapshots. A file of a dead run is removed
with the run's stale segments (nsqmp.ipc.shm.remove_stale).
"""
from __future__ import annotations

import logging
import os

import orjson

from nsqmp.acceptor.clientstats import client_stats
from nsqmp.ipc import shm

log = logging.getLogger("nsqmp.acceptor")

FLUSH_INTERVAL = 0.5  # s: how stale another acceptor's producers may be in /stats
_DIR = "/dev/shm"


def board_path(run_pid: int, index: int) -> str:
    return f"{_DIR}/{shm.PREFIX}{run_pid}.producers.{index}"


class ProducerBoard:
    """This acceptor's snapshot writer and the reader of the others' snapshots."""

    def __init__(self, server) -> None:
        self.server = server
        self.path = board_path(server.plan.run_pid, server.index)
        self.scheduled = False  # a snapshot is due (read by Acceptor.published)
        self._removed = False

    def changed(self) -> None:
        """A connection published, or a producer left: write a new snapshot soon."""
        if not self.scheduled:
            self.scheduled = True
            self.server.loop.call_later(FLUSH_INTERVAL, self._flush)

    def _flush(self) -> None:
        self.scheduled = False
        self.write()

    def write(self) -> None:
        if self._removed:  # stopping: a flush still scheduled must not bring the file back
            return
        snapshot = [client_stats(c, None) for c in self.server.connections.values() if c.pub_counts]
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(orjson.dumps(snapshot))
            os.replace(tmp, self.path)
        except OSError as exc:  # /stats then misses this acceptor's producers; nothing else
            log.warning("cannot write the producer snapshot %s: %s", self.path, exc)

    def local(self, topic: str | None) -> list[dict]:
        return [client_stats(c, topic) for c in self.server.connections.values() if c.pub_counts]

    def others(self, topic: str | None) -> list[dict]:
        out: list[dict] = []
        for i in range(self.server.plan.acceptors):
            if i == self.server.index:
                continue
            try:
                with open(board_path(self.server.plan.run_pid, i), "rb") as f:
                    snapshot = orjson.loads(f.read())
            except (OSError, orjson.JSONDecodeError):
                continue  # not written yet (no producer there since it started)
            out += [filter_topic(s, topic) for s in snapshot]
        return out

    def remove(self) -> None:
        self._removed = True
        for path in (self.path, f"{self.path}.tmp"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def filter_topic(stats: dict, topic: str | None) -> dict:
    """nsqd's Stats(topic): only that topic's pub count; an empty list is left out."""
    if topic is None or "pub_counts" not in stats:
        return stats
    out = {}
    for key, value in stats.items():  # in place, keeping nsqd's field order
        if key == "pub_counts":
            value = [pc for pc in value if pc["topic"] == topic]
            if not value:
                continue
        out[key] = value
    return out
