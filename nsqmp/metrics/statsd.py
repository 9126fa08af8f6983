"""nsqd 1.3.0's statsd push (nsqd/statsd.go), line for line.

Every --statsd-interval: the whole broker's /stats (no clients) becomes nsqd's lines under
the prefix, counters as the difference since the last push (``|c``), gauges as they are
(``|g``); with --statsd-mem-stats the ``mem.*`` figures of /stats' memory block follow
(nsqmp.memstats says what each is in a Python broker). Lines are gathered into UDP packets
of at most --statsd-udp-packet-size bytes (a line never split; a longer line goes alone),
and the packets are spread over the interval less one second, as nsqd's SpreadWriter does.

The pure parts (``host_prefix``, ``Pusher.lines``, ``packets``) are tested without a
socket; the loop itself is ``Pusher.run``.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("nsqmp.statsd")

_EPHEMERAL = "#ephemeral"
MEM_GAUGES = ("heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
              "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes")


def host_key(hostport: str) -> str:
    """nsqd's statsd.HostKey: '.' and ':' become '_'."""
    return hostport.replace(".", "_").replace(":", "_")


def host_prefix(prefix: str, broadcast_address: str, http_port: str) -> str:
    """nsqd's prefix: %s -> HostKey(JoinHostPort(broadcast address, the --http-address
    port)), and a trailing '.' added when missing; "" stays "" (no prefix)."""
    if not prefix:
        return ""
    host = f"[{broadcast_address}]" if ":" in broadcast_address else broadcast_address
    out = prefix.replace("%s", host_key(f"{host}:{http_port}"))
    return out if out.endswith(".") else out + "."


def _e2e(item: dict) -> list[tuple[int, int]]:
    """(percent, value ns) of each e2e percentile, as nsqd names them (%.0f of q*100)."""
    return [(round(p["quantile"] * 100.0), int(p["value"]))
            for p in (item.get("e2e_processing_latency") or {}).get("percentiles") or ()]


class Pusher:
    """The statsd loop: what was pushed last (for the counters' differences) and the push.

    ``gather`` returns (topics as in /stats, the memory block or None); ``on_pushed`` (if
    given) is called after each push's lines are built, to keep ``last`` somewhere."""

    def __init__(self, address: str, prefix: str, interval: float, mem_stats: bool, packet_size: int,
                 exclude_ephemeral: bool, gather: Callable[[], Awaitable[tuple[list[dict], dict | None]]],
                 on_pushed: Callable[[Pusher], None] | None = None) -> None:
        self.address = address
        self.prefix = prefix
        self.interval = interval
        self.mem_stats = mem_stats
        self.packet_size = packet_size
        self.exclude_ephemeral = exclude_ephemeral
        self.gather = gather
        self.on_pushed = on_pushed
        self.last: dict = {}  # topic -> {"message_count", "message_bytes", "channels": {name: counts}}
        self.last_gc_runs = 0

    # -- building the lines (statsdLoop's body) ------------------------------------------------
    def lines(self, topics: list[dict], memory: dict | None) -> list[str]:
        """One push's lines, and the counters remembered for the next one."""
        p = self.prefix
        out: list[str] = []
        last_all: dict = {}
        for t in topics:
            name = t["topic_name"]
            if self.exclude_ephemeral and name.endswith(_EPHEMERAL):
                continue
            last = self.last.get(name, {})
            out.append(f"{p}topic.{name}.message_count:{t['message_count'] - last.get('message_count', 0)}|c")
            out.append(f"{p}topic.{name}.message_bytes:{t['message_bytes'] - last.get('message_bytes', 0)}|c")
            out.append(f"{p}topic.{name}.depth:{t['depth']}|g")
            out.append(f"{p}topic.{name}.backend_depth:{t['backend_depth']}|g")
            out += [f"{p}topic.{name}.e2e_processing_latency_{pct}:{v}|g" for pct, v in _e2e(t)]
            last_channels = last.get("channels", {})
            channels: dict = {}
            for c in t["channels"]:
                cname = c["channel_name"]
                if self.exclude_ephemeral and cname.endswith(_EPHEMERAL):
                    continue
                lc = last_channels.get(cname, {})
                stem = f"{p}topic.{name}.channel.{cname}"
                out.append(f"{stem}.message_count:{c['message_count'] - lc.get('message_count', 0)}|c")
                out.append(f"{stem}.depth:{c['depth']}|g")
                out.append(f"{stem}.backend_depth:{c['backend_depth']}|g")
                out.append(f"{stem}.in_flight_count:{c['in_flight_count']}|g")
                out.append(f"{stem}.deferred_count:{c['deferred_count']}|g")
                out.append(f"{stem}.requeue_count:{c['requeue_count'] - lc.get('requeue_count', 0)}|c")
                out.append(f"{stem}.timeout_count:{c['timeout_count'] - lc.get('timeout_count', 0)}|c")
                out.append(f"{stem}.clients:{c['client_count']}|g")
                out += [f"{stem}.e2e_processing_latency_{pct}:{v}|g" for pct, v in _e2e(c)]
                channels[cname] = {k: c[k] for k in ("message_count", "requeue_count", "timeout_count")}
            last_all[name] = {"message_count": t["message_count"], "message_bytes": t["message_bytes"],
                              "channels": channels}
        self.last = last_all  # nsqd's lastStats = stats: a topic gone and back starts from 0
        if self.mem_stats and memory is not None:
            out += [f"{p}mem.{k}:{int(memory.get(k, 0))}|g" for k in MEM_GAUGES]
            runs = int(memory.get("gc_total_runs", 0))
            out.append(f"{p}mem.gc_runs:{runs - self.last_gc_runs}|c")
            self.last_gc_runs = runs
        return out

    def remember(self, topics: list[dict], memory: dict | None) -> None:
        """Take the counters as they are now without pushing: the next push sends only what
        changed since (a restarted pusher, or a broker whose counts were kept on disk)."""
        self.lines(topics, memory)

    # -- the loop ---------------------------------------------------------------------------------
    async def run(self, stopping: Callable[[], bool]) -> None:
        """Push every interval until stopping() (ticks keep their phase and a slow push skips
        the ticks it overran, as Go's ticker drops them)."""
        loop = asyncio.get_running_loop()
        next_at = loop.time() + self.interval
        while not stopping():
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            next_at += self.interval
            while next_at <= loop.time():  # overran: the ticks missed are dropped
                next_at += self.interval
            if stopping():
                break
            try:
                await self.push_once(stopping)
            except Exception:  # a bad push must not end the loop (nor the acceptor)
                log.exception("STATSD: push to %s failed", self.address)
        log.info("STATSD: closing")

    async def push_once(self, stopping: Callable[[], bool] = lambda: False) -> int:
        """Gather, build, send (spread over interval - 1 s); returns the packets sent."""
        host, _, port = self.address.rpartition(":")
        try:  # resolved off the loop's thread (nsqd dials with a 1 s timeout)
            infos = await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(
                host.strip("[]"), int(port), type=socket.SOCK_DGRAM), 1.0)
            family, kind, proto, _, addr = infos[0]
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            sock.connect(addr)
        except (OSError, ValueError, IndexError, asyncio.TimeoutError):
            log.error("failed to create UDP socket to statsd(%s)", self.address)
            return 0
        try:
            log.info("STATSD: pushing stats to %s", self.address)
            topics, memory = await self.gather()
            # built on the loop's worker thread: ~2 us a line (84,000 lines for 1,000 topics x 10
            # channels), which would otherwise hold the acceptor's clients that long
            sent = await asyncio.get_running_loop().run_in_executor(
                None, lambda: packets(self.lines(topics, memory), self.packet_size))
            if self.on_pushed is not None:
                self.on_pushed(self)
            spread = max(0.0, self.interval - 1.0) / len(sent) if sent else 0.0
            for pkt in sent:
                start = time.monotonic()
                try:
                    sock.send(pkt)
                except OSError:  # nothing listens (ECONNREFUSED from an earlier packet): UDP drops it
                    pass
                if spread and not stopping():
                    await asyncio.sleep(max(0.0, spread - (time.monotonic() - start)))
            return len(sent)
        finally:
            sock.close()


def packets(lines: list[str], size: int) -> list[bytes]:
    """nsqd's BoundaryBufferedWriter: each line ends in '\\n'; a line that does not fit
    in what is left of the packet starts the next one; one longer than a packet goes alone."""
    out: list[bytes] = []
    buf = bytearray()
    for line in lines:
        data = (line + "\n").encode()
        if len(data) > size - len(buf) and buf:
            out.append(bytes(buf))
            buf.clear()
        if len(data) >= size and not buf:  # Go's bufio writes a large write straight through
            out.append(data)
            continue
        buf += data
    if buf:
        out.append(bytes(buf))
    return out
