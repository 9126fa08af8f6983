"""The acceptor process: owns client connections (TCP V2 and HTTP) and its segment files."""
from __future__ import annotations

import asyncio
import errno
import itertools
import os
import ssl
import socket
import time
from collections import deque
from functools import partial

from nsqmp.acceptor.ahead import HOLD_CHECK_S, HOLD_MAX_NS
from nsqmp.acceptor.auth import AuthClient
from nsqmp.acceptor.flow import RingHold
from nsqmp.acceptor.hotspin import HotSpin, loop_epoll_fd
from nsqmp.acceptor.http import HttpConnection
from nsqmp.acceptor import http_metrics, ttl_dlq
from nsqmp.acceptor.producers import ProducerBoard
from nsqmp.acceptor.publisher import Publisher
from nsqmp.acceptor.registrar import Registrar
from nsqmp.acceptor.session import STATE_SUBSCRIBED
from nsqmp.acceptor.tcp import V2Connection
from nsqmp import lateness, memstats
from nsqmp.busypoll import BusyPoll, CpuPressure
from nsqmp.ipc import records
from nsqmp.protocol.errors import ClientError, FatalClientError
from nsqmp.protocol.parser import Parser
from nsqmp.reuseport import PACK_MAX_CONNECTIONS, STORM_CONNECTIONS, STORM_SECONDS, attach_index
from nsqmp.roles import Role

_STATS_TIMEOUT = 5.0
# errors a router answers a FIN or REQ with: the frame sent ahead it had written was one too many
_OWED_ERRORS = ("E_FIN_FAILED", "E_REQ_FAILED")


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
        self._arrivals: deque[float] = deque(maxlen=STORM_CONNECTIONS)  # when the latest TCP clients came
        self._ok_noted = 0.0
        # our slot's failure flag in the control block, kept here too: only this process
        # sets it (and the supervisor clears it before a new one starts)
        self._failing = False
        self.hostname = socket.gethostname()
        self.start_time = run_start_time(plan.run_pid)
        self.tcp_port = tcp_sock.getsockname()[1]
        self.http_port = http_sock.getsockname()[1] if http_sock is not None else -1
        self.https_port = https_sock.getsockname()[1] if https_sock is not None else -1
        self._conn_numbers = itertools.count(1)
        self._requests: dict[int, tuple[asyncio.Future, list, int]] = {}
        self._reply_parts: dict[tuple[int, int], list[bytes]] = {}  # (router slot, req_id) -> REPLY_PARTs
        self._request_ids = itertools.count(1)
        self._servers: list[asyncio.AbstractServer] = []
        self.registrar: Registrar | None = None  # acceptor 0 only: the broker's lookupd connections
        self.holding: set[V2Connection] = set()  # consumers with frames held ahead (on_deliver_ahead)
        self._hold_check: asyncio.TimerHandle | None = None
        self.config_overrides: dict = {}  # options changed at run time (PUT /config/...)
        # records from routers, by kind (acceptor 0 adds the registrar's in setup)
        self.handlers = {
            records.DELIVER: self.on_deliver,
            records.DELIVER_AHEAD: self.on_deliver_ahead,
            records.RECALL: self.on_recall,
            records.CONN_ERR: self.on_conn_err,
            records.REPLY: self.on_reply,
            records.REPLY_PART: self.on_reply_part,
            records.BARRIER: self.on_barrier,
            records.SUB_OK: self.on_sub_ok,
            records.CLOSE_CONN: self.on_close_conn,
            records.TOPIC_GONE: self.on_topic_gone,
            records.TOPIC_FULL: self.on_topic_full,
            records.CONFIG_SET: self.on_config_set,
            records.R_HELLO: self.on_router_hello,
            records.DEAD_LETTER: partial(ttl_dlq.on_dead_letter, self),  # acceptor 0's, in practice
        }

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
        self.send_record_now = self.endpoint.send_now
        self.extend_record = self.endpoint.extend_last
        self.publish_spans = self.publisher.publish_spans
        self.run_tail = self.publisher.run_tail
        self.busy_touch = self.busy.touch
        # the loop's epoll set, looked for only when there is a poll to spin in
        self.hot = HotSpin(loop_epoll_fd() if self.opts.busy_poll else -1, self._read_failed)
        if self.hot.loop_fd >= 0:
            self.busy.spin = self.hot
        self.ring_hold = RingHold()
        self.endpoint.on_unblocked = self.ring_hold.release
        self.loop.run_until_complete(self._listen())
        if self.index == 0:
            self.registrar = reg = Registrar(self)
            self.handlers.update({records.LOOKUP_REG: reg.on_reg, records.LOOKUP_STATE: reg.on_state,
                                  records.CHANNELS_ASK: reg.on_ask})
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
        hello = records.hello_a(self.index, self.generation)
        for j in range(self.plan.routers):
            self.endpoint.send(self.plan.router_slot(j), hello)
        if self.registrar is not None:
            # on the running loop; and read then: a CONFIG_SET may have changed them meanwhile
            self.loop.call_soon(self._connect_lookupds)
        http_metrics.start(self)  # sync times for /metrics; acceptor 0 pushes to statsd

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
        http_metrics.stop(self)

    # -- what a connection may ask (nsqmp.acceptor.host.AcceptorSide) ----------------
    def new_conn_id(self) -> int:
        """A connection ID unique in the run (acceptor, generation, number)."""
        return records.conn_id(self.index, self.generation, next(self._conn_numbers))

    def router_slot(self, topic: bytes) -> int:
        """The ring slot of the router that owns a topic."""
        return self.plan.topic_slot(topic)

    def attach(self, conn: V2Connection) -> None:
        """Records for conn's ID reach it from now on. The supervisor's steering reads the
        count. A packed acceptor sends new connections to the kernel's hash itself, before
        the supervisor's next look, when it holds PACK_MAX_CONNECTIONS or took
        STORM_CONNECTIONS within STORM_SECONDS (a reconnection storm); the supervisor
        attaches its own choice again at its next look."""
        self.connections[conn.conn] = conn
        count = len(self.connections)
        self.control.set_connections(self.slot, count)
        if self.opts.acceptor_steering != "pack" or self.plan.acceptors < 2:
            return
        now = time.monotonic()
        arrivals = self._arrivals
        arrivals.append(now)
        if count == PACK_MAX_CONNECTIONS or (len(arrivals) == STORM_CONNECTIONS
                                             and now - arrivals[0] < STORM_SECONDS):
            try:
                attach_index(self.tcp_sock, self.plan.acceptors)  # past the group's end: the hash
            except OSError:
                pass  # the supervisor found steering unsupported and logged it

    def detach(self, conn: V2Connection) -> None:
        """conn is gone: records for its ID are dropped."""
        self.connections.pop(conn.conn, None)
        self.hot.forget(conn)
        self.control.set_connections(self.slot, len(self.connections))

    def published(self, conn: V2Connection) -> None:
        """A publish is on disk: note the disk works, show the producer, and hold the
        publisher while the rings are this full (nsqmp.acceptor.flow.RingHold). The first
        two only once a snapshot of the producers is not already due (at most every
        FLUSH_INTERVAL while publishes come), or at once after a failure: no call for them
        after most publishes."""
        self.hot.published(conn)
        if self._failing or not self.producers.scheduled:
            self.health_ok()
            self.producers.changed()
        if self.endpoint.backlog > self.ring_hold.limit:  # checked here: no call per publish
            self.ring_hold.hold(conn)

    def _read_failed(self, conn: V2Connection, exc: Exception) -> None:
        """A connection's data_received raised on a read the busy poll made: what uvloop
        does with one that raises on its own read (report it, abort the connection)."""
        self.loop.call_exception_handler({"message": "data_received failed", "exception": exc,
                                          "protocol": conn})
        if conn.transport is not None:
            conn.transport.abort()

    def publish_failed(self, exc: OSError) -> None:
        """A disk write failed: /ping and /stats say NOK on every acceptor until a write works."""
        self.control.note_failure(self.slot, exc.errno or errno.EIO)
        self._failing = True

    health_error = publish_failed  # the HTTP publishes' name

    def health_ok(self) -> None:
        """A disk write worked: noted at most once a second while all is well."""
        now = time.monotonic()
        if self._failing or now - self._ok_noted > 1.0:  # no read of the block
            self.control.note_success(self.slot)
            self._ok_noted = now
            self._failing = False

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
        body = records.control(req_id, request)
        for slot in slots:
            self.endpoint.send(slot, body)
        try:
            await asyncio.wait_for(fut, _STATS_TIMEOUT)
        except asyncio.TimeoutError:
            self.log.warning("a router did not answer %s within %.0fs", request["op"], _STATS_TIMEOUT)
        for key in [key for key in self._reply_parts if key[1] == req_id]:  # a router too late
            del self._reply_parts[key]
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

    # -- records from routers ----------------------------------------------------------
    def deliver_waiting(self) -> None:
        """Hand out what the routers sent (message frames above all) now, before a
        publisher's batch is written: on a loop busy with MPUBs, consumers' deliveries
        otherwise wait for every publish of the tick (mixed workload: "out" about 1.2x)."""
        self.endpoint.drain(self.on_record)

    def on_deliver(self, src: int, rec: bytes) -> None:
        """DELIVER: message frames for a connection, written as they are (after what is
        held ahead for it, if anything is)."""
        conn, frames = records.parse_deliver(rec)
        c = self.connections.get(conn)
        if c is not None:
            if c.ahead:  # as many of the held ones first, in order (nsqmp.acceptor.ahead)
                c.ahead.write_within(frames, c.write)
            else:
                c.write(frames)

    def on_deliver_ahead(self, src: int, rec: bytes) -> None:
        """DELIVER_AHEAD: frames sent ahead of the consumer's credit, held until its FINs
        free room (nsqmp.acceptor.ahead); back at once if its RDY is now lower than the one
        they were sent under, or it sent CLS."""
        conn, rdy, frames = records.parse_deliver_ahead(rec)
        c = self.connections.get(conn)
        if c is None:
            return  # gone: its router requeues them with the rest of its flights
        if c.rdy < rdy or c.state != STATE_SUBSCRIBED:
            self.endpoint.send(src, records.unsent(conn, bytes(frames)))
            return
        if not c.ahead:
            self.holding.add(c)
            if self._hold_check is None:
                self._hold_check = self.loop.call_later(HOLD_CHECK_S, self._return_old)
        c.ahead.hold(frames)

    def on_recall(self, src: int, rec: bytes) -> None:
        """RECALL: the consumer's channel was paused or emptied: what is held goes back."""
        c = self.connections.get(records.parse_recall(rec))
        if c is not None and c.ahead:
            c.return_ahead()

    def _return_old(self) -> None:
        """Frames held ahead for more than HOLD_MAX_NS go back to their routers."""
        self._hold_check = None
        older_than = time.monotonic_ns() - HOLD_MAX_NS
        for c in list(self.holding):
            if c.ahead and not c.closed:
                c.return_ahead(older_than)
            if not c.ahead or c.closed:
                self.holding.discard(c)
        if self.holding:
            self._hold_check = self.loop.call_later(HOLD_CHECK_S, self._return_old)

    def on_conn_err(self, src: int, rec: bytes) -> None:
        """CONN_ERR: an error for a connection (a fatal one closes it)."""
        conn, fatal, text = records.parse_conn_err(rec)
        c = self.connections.get(conn)
        if c is not None:
            code, _, desc = text.partition(" ")
            if code in _OWED_ERRORS:  # its FIN or REQ may have had a frame sent ahead written
                c.ahead.owe()
            c.send_error((FatalClientError if fatal else ClientError)(code, desc))

    def on_reply_part(self, src: int, rec: bytes) -> None:
        """REPLY_PART: the leading bytes of a router's answer too big for one record."""
        req_id, piece = records.parse_reply_part(rec)
        if req_id in self._requests:
            self._reply_parts.setdefault((src, req_id), []).append(piece)

    def on_reply(self, src: int, rec: bytes) -> None:
        """REPLY: one router's answer to a control request (ask_routers), or its last piece."""
        req_id = records.reply_id(rec)
        parts = self._reply_parts.pop((src, req_id), None)
        entry = self._requests.get(req_id)
        if entry is not None:
            fut, replies, expected = entry
            replies.append(records.parse_reply(rec, parts)[1])
            if len(replies) == expected and not fut.done():
                fut.set_result(None)

    def on_barrier(self, src: int, rec: bytes) -> None:
        """BARRIER: answered behind every record we queued for this router before (see
        router/controls.py)."""
        self.endpoint.send(src, records.barrier_ok(records.parse_barrier(rec)))

    def on_sub_ok(self, src: int, rec: bytes) -> None:
        """SUB_OK: the connection's channel exists; it may read again."""
        c = self.connections.get(records.parse_sub_ok(rec))
        if c is not None:
            c.sub_confirmed()

    def on_close_conn(self, src: int, rec: bytes) -> None:
        """CLOSE_CONN: the connection's topic or channel was deleted."""
        c = self.connections.get(records.parse_close_conn(rec))
        if c is not None:
            c.close()

    def on_topic_gone(self, src: int, rec: bytes) -> None:
        """TOPIC_GONE: the topic was deleted; its segment writer goes."""
        self.publisher.forget(records.parse_topic_gone(rec))

    def on_topic_full(self, src: int, rec: bytes) -> None:
        """TOPIC_FULL: publishes to the topic are refused (full) or taken again."""
        topic, full = records.parse_topic_full(rec)
        self.publisher.topic_full(topic, full)

    def on_config_set(self, src: int, rec: bytes) -> None:
        """CONFIG_SET: router 0 relays every option changed at run time (PUT /config/... on
        any acceptor)."""
        overrides = records.parse_config_set(rec)
        changed = {k: v for k, v in overrides.items() if self.config_overrides.get(k) != v}
        self.config_overrides.update(overrides)
        if not changed:
            return
        self.apply_config(changed)
        if self.registrar is not None:
            if "nsqlookupd_tcp_addresses" in changed:
                self.registrar.set_addresses(self.opts.nsqlookupd_tcp_addresses)
            # the other routers apply them too (log level); router 0 has them already
            relay = records.config(changed)
            for j in range(1, self.plan.routers):
                self.endpoint.send(self.plan.router_slot(j), relay)

    def on_router_hello(self, src: int, rec: bytes) -> None:
        """R_HELLO: router src restarted; its connections send their SUB (and RDY) again."""
        if self.registrar is not None:
            self.registrar.tell_routers([src])
            if self.config_overrides:  # router 0 takes them back; others apply them
                self.endpoint.send(src, records.config(self.config_overrides))
        # the restarted router re-announces the topics that are still full
        for topic in [t for t in self.publisher.full_topics if self.router_slot(t) == src]:
            self.publisher.topic_full(topic, False)
        for c in self.connections.values():
            if c.router == src and not c.closed:
                c.send_sub()
