"""Which acceptor a new TCP connection goes to: packed onto the fewest acceptors the load needs.

With SO_REUSEPORT alone the kernel hashes every new connection to one of the acceptors'
listening sockets. On a machine where the clients share the cores with the broker, a
connection on a second acceptor costs more than it brings: two processes wake where one
would, each with fewer connections ready per wake-up, and the router hands deliveries to
two rings. Measured on 2 cores with nsq 1.3.0's tools (docs/performance.md), everything
on one acceptor against the hash's split: PUB on 4 connections 44-49k/s against 37-40k,
the reader on 2 connections 770-840k/s against 660-680k, mixed out 560-620k against
450-540k, MPUB on 4 connections 2.14-2.33M against 1.98-2.21M.

So the supervisor steers (``--acceptor-steering pack``, the default): new connections go
to the first acceptor, in slot order, that is ready, beat within the last second, and
used less than ``BUSY_SHARE`` of a core over the last quarter second; once every one is
that busy, the kernel's hash spreads them again. The decision is a one-instruction
classic BPF program attached to the TCP listening group (SO_ATTACH_REUSEPORT_CBPF),
returning the index of the chosen socket in the group; an index past the group's end
makes the kernel fall back to its hash. The
supervisor holds every listening socket for the broker's life (listeners.py), so the
group keeps them in slot order and socket i is acceptor i's for good. A dead acceptor is
skipped until its successor is ready, and a stuck one until it beats again, so new
clients do not wait in their backlog.

An acceptor holding ``PACK_MAX_CONNECTIONS`` (64), or that took ``STORM_CONNECTIONS``
(8) since the last reading at a storm's rate (8 per ``STORM_SECONDS``), counts as busy
too; and it hands new connections to the kernel's hash itself the moment it takes its
64th, or its 8th within ``STORM_SECONDS`` (nsqmp/reuseport.py), so a reconnection storm
(every client of a restarted broker, within one of the supervisor's readings) does not
land whole on one acceptor. The supervisor attaches its choice again at every reading,
which ends such a hand-over. Established connections never move. ``--acceptor-steering
spread`` keeps the kernel's hash. HTTP connections, short and stateless, are always
hashed.
"""
from __future__ import annotations

import logging
import socket

from nsqmp.metrics.procfs import cpu_and_rss
from nsqmp.reuseport import PACK_MAX_CONNECTIONS, STORM_CONNECTIONS, STORM_SECONDS, attach_index

log = logging.getLogger("nsqmp.supervisor")

# An acceptor that used this share of one core since the last reading takes no more new
# connections while a later one is under it (nor one holding PACK_MAX_CONNECTIONS)
BUSY_SHARE = 0.8
# The shortest interval a share is read over (the supervisor's loop may turn sooner, on a signal)
MIN_INTERVAL = 0.2


class Steering:
    """The supervisor's choice of acceptor for new TCP connections (see the module doc)."""

    def __init__(self, sock: socket.socket, acceptors: int) -> None:
        self.sock = sock
        self.acceptors = acceptors
        self.target = -1  # the index the attached program returns; -1: none attached yet
        self._seen: dict[int, float] = {}  # pid -> its CPU seconds at the last reading
        self.enabled = True
        self._at = float("-inf")  # when the shares were last read
        self._conns: dict[int, int] = {}  # acceptor -> the connections it held at the last reading

    def start(self) -> None:
        """Before the acceptors start: the first connections wait for acceptor 0."""
        self._attach(0)

    def update(self, pids: list[int], now: float, conns: list[int] | None = None) -> None:
        """One supervisor tick: pids[i] is acceptor i's process, 0 while it is not ready,
        conns[i] the connections it holds. Attaches the program at every reading, changed
        or not: an acceptor may have handed new connections to the hash meanwhile (a
        storm), and this reading takes the choice back."""
        if not self.enabled or now - self._at < MIN_INTERVAL:
            return  # CPU time moves in 10 ms ticks: a share needs a longer interval
        interval, self._at = now - self._at, now  # at least MIN_INTERVAL (inf at the first)
        # new connections since the last reading that make a storm: STORM_CONNECTIONS at
        # least, at STORM_CONNECTIONS per STORM_SECONDS or faster (readings may come later)
        storm = max(STORM_CONNECTIONS, STORM_CONNECTIONS * interval / STORM_SECONDS)
        target = self.acceptors  # past the end: the kernel's hash
        seen: dict[int, float] = {}
        for i, pid in enumerate(pids):
            if not pid:
                continue
            usage = cpu_and_rss(pid)
            cpu = seen[pid] = usage[0] if usage is not None else 0.0
            last = self._seen.get(pid)  # None: not ready at the last reading (no share yet)
            busy = last is not None and (cpu - last) / interval >= BUSY_SHARE
            if conns is not None:
                # full, or in a storm since the last reading
                busy = busy or conns[i] >= PACK_MAX_CONNECTIONS or conns[i] - self._conns.get(i, conns[i]) >= storm
            if not busy and target == self.acceptors:
                target = i
        self._seen = seen
        self._conns = dict(enumerate(conns)) if conns is not None else {}
        self._attach(target)

    def _attach(self, target: int) -> None:
        try:
            attach_index(self.sock, target)
        except OSError as exc:
            self.enabled = False
            log.warning("cannot steer new connections (%s): the kernel's hash spreads them", exc.strerror)
            return
        self.target = target
