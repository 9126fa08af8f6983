"""systemd's notify protocol (sd_notify), written out: one datagram per state change.

With ``Type=notify`` systemd passes ``NOTIFY_SOCKET`` (a unix datagram socket; a leading
``@`` names one in the abstract namespace) and, when ``WatchdogSec=`` is set,
``WATCHDOG_USEC`` (and ``WATCHDOG_PID``, the process meant). The supervisor sends
``READY=1`` once every acceptor announced it is serving, ``STOPPING=1`` when a graceful
stop begins, and ``WATCHDOG=1`` every half watchdog period from its loop. Without
``NOTIFY_SOCKET`` every call does nothing.
"""
from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger("nsqmp.supervisor")


class Notifier:
    """The supervisor's link to its service manager (systemd), if it has one."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self.address = "\0" + address[1:] if address.startswith("@") else address
        self.interval = 0.0  # seconds between WATCHDOG=1; 0: no watchdog
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        if self.address and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.interval = int(usec) / 2e6
        self.next_beat = 0.0
        self.sock: socket.socket | None = None
        if self.address:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    def send(self, text: str) -> None:
        """One datagram of newline-separated assignments; failures are logged, never raised."""
        if self.sock is None:
            return
        try:
            self.sock.sendto(text.encode(), self.address)
        except OSError as exc:
            log.warning("cannot notify the service manager at %r: %s", self.address, exc.strerror)

    def ready(self, status: str) -> None:
        """READY=1: the broker accepts clients on every acceptor."""
        self.send(f"READY=1\nSTATUS={status}\nMAINPID={os.getpid()}")
        self.beat()

    def stopping(self) -> None:
        """STOPPING=1: a graceful stop has begun."""
        self.send("STOPPING=1\nSTATUS=stopping")

    def beat(self) -> None:
        """WATCHDOG=1 if a watchdog is configured and half its period has passed."""
        if not self.interval:
            return
        now = time.monotonic()
        if now >= self.next_beat:
            self.send("WATCHDOG=1")
            self.next_beat = now + self.interval

    def wait_limit(self, seconds: float) -> float:
        """seconds, or less if the next WATCHDOG=1 falls due sooner."""
        if not self.interval:
            return seconds
        return max(0.0, min(seconds, self.next_beat - time.monotonic()))

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
