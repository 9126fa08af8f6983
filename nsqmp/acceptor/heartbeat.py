"""Heartbeats and the read deadline of one V2 connection (nsqd's heartbeat and ReadTimeout).

nsqd sends a heartbeat every interval and sets a read deadline of two intervals before
every read. Re-arming a timer per read is too dear here (data_received only stamps
`conn.last_read`), so each beat checks the silence, and when the deadline falls before the
next beat it arms a one-off check for that moment: the connection closes two intervals
after the last thing read, as in nsqd, not at the following beat.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from nsqmp.protocol.frames import HEARTBEAT_FRAME

if TYPE_CHECKING:
    from nsqmp.acceptor.tcp import V2Connection

log = logging.getLogger("nsqmp.acceptor")

# the loop's timers have millisecond resolution
_SLACK = 0.005


class Heartbeat:
    """Arms, beats, checks the read deadline and expires one connection."""
    __slots__ = ("conn", "loop", "_beat", "_deadline")

    def __init__(self, conn: V2Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.conn = conn
        self.loop = loop
        self._beat: asyncio.TimerHandle | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        """Start beating at the connection's negotiated interval (none when it is <= 0)."""
        interval = self.conn.settings.heartbeat_interval_ms
        if interval <= 0 or self.conn.closed:
            return
        self._beat = self.loop.call_later(interval / 1000, self.beat)

    def rearm(self) -> None:
        """The interval changed (IDENTIFY): start again from now."""
        self.cancel()
        self.arm()

    def cancel(self) -> None:
        """No more beats or deadline checks (the connection closed)."""
        for handle in (self._beat, self._deadline):
            if handle is not None:
                handle.cancel()
        self._beat = self._deadline = None

    def silent_too_long(self) -> bool:
        """Nothing read for two intervals while reading (nsqd's read deadline)."""
        conn = self.conn
        # nsqd's read deadline only runs while it reads: not while a command is being served
        if conn.waiting_for:
            return False
        return time.monotonic() - conn.last_read >= 2 * conn.settings.heartbeat_interval_ms / 1000 - _SLACK

    def beat(self) -> None:
        """Send a heartbeat, or close a connection silent for too long."""
        self._beat = None
        if self.silent_too_long():
            self.expire()
            return
        conn = self.conn
        if conn.waiting_for != "TLS":  # nothing in the clear before the handshake (nsqd's waits too)
            conn.write(HEARTBEAT_FRAME)
        self.arm()
        interval = conn.settings.heartbeat_interval_ms / 1000
        due = conn.last_read + 2 * interval - time.monotonic()
        if due < interval and self._deadline is None:
            self._deadline = self.loop.call_later(due, self.check_deadline)

    def check_deadline(self) -> None:
        """The read deadline falls between two beats: close if still silent."""
        self._deadline = None
        if not self.conn.closed and self.silent_too_long():
            self.expire()

    def expire(self) -> None:
        """Two intervals of silence: close, as nsqd's failed read does."""
        log.info("%s: no command for two heartbeat intervals, closing", self.conn.remote)
        self.cancel()
        self.conn.close()
