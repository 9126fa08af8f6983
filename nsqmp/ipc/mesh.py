"""The fixed graph of rings between the broker's processes.

    acceptor i --a{i}r{j}--> router j --r{j}t--> timer
    acceptor i <--r{j}a{i}-- router j <--tr{j}-- timer

Every process slot (acceptors 0..N-1, routers N..N+R-1, the timer N+R) has one doorbell
eventfd. The supervisor creates every ring segment and doorbell before forking; each child
attaches to the rings it produces into and consumes from (an Endpoint). A restarted child
attaches to the same rings and continues from the head and tail stored in them.
"""
from __future__ import annotations

import logging
import mmap
import os
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from nsqmp.ipc import shm
from nsqmp.ipc.doorbell import Doorbell
from nsqmp.ipc.ring import Ring, ring_size

log = logging.getLogger("nsqmp.ipc")

# Records one drain takes from each ring at most, before the loop gets a turn
DRAIN_MAX = 4096
# The exit status of a process whose record handler raised (EX_SOFTWARE): the supervisor
# restarts it, and the restarted role recovers from its files and its peers' re-sent state
HANDLER_FAILED_EXIT = 70


class RecordError(Exception):
    """A record handler raised: the records popped with it and not handled yet are lost
    to this process, whose state may now differ from its peers'. Its cause is the
    handler's exception."""

    def __init__(self, src: int, kind: int, unhandled: int) -> None:
        super().__init__(f"the handler of a record of kind {_kind_name(kind)} from slot {src} raised; "
                         f"{unhandled} popped records after it were not handled")
        self.src = src
        self.kind = kind
        self.unhandled = unhandled


def _kind_name(kind: int) -> str:
    """``40 (FIRE)``: a record kind with its name in nsqmp.ipc.records, for the log."""
    from nsqmp.ipc import records  # failure path only

    # the kinds are the module's upper-case one-byte ints (STATE_* are LOOKUP_STATE's flags;
    # OFFSETS names where records' parts start)
    names = [n for n, v in vars(records).items() if n.isupper() and type(v) is int and v == kind
             and v < 256 and not n.startswith("STATE_") and n not in records.OFFSETS]
    return f"{kind} ({'/'.join(names)})" if names else str(kind)


def end_process(exc: RecordError) -> None:
    """Fail fast: log exc (kind, source slot, records lost, the handler's traceback) at
    error level, flush the logs and end the process with HANDLER_FAILED_EXIT. Going on
    would run with state diverged from the peers'; a restart recovers it."""
    log.error("%s: ending the process (exit %d) so the supervisor restarts it", exc, HANDLER_FAILED_EXIT,
              exc_info=exc.__cause__ or exc)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(HANDLER_FAILED_EXIT)


@dataclass(frozen=True)
class Plan:
    """How many of each role and the ring capacity; the names follow from it."""

    run_pid: int
    acceptors: int
    routers: int
    ring_capacity: int

    @property
    def slots(self) -> int:
        return self.acceptors + self.routers + 1

    def acceptor_slot(self, i: int) -> int:
        return i

    def router_slot(self, j: int) -> int:
        return self.acceptors + j

    def router_of(self, topic: bytes) -> int:
        """The router that owns a topic: the one placement the acceptors' publishes and
        the routers' recovery both follow, the same in every process and every run."""
        return zlib.crc32(topic) % self.routers

    def topic_slot(self, topic: bytes) -> int:
        """The ring slot of the router that owns a topic."""
        return self.router_slot(self.router_of(topic))

    @property
    def timer_slot(self) -> int:
        return self.acceptors + self.routers

    def ring_names(self) -> list[str]:
        names = []
        for j in range(self.routers):
            for i in range(self.acceptors):
                names += [f"a{i}r{j}", f"r{j}a{i}"]
            names += [f"r{j}t", f"tr{j}"]
        return names

    def shm_name(self, ring: str) -> str:
        return shm.segment_name(self.run_pid, ring)

    def inbound(self, slot: int) -> dict[int, str]:
        """Rings this slot consumes, by producer slot."""
        return {src: name for src, dst, name in self._edges() if dst == slot}

    def outbound(self, slot: int) -> dict[int, str]:
        """Rings this slot produces into, by consumer slot."""
        return {dst: name for src, dst, name in self._edges() if src == slot}

    def _edges(self) -> list[tuple[int, int, str]]:
        edges = []
        for j in range(self.routers):
            r = self.router_slot(j)
            for i in range(self.acceptors):
                edges += [(i, r, f"a{i}r{j}"), (r, i, f"r{j}a{i}")]
            edges += [(r, self.timer_slot, f"r{j}t"), (self.timer_slot, r, f"tr{j}")]
        return edges


def create_all(plan: Plan) -> list[str]:
    """Supervisor: create and format every ring segment; returns the shm names."""
    created = []
    for ring in plan.ring_names():
        name = plan.shm_name(ring)
        buf = shm.create(name, ring_size(plan.ring_capacity))
        Ring.format(buf, plan.ring_capacity)
        buf.close()
        created.append(name)
    return created


class Endpoint:
    """One process's view of the mesh: batched sends, draining receives, doorbells.

    Records sent during one event-loop tick are queued per peer and pushed in one
    push_many at the end of the tick (one release store, at most one doorbell). When a
    ring is full the records stay queued, the producer announces it is waiting, and the
    consumer rings back when it has freed space; `backlog` lets the owner apply
    backpressure (an acceptor stops reading from publishers).
    """

    def __init__(self, plan: Plan, slot: int, doorbells: list[Doorbell]) -> None:
        self.plan = plan
        self.slot = slot
        self.doorbell = doorbells[slot]
        self._doorbells = doorbells
        self._bufs: list[mmap.mmap] = []
        self.out: dict[int, Ring] = {}
        self.inp: dict[int, Ring] = {}
        for dst, name in plan.outbound(slot).items():
            self.out[dst] = self._attach(name)
        for src, name in plan.inbound(slot).items():
            self.inp[src] = self._attach(name)
        self._pending: dict[int, list[bytes | bytearray]] = {dst: [] for dst in self.out}
        # the most bytes each ring held that this end saw: right after our pushes (a producer
        # sees its ring's peaks) and right before our pops (a consumer sees its ring's);
        # read once per ring per flush or drain, never per record (/metrics asks routers)
        self.out_peak: dict[int, int] = dict.fromkeys(self.out, 0)
        self.in_peak: dict[int, int] = dict.fromkeys(self.inp, 0)
        self._blocked: set[int] = set()
        self._flush_scheduled = False
        self._draining = False
        self._urgent: list[tuple[int, Ring]] = []
        self._schedule: Callable[[Callable[[], None]], object] | None = None
        self.on_unblocked: Callable[[], None] | None = None
        # what a raising record handler leads to: None raises RecordError out of drain();
        # a process's endpoint (attach_to_loop) ends the process (end_process)
        self.on_record_error: Callable[[RecordError], None] | None = None
        # what a consumer does to each popped batch before handling it (a router joins
        # runs of PUBLISH_AT: records.coalesce_publish_at); None: nothing
        self.merge: Callable[[list[bytes]], list[bytes]] | None = None

    def _attach(self, name: str) -> Ring:
        buf = shm.attach(self.plan.shm_name(name))
        self._bufs.append(buf)
        return Ring(buf)

    def bind_loop(self, schedule: Callable[[Callable[[], None]], object]) -> None:
        """Give the endpoint a way to run a callback at the end of this tick (loop.call_soon)."""
        self._schedule = schedule

    # -- sending -------------------------------------------------------------
    def send(self, dst: int, record: bytes | bytearray) -> None:
        self._pending[dst].append(record)
        if not self._flush_scheduled and self._schedule is not None:
            self._flush_scheduled = True
            self._schedule(self.flush)

    def send_now(self, dst: int, record: bytes) -> None:
        """send(), pushed to the ring at once when nothing waits for dst yet (else queued
        behind what does, in order): for a record no later one joins, a publish run's
        PUBLISH_AT. A one-message PUB then costs no end-of-tick flush (a loop callback and
        this class's Python): PUB on one connection 26.3-27.7k against 24.1-24.8k a second.
        FIN records are grown while they are queued (extend_last): they go by send()."""
        if not self._pending[dst]:
            ring = self.out[dst]
            written, wake = ring.push_many((record,))
            if written:
                if wake:
                    self._doorbells[dst].ring()
                used = ring.used
                if used > self.out_peak[dst]:
                    self.out_peak[dst] = used
                return
        self.send(dst, record)

    def extend_last(self, dst: int, record: bytearray, extra: bytes, limit: int) -> bool:
        """Grow `record` by `extra` in place if it is still the last record queued for dst
        and stays within `limit` bytes (a record coalescing commands, such as FIN); False
        when the caller must send a new record instead."""
        pending = self._pending[dst]
        if not pending or pending[-1] is not record or len(record) + len(extra) > limit:
            return False
        record += extra
        return True

    @property
    def backlog(self) -> int:
        """Records queued locally because a ring was full.

        Records that only wait for the end-of-tick flush do not count: a burst of
        pipelined commands must not look like a full ring. Read after every publish:
        with no ring full (nearly always) it makes no generator (0.26 us a call).
        """
        if not self._blocked:
            return 0
        return sum(len(self._pending[dst]) for dst in self._blocked)

    def flush(self) -> None:
        self._flush_scheduled = False
        was_blocked = bool(self._blocked)
        for dst, pending in self._pending.items():
            if not pending:
                continue
            ring = self.out[dst]
            try:
                written, wake = ring.push_many(pending)
            except ValueError:  # a record larger than the ring allows (push_many published none)
                _drop_oversized(pending, ring.max_record)
                if not pending:
                    self._blocked.discard(dst)
                    continue
                written, wake = ring.push_many(pending)
            if wake:
                self._doorbells[dst].ring()
            used = ring.used
            if used > self.out_peak[dst]:
                self.out_peak[dst] = used
            if written == len(pending):
                pending.clear()
                self._blocked.discard(dst)
                continue
            del pending[:written]
            self._blocked.add(dst)
            if not ring.prepare_wait(len(pending[0])):
                # space appeared between the push and the announcement: try again soon
                if self._schedule is not None and not self._flush_scheduled:
                    self._flush_scheduled = True
                    self._schedule(self.flush)
        if was_blocked and not self._blocked and self.on_unblocked is not None:
            self.on_unblocked()

    def release_idle(self) -> int:
        """Slow timer (a role's beat), never per record: give back the data pages of each
        outbound ring that is empty and got less than 1/32 of its capacity since the
        previous call (see Ring.release_if_idle); returns the bytes released. After a
        burst each 8 MiB ring otherwise stays resident, counted in the PSS of both its
        ends, even under a trickle (a bench's /stats polls)."""
        released = 0
        for dst, ring in self.out.items():
            if self._pending[dst]:  # records on their way in: the pages are wanted again
                continue
            try:
                released += ring.release_if_idle()
            except OSError as exc:  # not expected on shared memory; keep the beat going
                log.warning("ring to slot %d: releasing idle pages failed: %s", dst, exc)
        return released

    # -- receiving -----------------------------------------------------------
    def drain(self, handle: Callable[[int, bytes], None], max_records: int = DRAIN_MAX) -> int:
        """Pop what is waiting on every inbound ring and hand each record to handle():
        the urgent source's first (see make_urgent), then the others in slot order.

        A drain started from inside handle() does nothing: it would handle later records
        of a ring before the earlier ones still in the outer drain's hands."""
        return self._drain(self.inp.items(), handle, max_records)

    def make_urgent(self, src: int) -> None:
        """Drain src's ring before the others and between two records of the others, and
        let urgent_waiting/drain_urgent take its records in the middle of long work (a
        router's timer: a FIRE should not wait behind a delivery pass or a ring of
        publishes). Records of one ring are still handled in their order."""
        ring = self.inp.pop(src)
        self.inp = {src: ring, **self.inp}
        self._urgent = [(src, ring)]

    def urgent_waiting(self) -> bool:
        """Records wait on the urgent source's ring (one shared-memory load)."""
        return bool(self._urgent) and self._urgent[0][1].used > 0

    def drain_urgent(self, handle: Callable[[int, bytes], None], max_records: int = DRAIN_MAX) -> int:
        """drain() of the urgent source's ring only."""
        return self._drain(self._urgent, handle, max_records)

    def _drain(self, rings, handle: Callable[[int, bytes], None], max_records: int) -> int:
        if self._draining:
            return 0
        self._draining = True
        total = 0
        urgent = self._urgent[0] if self._urgent else None
        try:
            for source in rings:
                total += self._take(source, handle, max_records, None if source == urgent else urgent)
        except RecordError as exc:
            if self.on_record_error is None:
                raise
            self.on_record_error(exc)  # ends the process: never goes on with a record lost
            raise
        finally:
            self._draining = False
        if self._blocked:
            self.flush()  # calls on_unblocked once every ring took its backlog
        return total

    def _take(self, source: tuple[int, Ring], handle: Callable[[int, bytes], None], max_records: int,
              urgent: tuple[int, Ring] | None = None) -> int:
        """Handle what waits on one ring, in order; with `urgent`, what comes on that ring
        meanwhile is handled between two of these records."""
        src, ring = source
        used = ring.used
        if not used:
            return 0
        if used > self.in_peak[src]:
            self.in_peak[src] = used
        records = ring.pop_many(max_records)
        if not records:
            return 0
        if ring.take_producer_wakeup():
            self._doorbells[src].ring()
        taken = len(records)
        if self.merge is not None and taken > 1:
            records = self.merge(records)
        record = b""
        try:  # around the loop, not each record: the hot loop stays as it was
            for record in records:
                handle(src, record)
                if urgent is not None and urgent[1].used:
                    taken += self._take(urgent, handle, max_records)
        except RecordError as exc:  # from the urgent ring, between two of these records
            exc.unhandled += len(records) - _position(records, record) - 1
            raise
        except Exception as exc:
            unhandled = len(records) - _position(records, record) - 1
            raise RecordError(src, record[0] if record else -1, unhandled) from exc
        return taken

    def high_water(self) -> dict[str, int]:
        """Ring name -> the most bytes it held that this end saw (see out_peak, in_peak)."""
        out = {name: self.out_peak.get(dst, 0) for dst, name in self.plan.outbound(self.slot).items()}
        out.update({name: self.in_peak.get(src, 0) for src, name in self.plan.inbound(self.slot).items()})
        return out

    def prepare_sleep(self) -> bool:
        """True when every inbound ring is empty and flagged, so the doorbell will wake us."""
        ready = True
        for ring in self.inp.values():
            if not ring.prepare_sleep():
                ready = False
        return ready

    def close(self) -> None:
        self.out.clear()
        self.inp.clear()
        for buf in self._bufs:
            try:
                buf.close()
            except BufferError:
                pass
        self._bufs.clear()


def _position(records: list[bytes], record: bytes) -> int:
    """Index of this very record object in records (equal records may repeat)."""
    return next(i for i, r in enumerate(records) if r is record)


# How soon an endpoint that polls (attach_to_loop's poll_while) looks at its rings again
POLL_INTERVAL = 0.001


def attach_to_loop(loop, endpoint: Endpoint, handle: Callable[[int, bytes], None],
                   poll_while: Callable[[], bool] | None = None) -> None:
    """Run `handle` for every record arriving at this endpoint, inside an asyncio loop.

    poll_while: after a drain that found records, if it returns True, look at the rings
    again in POLL_INTERVAL instead of announcing sleep. The producers then write without
    ringing the doorbell for each record: one wake-up takes a millisecond's records. A
    drain that finds nothing announces sleep as usual, so an idle endpoint costs nothing
    and the first record after a quiet spell rings at once. (A router polls while nobody
    waits on it, Router.poll_rings: on this 2-core machine each wake-up took about 20 us
    of CPU from the publisher and its client.)"""
    endpoint.bind_loop(loop.call_soon)
    # a raising handler ends this process, wherever the drain was called from (a router's
    # delivery pass drains its timer's ring too)
    endpoint.on_record_error = end_process
    state = {"scheduled": False}

    def pump() -> None:
        state["scheduled"] = False
        took = endpoint.drain(handle)
        # DRAIN_MAX or more: a ring may hold more now, so look again at once (below)
        if 0 < took < DRAIN_MAX and poll_while is not None and poll_while():
            state["scheduled"] = True
            loop.call_later(POLL_INTERVAL, pump)
        elif not endpoint.prepare_sleep():
            state["scheduled"] = True
            loop.call_soon(pump)

    def on_doorbell() -> None:
        # the eventfd is readable: read it here, not in every pump (a polled pump found it
        # empty nearly always, and os.eventfd_read raised BlockingIOError each time: about
        # a third of a polling router's Python per pump). A ring after this read wakes the
        # loop again, so none is lost.
        endpoint.doorbell.clear()
        if not state["scheduled"]:
            state["scheduled"] = True
            loop.call_soon(pump)

    loop.add_reader(endpoint.doorbell.fd, on_doorbell)
    # records may have arrived before we attached (a restarted process): look once now
    on_doorbell()


def _drop_oversized(pending: list, max_record: int) -> None:
    """Drop, with an error line each, the records no ring of this size can ever take (the
    option checks keep publishes under the limit; this keeps any other record from
    stopping the flush for good)."""
    keep = [rec for rec in pending if len(rec) <= max_record]
    for rec in pending:
        if len(rec) > max_record:
            log.error("dropping a %d-byte record larger than the ring allows", len(rec))
    pending[:] = keep
