"""HTTP /stats: every router's part gathered, in nsqd's JSON or its text format."""
from __future__ import annotations

import time

import orjson

from nsqmp.acceptor.http_request import JSON, TEXT, Request, check_params
from nsqmp.acceptor.identify import VERSION
from nsqmp.memstats import FIELDS as MEMORY_FIELDS
from nsqmp.version import version_line


async def h_stats(server, req: Request):
    """GET /stats[?format=json&topic=&channel=&include_clients=&include_mem=]."""
    check_params(req)
    fmt = req.query.get("format", "text")
    # nsqd reads a parameter that is absent as "": no filter
    topic = req.query.get("topic") or None
    channel = req.query.get("channel") or None
    include_clients = _bool_param(req.query.get("include_clients"), True)
    include_mem = _bool_param(req.query.get("include_mem"), True)
    include_timer = _bool_param(req.query.get("include_timer"), False)  # nsqmp's own
    found: list = await server.gather_stats(topic, channel, include_clients)
    topics: list | None = None  # nsqd returns its empty Stats for a topic it does not have: null, null
    producers: list | None = None
    if topic is None or found:
        if channel is not None:  # a topic without that channel is left out
            found = [t for t in found if t["channels"]]
        topics = found
        if not include_clients:
            for t in found:
                for c in t["channels"]:
                    c["clients"] = None
        else:
            # null rather than [] when there is none, as nsqd's nil slice
            producers = server.producers.local(topic) + server.producers.others(topic) or None
    stats = {
        "version": VERSION,
        "health": f"NOK - {server.health}" if server.health else "OK",
        "start_time": server.start_time,
        "topics": topics,
    }
    if include_timer:
        stats["nsqmp_fire_lateness"] = await server.gather_fire_lateness()
    if include_mem:  # omitempty in nsqd
        stats["memory"] = await server.gather_memory()
    stats["producers"] = producers
    if fmt == "json":
        return 200, orjson.dumps(stats), JSON
    return 200, render_text(stats, time.time()).encode(), TEXT


# nsqd's boolParams: these spellings are read, anything else keeps the default
_BOOLS = {"true": True, "1": True, "false": False, "0": False}


def _bool_param(value: str | None, default: bool) -> bool:
    return _BOOLS.get(value, default) if value is not None else default


def render_text(stats: dict, now: float) -> str:
    """/stats in nsqd's text format (its printStats and ClientV2Stats.String, line by line)."""
    start = stats["start_time"]
    out = [version_line("nsqd", VERSION) + "\n",
           f"start_time {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(start))}\n",
           f"uptime {go_duration(max(0.0, now - start))}\n",
           f"\nHealth: {stats['health']}\n"]
    memory = stats.get("memory")
    if memory is not None:
        out.append("\nMemory:\n")
        out += [f"   {name:<25}\t{memory[name]}\n" for name in MEMORY_FIELDS]
    topics = stats["topics"] or []
    out.append("\nTopics:" if topics else "\nTopics: None\n")
    for t in topics:
        out.append(f"\n{'*P ' if t['paused'] else '   '}[{t['topic_name']:<15}] depth: {t['depth']:<5} "
                   f"be-depth: {t['backend_depth']:<5} msgs: {t['message_count']:<8} "
                   f"e2e%: {_e2e(t)}\n")
        for c in t["channels"]:
            out.append(f"{'   *P ' if c['paused'] else '      '}[{c['channel_name']:<25}] "
                       f"depth: {c['depth']:<5} be-depth: {c['backend_depth']:<5} "
                       f"inflt: {c['in_flight_count']:<4} def: {c['deferred_count']:<4} "
                       f"re-q: {c['requeue_count']:<5} timeout: {c['timeout_count']:<5} "
                       f"{_beyond(c)}"
                       f"msgs: {c['message_count']:<8} e2e%: {_e2e(c)}\n")
            for cl in c["clients"] or []:
                out.append(f"        {client_line(cl, now)}\n")
    producers = stats["producers"] or []
    if not producers:
        out.append("\nProducers: None\n")
    else:
        out.append("\nProducers:\n")
        out += [f"   {client_line(p, now)}\n" for p in producers]
    return "".join(out)


def _beyond(c: dict) -> str:
    """nsqmp's TTL and dead-letter counts on a channel's line, only where they count
    something or dead letters are on (otherwise the line is nsqd's)."""
    expired, dead = c.get("expired_count", 0), c.get("dead_letter_count", 0)
    if not (expired or dead or c.get("max_attempts")):
        return ""
    return f"expired: {expired:<5} dead: {dead:<5} "


def _e2e(item: dict) -> str:
    """nsqd's quantile Result.String(): each percentile's value as stringy.NanoSecondToHuman."""
    return ", ".join(_ns_to_human(p["value"]) for p in item["e2e_processing_latency"]["percentiles"] or ())


def _ns_to_human(v: float) -> str:
    for size, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if v > size:
            return f"{v / size:.1f}{suffix}"
    return f"{v:.1f}ns"


def client_line(cl: dict, now: float) -> str:
    """nsqd's ClientV2Stats.String(): a producer's line when it has published, else a consumer's."""
    port = cl["remote_address"].rpartition(":")[2]
    ident = f"{cl['hostname']}:{port} {cl['user_agent']}"
    connected = go_duration(float(int(max(0.0, now - cl["connect_ts"]))))
    counts = cl.get("pub_counts")
    if counts:
        total = sum(pc["count"] for pc in counts)
        topics = ",".join(f"{pc['topic']}={pc['count']}" for pc in counts)
        return f"[{cl['version']} {ident:<21}] msgs: {total:<8} topics: {topics} connected: {connected}"
    return (f"[{cl['version']} {ident:<21}] state: {cl['state']} inflt: {cl['in_flight_count']:<4} "
            f"rdy: {cl['ready_count']:<4} fin: {cl['finish_count']:<8} re-q: {cl['requeue_count']:<8} "
            f"msgs: {cl['message_count']:<8} connected: {connected}")


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String() of a non-negative duration given in seconds."""
    ns = int(round(seconds * 1e9))
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:  # below a second Go switches unit: ns, µs or ms
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return _trim(ns, size) + unit
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _trim(rest, 1_000_000_000) + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text


def _trim(value: int, unit: int) -> str:
    """value / unit with the fraction's trailing zeros dropped (Go's fmtFrac)."""
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{str(frac).rjust(digits, '0').rstrip('0')}"
