"""The registration DB: everything nsqlookupd knows, in memory only.

A :class:`Registration` is a (category, key, subkey) triple, as in nsqlookupd::

    ("client",  "",    "")         every broker that has IDENTIFYed
    ("topic",   topic, "")         a topic, and the brokers that have it
    ("channel", topic, channel)    a channel, and the brokers that have it

Each registration maps peer id (the broker connection's remote address) to a
:class:`Producer`: the broker's :class:`PeerInfo`, shared by all its registrations, plus
a tombstone that belongs to that one (registration, broker) pair.

A registration can exist with no producers: HTTP /topic/create makes one, and removing a
broker's last producer leaves the key in place. Keys go away only through /topic/delete,
/channel/delete and UNREGISTER's ephemeral rules, exactly as in nsqlookupd.

``"*"`` as key or subkey is a wildcard in :meth:`RegistrationDB.find_registrations` and
:meth:`RegistrationDB.find_producers` (so ``/lookup?topic=*`` answers for every topic, as
nsqlookupd's does). The common exact look-ups are dictionary hits: registrations are
indexed by category, by topic (for its channels) and by peer (for disconnects and /nodes).
"""
from __future__ import annotations

import time
from typing import NamedTuple

from nsqmp.lookupd.gojson import dumps

CLIENT, TOPIC, CHANNEL = "client", "topic", "channel"
WILDCARD = "*"

# time.Time{}.UnixNano() in Go: what nsqlookupd's /debug shows for "never tombstoned"
GO_ZERO_TIME_UNIX_NANO = -6795364578871345152


class Registration(NamedTuple):
    category: str
    key: str
    subkey: str

    def is_match(self, category: str, key: str, subkey: str) -> bool:
        return (self.category == category
                and (key == WILDCARD or self.key == key)
                and (subkey == WILDCARD or self.subkey == subkey))


CLIENT_REGISTRATION = Registration(CLIENT, "", "")


class PeerInfo:
    """What a broker said about itself in IDENTIFY, plus when it was last heard from."""

    __slots__ = ("id", "remote_address", "hostname", "broadcast_address", "tcp_port", "http_port",
                 "version", "topology_zone", "topology_region", "last_update", "_json")

    def __init__(self, id: str, remote_address: str, *, hostname: str = "", broadcast_address: str = "",
                 tcp_port: int = 0, http_port: int = 0, version: str = "", topology_zone: str = "",
                 topology_region: str = "", last_update: int | None = None) -> None:
        self.id = id
        self.remote_address = remote_address
        self.hostname = hostname
        self.broadcast_address = broadcast_address
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.version = version
        self.topology_zone = topology_zone
        self.topology_region = topology_region
        self.last_update = time.time_ns() if last_update is None else last_update
        self._json: bytes | None = None

    def as_dict(self) -> dict:
        """The peer as nsqlookupd's /lookup shows it (its PeerInfo struct's field order)."""
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
            "topology_zone": self.topology_zone,
            "topology_region": self.topology_region,
        }

    @property
    def json(self) -> bytes:
        # these fields never change after IDENTIFY: /lookup joins the cached bytes
        if self._json is None:
            self._json = dumps(self.as_dict())
        return self._json

    def __repr__(self) -> str:
        return f"{self.broadcast_address} [{self.tcp_port}, {self.http_port}]"


class Producer:
    """One broker in one registration."""

    __slots__ = ("peer", "tombstoned", "tombstoned_at")

    def __init__(self, peer: PeerInfo) -> None:
        self.peer = peer
        self.tombstoned = False
        self.tombstoned_at = GO_ZERO_TIME_UNIX_NANO

    def tombstone(self, now_ns: int | None = None) -> None:
        self.tombstoned = True
        self.tombstoned_at = time.time_ns() if now_ns is None else now_ns

    def is_tombstoned(self, lifetime_ns: int, now_ns: int) -> bool:
        return self.tombstoned and now_ns - self.tombstoned_at < lifetime_ns


def filter_by_active(producers: list[Producer], inactive_ns: int, tombstone_ns: int,
                     now_ns: int | None = None) -> list[Producer]:
    """The producers heard from within ``inactive_ns`` and not tombstoned within
    ``tombstone_ns`` (nsqlookupd's FilterByActive)."""
    now = time.time_ns() if now_ns is None else now_ns
    return [p for p in producers
            if not (now - p.peer.last_update > inactive_ns or p.is_tombstoned(tombstone_ns, now))]


class RegistrationDB:
    """Registration -> {peer id -> Producer}, with indexes for the exact look-ups."""

    def __init__(self) -> None:
        self._map: dict[Registration, dict[str, Producer]] = {}
        # ordered sets (dicts of None): insertion order is the order listings show
        self._by_category: dict[str, dict[Registration, None]] = {CLIENT: {}, TOPIC: {}, CHANNEL: {}}
        self._channels_of: dict[str, dict[Registration, None]] = {}
        self._by_peer: dict[str, dict[Registration, None]] = {}

    def __len__(self) -> int:
        return len(self._map)

    # -- changes ---------------------------------------------------------------------------
    def _producers(self, k: Registration) -> dict[str, Producer]:
        producers = self._map.get(k)
        if producers is None:
            producers = self._map[k] = {}
            self._by_category.setdefault(k.category, {})[k] = None
            if k.category == CHANNEL:
                self._channels_of.setdefault(k.key, {})[k] = None
        return producers

    def add_registration(self, k: Registration) -> None:
        """Make sure ``k`` exists (with no producers if it is new)."""
        self._producers(k)

    def add_producer(self, k: Registration, producer: Producer) -> bool:
        """Add ``producer`` to ``k`` (creating ``k``); False if that peer was already there,
        in which case the existing producer (and its tombstone) stays."""
        producers = self._producers(k)
        pid = producer.peer.id
        if pid in producers:
            return False
        producers[pid] = producer
        self._by_peer.setdefault(pid, {})[k] = None
        return True

    def remove_producer(self, k: Registration, peer_id: str) -> tuple[bool, int]:
        """Remove a peer from ``k``: (whether it was there, producers left). The key stays."""
        producers = self._map.get(k)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        if removed:
            self._unindex_peer(peer_id, k)
        return removed, len(producers)

    def remove_registration(self, k: Registration) -> None:
        """Remove ``k`` and all its producers."""
        producers = self._map.pop(k, None)
        if producers is None:
            return
        del self._by_category[k.category][k]
        if k.category == CHANNEL:
            channels = self._channels_of[k.key]
            del channels[k]
            if not channels:
                del self._channels_of[k.key]
        for peer_id in producers:
            self._unindex_peer(peer_id, k)

    def _unindex_peer(self, peer_id: str, k: Registration) -> None:
        regs = self._by_peer.get(peer_id)
        if regs is not None:
            regs.pop(k, None)
            if not regs:
                del self._by_peer[peer_id]

    # -- queries ---------------------------------------------------------------------------
    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        if key != WILDCARD and subkey != WILDCARD:
            k = Registration(category, key, subkey)
            return [k] if k in self._map else []
        if category == CHANNEL and key != WILDCARD:  # the channels of one topic
            return [k for k in self._channels_of.get(key, ()) if k.is_match(category, key, subkey)]
        return [k for k in self._by_category.get(category, ()) if k.is_match(category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """The producers of the matching registrations, each peer once (its first match)."""
        if key != WILDCARD and subkey != WILDCARD:
            return list(self._map.get(Registration(category, key, subkey), {}).values())
        seen: set[str] = set()
        out: list[Producer] = []
        for k in self.find_registrations(category, key, subkey):
            for pid, producer in self._map[k].items():
                if pid not in seen:
                    seen.add(pid)
                    out.append(producer)
        return out

    def producer(self, k: Registration, peer_id: str) -> Producer | None:
        producers = self._map.get(k)
        return None if producers is None else producers.get(peer_id)

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every registration that peer is a producer of."""
        return list(self._by_peer.get(peer_id, ()))

    def items(self) -> list[tuple[Registration, list[Producer]]]:
        """Every registration with its producers (for /debug)."""
        return [(k, list(producers.values())) for k, producers in self._map.items()]
