"""Real brokers registered with real lookupds: starting them and reading what the lookupds
say about them (tests/lookupd/test_registration.py, test_cluster.py)."""
from __future__ import annotations

BROADCAST = ("--broadcast-address", "127.0.0.1")


def start_lookupd(make_lookupd, *flags: str):
    return make_lookupd("-broadcast-address=127.0.0.1", *flags)


def start_broker(make_broker, *lookupds, extra: tuple[str, ...] = ()):
    args: list[str] = [*BROADCAST, "--acceptors", "2"]
    for lookupd in lookupds:
        args += ["--lookupd-tcp-address", lookupd.tcp_address]
    return make_broker(*args, *extra)


def node(lookupd, broker) -> dict | None:
    """The broker as the lookupd's /nodes lists it, or None."""
    mine = [p for p in lookupd.get("/nodes")["producers"] if p["tcp_port"] == broker.tcp_port]
    assert len(mine) <= 1, mine  # one producer per broker, whatever its acceptor count
    return mine[0] if mine else None


def topics_of(lookupd, broker) -> list[str] | None:
    n = node(lookupd, broker)
    return None if n is None else sorted(n["topics"])


def channel_producers(lookupd, topic: str, channel: str) -> list[int]:
    """tcp ports of the producers registered on a channel (lookupd's /debug dump)."""
    return [p["tcp_port"] for p in lookupd.get("/debug").get(f"channel:{topic}:{channel}", [])]


def post(broker, path: str, body: bytes = b"") -> None:
    status, text, _ = broker.http("POST", path, body)
    assert status == 200, (path, status, text)
