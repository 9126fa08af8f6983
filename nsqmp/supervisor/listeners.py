"""Listening sockets, bound by the supervisor before it forks.

Each acceptor slot gets its own SO_REUSEPORT socket on the same address, so the kernel
spreads connections over the acceptors. The supervisor keeps every socket open: a
restarted acceptor takes over its predecessor's socket and backlog, and a port taken by
someone else is reported once, at start, as one clear line.
"""
from __future__ import annotations

import socket


class ListenError(Exception):
    pass


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def bind_group(what: str, address: str, count: int, backlog: int = 1024) -> list[socket.socket]:
    """`count` listening sockets sharing one address (port 0: the first one picks it)."""
    host, port = _split(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # first make sure nobody else holds the port (SO_REUSEPORT would happily share it)
    if port:
        probe = socket.socket(family, socket.SOCK_STREAM)
        # SO_REUSEADDR (as Go's listeners): old connections in TIME_WAIT from a previous
        # run don't block a restart on the same port, while a live listener still does
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ListenError(f"{what}: cannot listen on {address}: {exc.strerror}") from None
        finally:
            probe.close()
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind((host, port))
            s.listen(backlog)
            s.setblocking(False)
            port = s.getsockname()[1]
            socks.append(s)
    except OSError as exc:
        for s in socks:
            s.close()
        raise ListenError(f"{what}: cannot listen on {address}: {exc.strerror}") from None
    return socks
