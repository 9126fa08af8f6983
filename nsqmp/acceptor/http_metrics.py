"""HTTP /metrics (Prometheus) and the statsd push: the whole broker, from any acceptor.

/metrics gathers what /stats gathers (every router's topics and channels, without clients)
the routers' fire lateness histograms and ring high-water marks (every ring has a router at
one end, which sees its peaks: nsqmp.ipc.mesh.Endpoint.high_water), reads the rest where it lives (each role's CPU
and memory in /proc, restarts from the control block's generations, ring occupancy from
the rings' headers, connections from /proc/net/tcp, segment files from the data path) and
renders it with prometheus_client (nsqmp.metrics.exposition).

Sync durations: each process times its background fdatasyncs (nsqmp.diskqueue.synctimes):
routers answer with theirs (the ack logs'); each acceptor writes its own (the segment
files') to ``/dev/shm/nsqmp.<run pid>.syncs.<i>`` every second when they changed, and the
answering acceptor reads the others' files (as /stats reads their producers).

The statsd push runs in acceptor 0 (the registrar's acceptor: one pusher per broker). What
it pushed last is kept in ``/dev/shm/nsqmp.<run pid>.statsd`` so a restarted acceptor 0
sends the counters' differences since the last push, not their totals again; a broker
starting afresh takes the counts it found (kept in meta.json) as its starting point.
"""
from __future__ import annotations

import asyncio
import logging
import os

import orjson

from nsqmp.acceptor.http_request import Request, check_params
from nsqmp.acceptor.identify import VERSION
from nsqmp.diskqueue.layout import topics_root
from nsqmp.diskqueue.synctimes import SYNCS
from nsqmp.ipc import shm
from nsqmp.metrics import procfs
from nsqmp.metrics.exposition import BrokerCollector, ProcessFigures, Snapshot, render
from nsqmp.metrics.statsd import Pusher, host_prefix

log = logging.getLogger("nsqmp.acceptor")

_rings: dict[int, procfs.RingGauges] = {}  # run pid -> this process's read-only ring views
_tasks: set[asyncio.Task] = set()
_stopped: set[int] = set()  # runs whose acceptor here has stopped (its files removed)
_BOARD_INTERVAL = 1.0  # s: how stale another acceptor's sync times may be in /metrics


def start(server) -> None:
    """When the acceptor has started: its sync-times board, and the statsd push in acceptor 0."""
    if server.plan.acceptors > 1:
        _write_board(server, -1)
    task = start_statsd(server)
    if task is not None:
        _tasks.add(task)  # the loop holds tasks weakly


def stop(server) -> None:
    """Graceful stop: this acceptor's files in /dev/shm go (a crash leaves them to the next
    start's sweep of dead runs' segments, nsqmp.ipc.shm.remove_stale)."""
    paths = [_board_path(server.plan.run_pid, server.index)]
    if server.index == 0:
        paths.append(_statsd_path(server.plan.run_pid))
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    _stopped.add(server.plan.run_pid)


def _statsd_path(run_pid: int) -> str:
    return f"/dev/shm/{shm.PREFIX}{run_pid}.statsd"


def _board_path(run_pid: int, index: int) -> str:
    return f"/dev/shm/{shm.PREFIX}{run_pid}.syncs.{index}"


def _write_board(server, written: int) -> None:
    """This acceptor's sync times for the others' scrapes, when they changed (every second)."""
    total = sum(SYNCS.counts)
    if server.plan.run_pid in _stopped:  # stopping: a write still scheduled must not bring it back
        return
    if total != written:
        path = _board_path(server.plan.run_pid, server.index)
        try:
            with open(path + ".tmp", "wb") as f:
                f.write(orjson.dumps(SYNCS.snapshot()))
            os.replace(path + ".tmp", path)
            written = total
        except OSError as exc:  # /metrics then misses this acceptor's syncs; nothing else
            log.warning("cannot write %s: %s", path, exc)
    if server.plan.run_pid not in _stopped:
        server.loop.call_later(_BOARD_INTERVAL, _write_board, server, written)


def _acceptor_syncs(server) -> dict[int, dict]:
    """Every acceptor's sync times by index: this one's live, the others' from their boards."""
    out = {server.index: SYNCS.snapshot()}
    for i in range(server.plan.acceptors):
        if i != server.index:
            try:
                with open(_board_path(server.plan.run_pid, i), "rb") as f:
                    out[i] = orjson.loads(f.read())
            except (OSError, ValueError):  # not written yet: no sync there so far
                pass
    return out


async def h_metrics(server, req: Request):
    """GET /metrics: the Prometheus text format, or OpenMetrics when Accept asks for it."""
    check_params(req)
    snap = await gather_snapshot(server)
    accept = req.headers.get(b"accept", b"").decode("latin-1")
    # rendered on the loop's worker thread: about 10 us a series (1,000 topics x 10 channels:
    # 96,000 series, ~0.6 s of CPU), which on the loop's own thread would hold every client
    # of this acceptor that long; this way the loop gets the GIL back every switch interval
    body, ctype = await server.loop.run_in_executor(None, render, BrokerCollector(snap), accept)
    return 200, body, ctype.encode()


async def gather_snapshot(server) -> Snapshot:
    """Every figure of one scrape (see the module's docstring for where each comes from)."""
    topics, fire, syncs, peaks = await asyncio.gather(server.gather_stats(None, None, False),
                                                      server.ask_routers({"op": "fire_lateness"}),
                                                      server.ask_routers({"op": "sync_times"}),
                                                      server.ask_routers({"op": "ring_high_water"}))
    plan = server.plan
    rings = _rings.get(plan.run_pid)
    if rings is None:
        rings = _rings[plan.run_pid] = procfs.RingGauges(plan)
    loop = server.loop
    # directory walks and /proc/net/tcp: file reads, off the loop's thread
    (files, size), connections = await asyncio.gather(
        loop.run_in_executor(None, procfs.segment_usage, topics_root(server.opts.data_path)),
        loop.run_in_executor(None, procfs.established, {server.tcp_port: "tcp", server.http_port: "http",
                                                        server.https_port: "https"}))
    return Snapshot(
        version=VERSION, start_time=server.start_time, healthy=not server.health, topics=topics,
        fire_lateness={(kind, r["index"]): r[kind] for r in fire for kind in ("timeouts", "deferred") if kind in r},
        processes=processes(server), rings=rings.read(), segment_files=files, segment_bytes=size,
        ring_peaks={ring: max((r.get(ring, 0) for r in peaks), default=0) for ring in plan.ring_names()},
        syncs={**{("acceptor", i): snap for i, snap in _acceptor_syncs(server).items()},
               **{("router", r["index"]): r for r in syncs if "counts" in r}},
        connections=connections,
    )


def processes(server) -> list[ProcessFigures]:
    """Each slot's process (the control block has its pid and generation) and the supervisor."""
    plan = server.plan
    out = []
    for slot in range(plan.slots):
        pid, generation, _, _ = server.control.read(slot)
        if slot < plan.acceptors:
            role, index = "acceptor", slot
        elif slot < plan.acceptors + plan.routers:
            role, index = "router", slot - plan.acceptors
        else:
            role, index = "timer", 0
        figures = procfs.cpu_and_rss(pid) if pid > 0 else None
        cpu, rss = figures if figures is not None else (0.0, 0)
        out.append(ProcessFigures(role, index, cpu, rss, max(0, generation - 1)))
    figures = procfs.cpu_and_rss(plan.run_pid)
    if figures is not None:
        out.append(ProcessFigures("supervisor", 0, figures[0], figures[1], 0))
    return out


# -- statsd (acceptor 0) ------------------------------------------------------------------------
def start_statsd(server) -> asyncio.Task | None:
    """Acceptor 0 with --statsd-address: start the push loop (on the running loop)."""
    opts = server.opts
    if server.index != 0 or not opts.statsd_address:
        return None

    async def gather() -> tuple[list[dict], dict | None]:
        topics = await server.gather_stats(None, None, False)
        return topics, (await server.gather_memory() if opts.statsd_mem_stats else None)

    http_port = opts.http_address.rpartition(":")[2]  # nsqd: the flag's port, as written
    path = _statsd_path(server.plan.run_pid)
    pusher = Pusher(str(opts.statsd_address), host_prefix(opts.statsd_prefix, opts.broadcast_address, http_port),
                    opts.statsd_interval, opts.statsd_mem_stats, opts.statsd_udp_packet_size,
                    opts.statsd_exclude_ephemeral, gather, on_pushed=lambda p: _keep(path, p))
    return server.loop.create_task(_run(server, pusher, path))


async def _run(server, pusher: Pusher, path: str) -> None:
    """Start from what a previous acceptor 0 of this run pushed, else from the counts now."""
    try:
        with open(path, "rb") as f:
            kept = orjson.loads(f.read())
        pusher.last, pusher.last_gc_runs = kept["last"], kept["gc_runs"]
    except (OSError, ValueError, KeyError):  # a fresh broker: what it holds now is the start
        pusher.remember(*await pusher.gather())
    await pusher.run(lambda: server._stopping)


def _keep(path: str, pusher: Pusher) -> None:
    """Write what was pushed (atomically) for a restarted acceptor 0 (not once stopping)."""
    if any(path == _statsd_path(run) for run in _stopped):
        return
    try:
        with open(path + ".tmp", "wb") as f:
            f.write(orjson.dumps({"last": pusher.last, "gc_runs": pusher.last_gc_runs}))
        os.replace(path + ".tmp", path)
    except OSError as exc:
        log.warning("cannot keep the statsd state in %s: %s", path, exc)
