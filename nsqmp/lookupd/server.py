"""The nsqlookupd process: bind, serve TCP V1 and HTTP on one uvloop loop, stop on a signal.

Start-up logs nsqlookupd's lines with the ports actually bound (port 0 picks a free one)::

    [nsqlookupd] 2026/11/22 10:00:00.000000 INFO: nsqlookupd v1.3.0 (built w/...)
    [nsqlookupd] 2026/11/22 10:00:00.000100 INFO: TCP: listening on [::]:4160
    [nsqlookupd] 2026/11/22 10:00:00.000200 INFO: HTTP: listening on [::]:4161

An address whose host is empty or 0.0.0.0 listens on every interface, IPv6 included where
the system has it, and is shown as ``[::]`` -- what Go's net.Listen does and logs.

SIGTERM or SIGINT only sets an event; the shutdown sequence is nsqlookupd's Exit: close
the TCP listener, close the brokers' connections, close the HTTP listener; exit code 0.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket

import uvloop

from nsqmp.lookupd import VERSION, version_string
from nsqmp.lookupd.http import HttpConnection
from nsqmp.lookupd.options import Options
from nsqmp.lookupd.registry import RegistrationDB
from nsqmp.lookupd.tcp import LookupConnection

log = logging.getLogger("nsqmp.lookupd")


class ListenError(Exception):
    pass


def _split_host_port(address: str) -> tuple[str, str]:
    """Go's net.SplitHostPort."""
    if address.startswith("["):
        close = address.find("]")
        if close < 0:
            raise ListenError(f"address {address}: missing ']' in address")
        host, rest = address[1:close], address[close + 1:]
        if not rest.startswith(":"):
            raise ListenError(f"address {address}: missing port in address")
        return host, rest[1:]
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ListenError(f"address {address}: missing port in address")
    if ":" in host:
        raise ListenError(f"address {address}: too many colons in address")
    return host, port


def bind(address: str) -> tuple[socket.socket, str]:
    """A listening socket for a Go-style ``host:port`` and the address as Go would show it."""
    host, port_text = _split_host_port(address)
    try:
        port = int(port_text) if port_text.isdigit() else socket.getservbyname(port_text, "tcp")
    except OSError:
        raise ListenError(f"listen tcp {address}: unknown port") from None
    if not 0 <= port <= 65535:
        raise ListenError(f"listen tcp {address}: invalid port")
    if host in ("", "0.0.0.0", "::") and socket.has_ipv6:
        candidates: list[tuple[socket.AddressFamily, str]] = [
            (socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")]  # dual stack first
    else:
        try:
            infos = socket.getaddrinfo(host or "0.0.0.0", port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ListenError(f"listen tcp {address}: lookup {host}: {exc.strerror}") from None
        infos.sort(key=lambda i: i[0] != socket.AF_INET)  # Go prefers IPv4 for a name
        candidates = [(infos[0][0], str(infos[0][4][0]))]
    last: OSError | None = None
    for family, ip in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and ip == "::":
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((ip, port))
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            last = exc
            if exc.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL) and len(candidates) > 1:
                continue  # no IPv6 here: plain IPv4
            break
        bound_ip, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_ip}]:{bound_port}" if family == socket.AF_INET6 else f"{bound_ip}:{bound_port}"
        return sock, shown
    reason = os.strerror(last.errno) if last and last.errno else str(last)
    raise ListenError(f"listen tcp {address}: bind: {reason[:1].lower()}{reason[1:]}")


class LookupdServer:
    """The registry and both listeners. __init__ holds plain data; run() does the rest."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.version = VERSION
        self.hostname = socket.gethostname()
        self.inactive_ns = round(opts.inactive_producer_timeout * 1e9)
        self.tombstone_ns = round(opts.tombstone_lifetime * 1e9)
        self.db = RegistrationDB()
        self.connections: set = set()
        self.tcp_port = 0
        self.http_port = 0

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT; the exit code (0, or 1 if it could not listen)."""
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(self._serve())

    async def _serve(self) -> int:
        loop = asyncio.get_running_loop()
        log.info("%s", version_string())
        try:
            tcp_sock, tcp_shown = bind(self.opts.tcp_address)
            try:
                http_sock, http_shown = bind(self.opts.http_address)
            except ListenError:
                tcp_sock.close()
                raise
        except ListenError as exc:
            log.critical("failed to instantiate nsqlookupd - %s", exc)
            return 1
        self.tcp_port = tcp_sock.getsockname()[1]
        self.http_port = http_sock.getsockname()[1]
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        tcp_server = await loop.create_server(lambda: LookupConnection(self), sock=tcp_sock)
        log.info("TCP: listening on %s", tcp_shown)
        http_server = await loop.create_server(lambda: HttpConnection(self), sock=http_sock)
        log.info("HTTP: listening on %s", http_shown)

        await stop.wait()
        tcp_server.close()
        log.info("TCP: closing %s", tcp_shown)
        for conn in list(self.connections):
            if isinstance(conn, LookupConnection):
                conn.close()
        http_server.close()
        log.info("HTTP: closing %s", http_shown)
        for conn in list(self.connections):
            conn.close()
        await tcp_server.wait_closed()
        await http_server.wait_closed()
        return 0
