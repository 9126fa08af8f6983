"""The busy poll's look at the last publisher's socket (native/spin.c says why).

While the acceptor's busy poll is in its window, each of its ticks spins in C (for the
time busypoll gives it, at most its ``_SPIN_NS``) on the socket of the connection that
published last, and hands what comes to that connection's ``data_received``, as uvloop
would: a one-message publisher's next PUB is answered about 2 us sooner, soon enough
that its client has not gone to sleep.

It looks only where a read of the raw socket is what uvloop would have given the
connection: a plain TCP stream whose transport reads for the connection itself (not for
a TLS handshake's protocol, nor through TLS after it), reading not paused (flow control,
an upgrade waiting), the transport not closing (so its fd is not yet closed, nor reused
by another connection). Any other fd of the loop that is ready ends the spin
(``loop_fd``, the loop's epoll set, found once), and without that set it does not spin
at all.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from nsqmp._native import spin_read

if TYPE_CHECKING:
    from nsqmp.acceptor.tcp import V2Connection


def loop_epoll_fd() -> int:
    """The event loop's epoll fd: the process's only one, or -1 (then no spinning)."""
    found = []
    try:
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{name}") == "anon_inode:[eventpoll]":
                    found.append(int(name))
            except OSError:
                continue
    except OSError:
        return -1
    return found[0] if len(found) == 1 else -1


class HotSpin:
    __slots__ = ("loop_fd", "conn", "fd", "on_error", "spins", "reads")

    def __init__(self, loop_fd: int, on_error) -> None:
        self.loop_fd = loop_fd
        self.conn: V2Connection | None = None
        self.fd = -1
        self.on_error = on_error  # (conn, exc): what uvloop does when data_received raises
        self.spins = 0
        self.reads = 0  # spins that read something

    def published(self, conn: V2Connection) -> None:
        """conn published: it is the one to look at (its socket is found by the first
        spin on it, not here on every publish)."""
        if conn is not self.conn:
            self.conn, self.fd = conn, -1

    def forget(self, conn: V2Connection) -> None:
        if conn is self.conn:
            self.conn, self.fd = None, -1

    def __call__(self, ns: int) -> None:
        conn = self.conn
        if conn is None or conn.closed or conn.tls or conn.waiting_for or not conn.flow.reading:
            return
        transport = conn.transport
        if transport is None or transport.is_closing() or not transport.is_reading() \
                or transport.get_protocol() is not conn:  # a TLS handshake's, say
            return
        if self.fd < 0:
            sock = transport.get_extra_info("socket")
            if sock is None:
                return
            self.fd = sock.fileno()
        self.spins += 1
        data = spin_read(self.fd, self.loop_fd, ns)
        if data is None:
            return
        self.reads += 1
        try:
            conn.data_received(data)
        except Exception as exc:  # noqa: BLE001 - as the loop would: report, close
            self.on_error(conn, exc)
