"""The registrar: acceptor 0 speaks for the whole broker to every nsqlookupd.

A broker must look like one producer to each lookupd, as nsqd does with its one
connection per lookupd: so acceptor 0 alone holds them, one LookupPeer each, on its event
loop. Per connection (nsqd's lookupPeer and lookupLoop):

* connect with a 1 s deadline, send the magic, IDENTIFY (version, tcp_port, http_port,
  hostname, broadcast_address, topology), keep the lookupd's answer (its broadcast address
  and HTTP port, used for channel queries), then REGISTER ``topic`` for each topic without
  channels and ``topic channel`` for each pair;
* then REGISTER/UNREGISTER as the routers report topics and channels coming and going,
  and PING every 15 s; every write and read has a 1 s deadline;
* any failure closes the connection (the lookupd then forgets this producer) and it is
  dialed again after a backoff that doubles from BACKOFF_MIN up to BACKOFF_MAX.

Routers own topics and channels; they tell the registrar through the rings (LOOKUP_REG
per change, LOOKUP_STATE for everything a router owns when it or acceptor 0 starts), and
the registrar keeps a mirror per router, so every (re)connection registers the full list.
A router that creates a topic while lookupds are configured asks (CHANNELS_ASK) which
channels the lookupds know for it; the registrar asks each lookupd's ``/channels`` over
HTTP, within --http-client-request-timeout, and answers with the union (CHANNELS).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING
from urllib.parse import quote

import orjson

from nsqmp.acceptor.identify import VERSION
from nsqmp.config.options import parse_address
from nsqmp.ipc import records
from nsqmp.protocol import lookup_v1 as v1

if TYPE_CHECKING:
    from nsqmp.acceptor.role import Acceptor

log = logging.getLogger("nsqmp.registrar")

DEADLINE = 1.0            # dial, write and read deadline (nsqd's lookupPeer)
PING_INTERVAL = 15.0      # nsqd's lookupLoop ticker
BACKOFF_MIN = 0.25
BACKOFF_MAX = 15.0
BATCH = 256               # commands written before their responses are read (pipelined)
MAX_QUEUE = 100_000       # more changes than this waiting: reconnect and send the full list
MAX_HTTP_RESPONSE = 4 << 20


class LookupdError(Exception):
    """The lookupd answered with an error (it closes the connection after it)."""


class LookupPeer:
    """One lookupd: its connection, the commands waiting for it, what it told us."""

    def __init__(self, registrar: Registrar, address: str) -> None:
        self.registrar = registrar
        self.address = address
        parsed = parse_address(address)
        self.host = parsed.host or "127.0.0.1"
        self.port = parsed.port
        self.info: dict | None = None  # the IDENTIFY response, kept across reconnections
        self.connected = False  # IDENTIFYed and registered: changes are queued from now on
        self.queue: deque[bytes] = deque()
        self._wake = asyncio.Event()
        self._writer: asyncio.StreamWriter | None = None
        self._closed = False
        self._backoff = BACKOFF_MIN
        self.task = asyncio.get_running_loop().create_task(self._run())

    def __str__(self) -> str:
        return self.address

    def send(self, command: bytes) -> None:
        """Queue a REGISTER/UNREGISTER; dropped while disconnected (reconnecting sends all)."""
        if not self.connected:
            return
        self.queue.append(command)
        if len(self.queue) > MAX_QUEUE:
            log.warning("LOOKUPD(%s): %d changes waiting: reconnecting to send the full list",
                        self, len(self.queue))
            self._abort()
        self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._abort()
        self.task.cancel()

    def _abort(self) -> None:
        self.connected = False
        self.queue.clear()
        if self._writer is not None:
            self._writer.transport.abort()
            self._writer = None
        self._wake.set()

    # -- the connection's life ---------------------------------------------------------------
    async def _run(self) -> None:
        while not self._closed:
            try:
                await self._session()
            except asyncio.CancelledError:
                break
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, LookupdError, ValueError) as exc:
                if not self._closed:
                    log.error("LOOKUPD(%s): %s", self, _describe(exc))
            self._abort()
            if self._closed:
                break
            await asyncio.sleep(self._backoff)
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    async def _session(self) -> None:
        log.info("LOOKUP connecting to %s", self.address, extra={"lookupd": self.address})
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), DEADLINE)
        self._writer = writer
        writer.write(v1.MAGIC)
        (answer,) = await self._round_trip(reader, [v1.identify(orjson.dumps(self.registrar.identity()))])
        info = orjson.loads(answer)
        if not isinstance(info, dict):
            raise ValueError(f"IDENTIFY answered {answer[:200]!r}")
        self.info = info
        self._backoff = BACKOFF_MIN
        log.info("LOOKUPD(%s): peer info %s", self, info)
        if not info.get("broadcast_address"):
            log.error("LOOKUPD(%s): no broadcast address", self)
        # from this instant every change is queued: the full list below is complete up to now
        self.queue.clear()
        self.connected = True
        commands = self.registrar.register_commands()
        for cmd in commands:  # nsqd's lines for the full list it sends on connecting
            log.info("LOOKUPD(%s): %s", self, cmd.decode(errors="replace").strip())
        for start in range(0, len(commands), BATCH):
            await self._round_trip(reader, commands[start:start + BATCH])
        next_ping = time.monotonic() + PING_INTERVAL
        while not self._closed and self.connected:
            if not self.queue:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), max(0.0, next_ping - time.monotonic()))
                except asyncio.TimeoutError:
                    pass
            if not self.connected:
                break
            if time.monotonic() >= next_ping:
                log.debug("LOOKUPD(%s): sending heartbeat", self)
                await self._round_trip(reader, [v1.PING])
                next_ping = time.monotonic() + PING_INTERVAL
            batch = [self.queue.popleft() for _ in range(min(BATCH, len(self.queue)))]
            if batch:
                for cmd in batch:  # nsqd's Notify lines: "topic" or "channel", then the command
                    text = cmd.decode(errors="replace").strip()
                    log.info("LOOKUPD(%s): %s %s", self, "channel" if text.count(" ") > 1 else "topic", text)
                await self._round_trip(reader, batch)

    async def _round_trip(self, reader: asyncio.StreamReader, commands: list[bytes]) -> list[bytes]:
        """Write commands (pipelined), then read one response each, within the deadlines."""
        writer = self._writer
        if writer is None:
            raise ConnectionResetError("connection closed")
        writer.write(b"".join(commands))
        await asyncio.wait_for(writer.drain(), DEADLINE)
        answers = []
        for cmd in commands:
            head = await asyncio.wait_for(reader.readexactly(4), DEADLINE)
            (size,) = v1.SIZE.unpack(head)
            if not 0 <= size <= MAX_HTTP_RESPONSE:
                raise ValueError(f"response of {size} bytes")
            data = await asyncio.wait_for(reader.readexactly(size), DEADLINE)
            if data.startswith(b"E_"):
                raise LookupdError(f"{cmd.split(b' ')[0].strip().decode(errors='replace')} - "
                                   f"{data.decode(errors='replace')}")
            answers.append(data)
        return answers

    @property
    def http_address(self) -> tuple[str, int] | None:
        """Where its HTTP API is, as it said in IDENTIFY (nsqd uses the same)."""
        if not self.info or not self.info.get("broadcast_address"):
            return None
        try:
            return str(self.info["broadcast_address"]), int(self.info["http_port"])
        except (KeyError, TypeError, ValueError):
            return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "i/o timeout"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "connection closed (EOF)"
    return str(exc) or type(exc).__name__


class Registrar:
    """Acceptor 0's registrar: the lookupd connections and the mirror of what to register."""

    def __init__(self, acceptor: Acceptor) -> None:
        self.acceptor = acceptor
        self.peers: dict[str, LookupPeer] = {}
        # router slot -> topic -> channels: what that router owns, as it told us
        self.owned: dict[int, dict[bytes, set[bytes]]] = {}
        self._pieces: dict[int, dict[bytes, set[bytes]]] = {}  # LOOKUP_STATE being received
        self._queries: set[asyncio.Task] = set()
        self._count_told = -1

    # -- configuration -------------------------------------------------------------------
    def set_addresses(self, addresses) -> None:
        """(Re)connect to exactly these lookupds (start-up and PUT /config)."""
        wanted = list(dict.fromkeys(str(a) for a in addresses))
        for addr in list(self.peers):
            if addr not in wanted:
                log.info("LOOKUP(%s): removing peer", addr)
                self.peers.pop(addr).close()
        for addr in wanted:
            if addr not in self.peers:
                log.info("LOOKUP(%s): adding peer", addr)
                self.peers[addr] = LookupPeer(self, addr)
        if len(self.peers) != self._count_told:
            self.tell_routers()

    def tell_routers(self, slots=None) -> None:
        """Tell routers how many lookupds there are: new topics wait for channels only then."""
        plan = self.acceptor.plan
        self._count_told = len(self.peers)
        rec = records.lookupds(len(self.peers))
        for slot in slots if slots is not None else [plan.router_slot(j) for j in range(plan.routers)]:
            self.acceptor.endpoint.send(slot, rec)

    def identity(self) -> dict:
        """nsqd's IDENTIFY body for lookupds."""
        a = self.acceptor
        opts = a.opts
        return {
            "version": VERSION,
            "tcp_port": opts.broadcast_tcp_port or a.tcp_port,
            "http_port": opts.broadcast_http_port or a.http_port,
            "hostname": a.hostname,
            "broadcast_address": opts.broadcast_address,
            "topology_zone": opts.topology_zone,
            "topology_region": opts.topology_region,
        }

    def close(self) -> None:
        for peer in self.peers.values():
            peer.close()
        self.peers.clear()
        for task in self._queries:
            task.cancel()

    # -- what to register ------------------------------------------------------------------
    def register_commands(self) -> list[bytes]:
        """Everything, as nsqd sends it on connect: ``topic`` alone when it has no channels."""
        out = []
        for topics in self.owned.values():
            for topic, channels in topics.items():
                if channels:
                    out += [v1.register(topic, ch) for ch in sorted(channels)]
                else:
                    out.append(v1.register(topic))
        return out

    def _broadcast(self, commands: list[bytes]) -> None:
        for peer in self.peers.values():
            for cmd in commands:
                peer.send(cmd)

    def on_reg(self, src: int, rec: bytes) -> None:
        """LOOKUP_REG: one topic or channel came or went on router `src`."""
        register, topic, channel = records.parse_lookup_reg(rec)
        mine = self.owned.setdefault(src, {})
        if register:
            chans = mine.setdefault(topic, set())
            if channel:
                chans.add(channel)
            self._broadcast([v1.register(topic, channel)])
        elif channel:
            if topic in mine:
                mine[topic].discard(channel)
            self._broadcast([v1.unregister(topic, channel)])
        else:
            mine.pop(topic, None)
            self._broadcast([v1.unregister(topic)])

    def on_state(self, src: int, rec: bytes) -> None:
        """LOOKUP_STATE: everything router `src` owns; the lookupds hear the difference."""
        items, first, last = records.parse_lookup_state(rec)
        if first:
            self._pieces[src] = {}
        piece = self._pieces.get(src)
        if piece is None:
            return  # a piece without its first: the router will send the whole again
        for topic, channels in items:
            piece[topic.encode()] = {c.encode() for c in channels}
        if not last:
            return
        new = self._pieces.pop(src)
        old = self.owned.get(src, {})
        self.owned[src] = new
        commands = []
        for topic in old.keys() - new.keys():
            commands.append(v1.unregister(topic))
        for topic, channels in new.items():
            before = old.get(topic)
            if before is None:
                commands += [v1.register(topic, ch) for ch in sorted(channels)] or [v1.register(topic)]
                continue
            commands += [v1.unregister(topic, ch) for ch in sorted(before - channels)]
            commands += [v1.register(topic, ch) for ch in sorted(channels - before)]
        self._broadcast(commands)

    # -- a new topic's channels ------------------------------------------------------------
    def on_ask(self, src: int, rec: bytes) -> None:
        """CHANNELS_ASK: answer with the channels the lookupds know for the topic."""
        task = self.acceptor.loop.create_task(self._answer(src, records.parse_channels_ask(rec)))
        self._queries.add(task)
        task.add_done_callback(self._queries.discard)

    async def _answer(self, src: int, topic: bytes) -> None:
        targets = [addr for addr in (p.http_address for p in self.peers.values()) if addr is not None]
        names: list[str] = []
        if not targets:
            log.error("no available nsqlookupd to query for channels to pre-create for topic %s",
                      topic.decode())
        else:
            timeout = self.acceptor.opts.http_client_request_timeout
            results = await asyncio.gather(*(self._channels_of(host, port, topic, timeout)
                                             for host, port in targets), return_exceptions=True)
            failures = [r for r in results if isinstance(r, BaseException)]
            if len(failures) == len(results):
                log.warning("failed to query nsqlookupd for channels to pre-create for topic %s - %s",
                            topic.decode(), _describe(failures[0]))
            seen: dict[str, None] = {}
            for r in results:
                if isinstance(r, list):
                    seen.update((n, None) for n in r if isinstance(n, str))
            names = list(seen)
        self.acceptor.endpoint.send(src, records.channels(topic, orjson.dumps(names)))

    async def _channels_of(self, host: str, port: int, topic: bytes, timeout: float) -> list:
        """GET /channels?topic= on one lookupd (V1 JSON), within the request timeout."""
        return await asyncio.wait_for(self._get_channels(host, port, topic), timeout)

    async def _get_channels(self, host: str, port: int, topic: bytes) -> list:
        connect = self.acceptor.opts.http_client_connect_timeout
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), connect)
        try:
            hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            writer.write((f"GET /channels?topic={quote(topic.decode(), safe='')} HTTP/1.0\r\n"
                          f"Host: {hostport}\r\nAccept: application/vnd.nsq; version=1.0\r\n"
                          f"User-Agent: nsqd/{VERSION}\r\n\r\n").encode())
            await writer.drain()
            raw = await reader.read(MAX_HTTP_RESPONSE)
            while len(raw) < MAX_HTTP_RESPONSE:
                more = await reader.read(MAX_HTTP_RESPONSE - len(raw))
                if not more:
                    break
                raw += more
        finally:
            writer.transport.abort()
        head, _, body = raw.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1] if head.count(b" ") >= 1 else b""
        if status != b"200":
            raise ValueError(f"got response {status.decode(errors='replace') or 'nothing'} from {hostport}")
        channels = orjson.loads(body).get("channels")
        return channels if isinstance(channels, list) else []
