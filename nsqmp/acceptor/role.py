"""The acceptor process: owns client connections (TCP V2 and HTTP) and its segment files."""
from __future__ import annotations

import asyncio
import errno
import itertools
import os
import ssl
import socket
import time

import orjson

from nsqmp.acceptor.auth import AuthClient
from nsqmp.acceptor.flow import RingHold
from nsqmp.acceptor.http import HttpConnection
from nsqmp.acceptor.producers import ProducerBoard
from nsqmp.acceptor.publisher import Publisher
from nsqmp.acceptor.registrar import Registrar
from nsqmp.acceptor.tcp import V2Connection
from nsqmp import lateness, memstats
from nsqmp.busypoll import BusyPoll, CpuPressure
from nsqmp.ipc import records
from nsqmp.protocol.errors import ClientError, FatalClientError
from nsqmp.protocol.parser import Parser
from nsqmp.roles import Role

_STATS_TIMEOUT = 5.0


def _tls_context(opts) -> ssl.SSLContext | None:
    """The server side of the TLS upgrade (--tls-cert, --tls-key, ...), or None."""
    if not (opts.tls_cert and opts.tls_key):
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(opts.tls_cert, opts.tls_key)
    versions = {"tls1.0": ssl.TLSVersion.TLSv1, "tls1.1": ssl.TLSVersion.TLSv1_1,
                "tls1.2": ssl.TLSVersion.TLSv1_2, "tls1.3": ssl.TLSVersion.TLSv1_3}
    try:
        ctx.minimum_version = versions.get(opts.tls_min_version, ssl.TLSVersion.TLSv1_2)
    except ValueError:  # the OpenSSL build refuses versions this old: keep its floor
        pass
    if opts.tls_client_auth_policy:
        ctx.verify_mode = ssl.CERT_REQUIRED
        if opts.tls_root_ca_file:
            ctx.load_verify_locations(opts.tls_root_ca_file)
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx


def run_start_time(run_pid: int) -> int:
    """When the broker (its supervisor) started, in unix seconds: nsqd's start_time is its
    process's, so every acceptor, and one restarted after a crash, reports the same."""
    try:
        with open(f"/proc/{run_pid}/stat", "rb") as f:
            # field 22 is the start in clock ticks after boot; the name in field 2 may hold spaces
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return boot + ticks // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return int(time.time())


class Acceptor(Role):
    def __init__(self, opts, plan, index: int, generation: int, doorbells, control_name: str,
                 tcp_sock: socket.socket, http_sock: socket.socket | None,
                 https_sock: socket.socket | None = None) -> None:
        super().__init__(opts, plan, plan.acceptor_slot(index), generation, doorbells, control_name)
        self.index = index
        self.title = f"nsqmp acceptor {index}"
        self.tcp_sock = tcp_sock
        self.http_sock = http_sock
        self.https_sock = https_sock
        self.connections: dict[int, V2Connection] = {}
        self._ok_noted = 0.0
        self.hostname = socket.gethostname()
        self.start_time = run_start_time(plan.run_pid)
        self.tcp_port = tcp_sock.getsockname()[1]
        self.http_port = http_sock.getsockname()[1] if http_sock is not None else -1
        self.https_port = https_sock.getsockname()[1] if https_sock is not None else -1
        self._conn_numbers = itertools.count(1)
        self._requests: dict[int, tuple[asyncio.Future, list, int]] = {}
        self._request_ids = itertools.count(1)
        self._servers: list[asyncio.AbstractServer] = []
        self.registrar: Registrar | None = None  # acceptor 0 only: the broker's lookupd connections
        self.config_overrides: dict = {}  # options changed at run time (PUT /config/...)

    # -- lifecycle --------------------------------------------------------------
    def setup(self) -> None:
        if self.opts.acceptor_nice:
            os.nice(self.opts.acceptor_nice)
        self.busy = BusyPoll(self.loop.call_soon, round(self.opts.busy_poll * 1e9),
                             pressure=CpuPressure() if self.opts.busy_poll else None)
        self.tls_context = _tls_context(self.opts)
        self.tls_required = self.opts.tls_required  # True, False or "tcp-https"
        self.auth = AuthClient(self.opts)
        self.publisher = Publisher(self.opts, self.plan, self.index, self.endpoint)
        self.producers = ProducerBoard(self)
        self.producers.write()  # a restarted acceptor's producers are gone: say so at once
        self.parser = Parser(self.opts.max_msg_size, self.opts.max_body_size)
        # the connections' calls on the data path, as bound methods (nsqmp.acceptor.host)
        self.send_record = self.endpoint.send
        self.extend_record = self.endpoint.extend_last
        self.publish_spans = self.publisher.publish_spans
        self.busy_touch = self.busy.touch
        self.ring_hold = RingHold()
        self.endpoint.on_unblocked = self.ring_hold.release
        self.loop.run_until_complete(self._listen())
        if self.index == 0:
            self.registrar = Registrar(self)
        if self.opts.sync_timeout > 0:
            self.loop.call_later(self.opts.sync_timeout, self._periodic_sync)

    async def _listen(self) -> None:
        self._servers.append(await self.loop.create_server(lambda: V2Connection(self), sock=self.tcp_sock))
        if self.http_sock is not None:
            self._servers.append(await self.loop.create_server(lambda: HttpConnection(self), sock=self.http_sock))
        if self.https_sock is not None and self.tls_context is not None:
            self._servers.append(await self.loop.create_server(
                lambda: HttpConnection(self, secure=True), sock=self.https_sock, ssl=self.tls_context))

    def started(self) -> None:
        hello = records.HELLO_A.pack(records.A_HELLO, self.index, self.generation)
        for j in range(self.plan.routers):
            self.endpoint.send(self.plan.router_slot(j), hello)
        if self.registrar is not None:
            # on the running loop; and read then: a CONFIG_SET may have changed them meanwhile
            self.loop.call_soon(self._connect_lookupds)

    def _periodic_sync(self) -> None:
        self.publisher.sync()
        if not self._stopping:
            self.loop.call_later(self.opts.sync_timeout, self._periodic_sync)

    async def stop(self) -> None:
        """Stop accepting, close every client, sync and close the segments."""
        for server in self._servers:
            server.close()
        if self.registrar is not None:
            self.registrar.close()  # each lookupd forgets this broker at once
        for conn in list(self.connections.values()):
            conn.close()
        await asyncio.sleep(0)  # let connection_lost run and queue the GONE records
        self.publisher.close()
        self.producers.remove()

    # -- what a connection may ask (nsqmp.acceptor.host.AcceptorSide) ----------------
    def new_conn_id(self) -> int:
        """A connection ID unique in the run (acceptor, generation, number)."""
        return records.conn_id(self.index, self.generation, next(self._conn_numbers))

    def router_slot(self, topic: bytes) -> int:
        """The ring slot of the router that owns a topic."""
        return self.plan.topic_slot(topic)

    def attach(self, conn: V2Connection) -> None:
        """Records for conn's ID reach it from now on."""
        self.connections[conn.conn] = conn

    def detach(self, conn: V2Connection) -> None:
        """conn is gone: records for its ID are dropped."""
        self.connections.pop(conn.conn, None)

    def published(self, conn: V2Connection) -> None:
        """A publish is on disk: note the disk works, show the producer, and hold the
        publisher while the rings are this full (nsqmp.acceptor.flow.RingHold)."""
        self.health_ok()
        self.producers.changed()
        if self.endpoint.backlog > self.ring_hold.limit:  # checked here: no call per publish
            self.ring_hold.hold(conn)

    def publish_failed(self, exc: OSError) -> None:
        """A disk write failed: /ping and /stats say NOK on every acceptor until a write works."""
        self.control.note_failure(self.slot, exc.errno or errno.EIO)

    health_error = publish_failed  # the HTTP publishes' name

    def health_ok(self) -> None:
        """A disk write worked: noted at most once a second while all is well."""
        now = time.monotonic()
        if self.control.failed(self.slot) or now - self._ok_noted > 1.0:
            self.control.note_success(self.slot)
            self._ok_noted = now

    def producer_left(self) -> None:
        """A connection that published is gone: /stats producers changes."""
        self.producers.changed()

    @property
    def health(self) -> str:
        """'' while the disk takes writes, else the newest error."""
        err = self.control.health(self.plan.acceptor_slot(i) for i in range(self.plan.acceptors))
        return f"failed to write to disk: {os.strerror(err)}" if err else ""

    async def gather_stats(self, topic: str | None, channel: str | None, include_clients: bool) -> list:
        """Ask every router for its part of /stats and merge (topics sorted by name)."""
        request = {"op": "stats", "topic": topic, "channel": channel, "include_clients": include_clients}
        replies = await self.ask_routers(request)
        topics = [t for reply in replies for t in reply.get("topics", [])]
        topics.sort(key=lambda t: t["topic_name"])
        return topics

    async def gather_fire_lateness(self) -> dict:
        """How late every router took its FIREs, per kind (see nsqmp.lateness)."""
        replies = await self.ask_routers({"op": "fire_lateness"})
        return {kind: lateness.summary([r[kind] for r in replies if kind in r])
                for kind in ("timeouts", "deferred")}

    async def gather_memory(self) -> dict:
        """nsqd's "memory" block: this process and every router sampled, every broker
        process's resident memory read from /proc (see nsqmp.memstats)."""
        samples = [memstats.sample()] + await self.ask_routers({"op": "memory"})
        pids = [self.plan.run_pid] + [self.control.read(slot)[0] for slot in range(self.plan.slots)]
        return memstats.combine(samples, pids)

    async def ask_routers(self, request: dict, slots: list[int] | None = None) -> list[dict]:
        """Send a control request to routers (all, or `slots`) and gather their replies."""
        if slots is None:
            slots = [self.plan.router_slot(j) for j in range(self.plan.routers)]
        req_id = next(self._request_ids)
        fut: asyncio.Future = self.loop.create_future()
        self._requests[req_id] = (fut, [], len(slots))
        body = records.REQ_ID.pack(records.CONTROL, req_id) + orjson.dumps(request)
        for slot in slots:
            self.endpoint.send(slot, body)
        try:
            await asyncio.wait_for(fut, _STATS_TIMEOUT)
        except asyncio.TimeoutError:
            self.log.warning("a router did not answer %s within %.0fs", request["op"], _STATS_TIMEOUT)
        return self._requests.pop(req_id)[1]

    async def ask_owner(self, request: dict) -> dict:
        """A control request for the router that owns request["topic"]."""
        replies = await self.ask_routers(request, [self.router_slot(request["topic"].encode())])
        return replies[0] if replies else {"error": "INTERNAL_ERROR"}

    def _connect_lookupds(self) -> None:
        if self.registrar is not None and not self._stopping:
            self.registrar.set_addresses(self.opts.nsqlookupd_tcp_addresses)

    def catch_up(self) -> None:
        """Handle the records already waiting in our rings, now."""
        self.endpoint.drain(self.on_record)

    def on_config_set(self, overrides: dict) -> None:
        """Router 0 relays every option changed at run time (PUT /config/... on any acceptor)."""
        changed = {k: v for k, v in overrides.items() if self.config_overrides.get(k) != v}
        self.config_overrides.update(overrides)
        if not changed:
            return
        self.apply_config(changed)
        if self.registrar is not None:
            if "nsqlookupd_tcp_addresses" in changed:
                self.registrar.set_addresses(self.opts.nsqlookupd_tcp_addresses)
            # the other routers apply them too (log level); router 0 has them already
            rec = bytes((records.CONFIG,)) + orjson.dumps(changed)
            for j in range(1, self.plan.routers):
                self.endpoint.send(self.plan.router_slot(j), rec)

    # -- records from routers ----------------------------------------------------------
    def deliver_waiting(self) -> None:
        """Hand out what the routers sent (message frames above all) now, before a
        publisher's batch is written: on a loop busy with MPUBs, consumers' deliveries
        otherwise wait for every publish of the tick (mixed workload: "out" about 1.2x)."""
        self.endpoint.drain(self.on_record)

    def on_record(self, src: int, rec: bytes) -> None:
        kind = rec[0]
        if kind == records.DELIVER:
            _, conn = records.CONN.unpack_from(rec)
            c = self.connections.get(conn)
            if c is not None:
                c.write(memoryview(rec)[records.CONN.size:])
        elif kind == records.CONN_ERR:
            _, conn, fatal = records.CONN_ERR_HEAD.unpack_from(rec)
            c = self.connections.get(conn)
            if c is not None:
                text = rec[records.CONN_ERR_HEAD.size:].decode()
                code, _, desc = text.partition(" ")
                c.send_error((FatalClientError if fatal else ClientError)(code, desc))
        elif kind == records.REPLY:
            _, req_id = records.REQ_ID.unpack_from(rec)
            entry = self._requests.get(req_id)
            if entry is not None:
                fut, replies, expected = entry
                replies.append(orjson.loads(rec[records.REQ_ID.size:]))
                if len(replies) == expected and not fut.done():
                    fut.set_result(None)
        elif kind == records.BARRIER:
            # behind every record we queued for this router before: see router/controls.py
            self.endpoint.send(src, bytes((records.BARRIER_OK,)) + rec[1:])
        elif kind == records.SUB_OK:
            _, conn = records.CONN.unpack_from(rec)
            c = self.connections.get(conn)
            if c is not None:
                c.sub_confirmed()
        elif kind == records.CLOSE_CONN:
            _, conn = records.CONN.unpack_from(rec)
            c = self.connections.get(conn)
            if c is not None:
                c.close()
        elif kind == records.TOPIC_GONE:
            self.publisher.forget(rec[1:])
        elif kind == records.TOPIC_FULL:
            topic = rec[2:]
            if rec[1]:
                self.publisher.full_topics.add(topic)
            else:
                self.publisher.full_topics.discard(topic)
        elif kind == records.LOOKUP_REG and self.registrar is not None:
            self.registrar.on_reg(src, rec)
        elif kind == records.LOOKUP_STATE and self.registrar is not None:
            self.registrar.on_state(src, rec)
        elif kind == records.CHANNELS_ASK and self.registrar is not None:
            self.registrar.on_ask(src, rec)
        elif kind == records.CONFIG_SET:
            self.on_config_set(orjson.loads(rec[1:]))
        elif kind == records.R_HELLO:
            router_slot = src
            if self.registrar is not None:
                self.registrar.tell_routers([src])
                if self.config_overrides:  # router 0 takes them back; others apply them
                    self.endpoint.send(src, bytes((records.CONFIG,)) + orjson.dumps(self.config_overrides))
            # the restarted router re-announces the topics that are still full
            self.publisher.full_topics = {t for t in self.publisher.full_topics
                                          if self.router_slot(t) != router_slot}
            for c in self.connections.values():
                if c.router == router_slot and not c.closed:
                    c.send_sub()
        else:
            self.log.error("unexpected record kind %d from slot %d", kind, src)
