"""Where the locust users find the broker: locust's --host or --nsqd-tcp-address.

A module of its own, without locust (which monkey-patches the process it is imported in
with gevent), so that it can be tested in place.
"""
from __future__ import annotations

DEFAULT_ADDRESS = "127.0.0.1:4150"


def broker_address(flag: str | None, host: str | None) -> str:
    """HOST:PORT of the broker's TCP port: --nsqd-tcp-address when given, else locust's
    host as `tcp://HOST:PORT` (or a bare HOST:PORT), else 127.0.0.1:4150. An http(s)://
    host is refused: the users speak NSQ's TCP protocol, not HTTP."""
    if flag:
        return flag
    if not host:
        return DEFAULT_ADDRESS
    scheme, sep, rest = host.strip().partition("://")
    if not sep:
        scheme, rest = "tcp", host.strip()
    if scheme != "tcp":
        raise ValueError(f"--host must be tcp://HOST:PORT (the broker's TCP port), not {host!r}")
    rest = rest.rstrip("/")
    name, colon, port = rest.rpartition(":")
    if not colon or not name or not port.isdigit():
        raise ValueError(f"--host must be tcp://HOST:PORT, not {host!r}")
    return f"{name}:{port}"
