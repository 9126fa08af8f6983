"""The admin's read routes: nsqadmin's /api/topics/:topic[/:channel], /api/nodes[/:node],
/api/counter, /api/graphite, and nsqmp's /api/stats/topics, /api/lookup and
/api/topics/:topic/:channel/peek (API.md)."""
from __future__ import annotations

import asyncio
from urllib.parse import quote, urlencode

import aiohttp
from aiohttp import web

from nsqmp.admin import stats as S
from nsqmp.admin.cluster import AllFailed, Errors, PeerError, producer_http_address
from nsqmp.admin.server import CLUSTER, GATHER, OPTS, error, reply, upstream, with_errors


async def h_topic(request: web.Request) -> web.Response:
    """GET /api/topics/:topic: the topic summed over its brokers, per-node rows, channels."""
    cluster, errors = request.app[CLUSTER], Errors()
    topic = request.match_info["topic"]
    try:
        producers = await cluster.topic_producers(topic, errors)
        rows = await cluster.node_stats(producers, topic, "", False, errors)
    except AllFailed as exc:
        return upstream(exc)
    agg = S.empty_topic(topic)
    for row in rows:
        S.add_topic(agg, row)
    return reply(with_errors(agg, errors))


async def h_channel(request: web.Request) -> web.Response:
    """GET /api/topics/:topic/:channel: the channel summed over its brokers, with clients."""
    cluster, errors = request.app[CLUSTER], Errors()
    topic, channel = request.match_info["topic"], request.match_info["channel"]
    try:
        producers = await cluster.topic_producers(topic, errors)
        rows = await cluster.node_stats(producers, topic, channel, True, errors)
    except AllFailed as exc:
        return upstream(exc)
    agg = None
    for row in rows:
        for ch in row["channels"] or ():
            if ch["channel_name"] == channel:
                agg = agg or S.empty_channel(topic, channel)
                S.add_channel(agg, ch)
    # no broker has it: nsqadmin's nil *ChannelStats leaves only "message"
    return reply(with_errors(agg or {}, errors))


PEEK_N, PEEK_MAX_N, PEEK_PREVIEW = 10, 1000, 256  # the page's default, a broker's bound, a body's preview


async def h_channel_peek(request: web.Request) -> web.Response:
    """GET /api/topics/:topic/:channel/peek (nsqmp): the next ?n= messages of the channel on
    each broker that has it (its /channel/peek), nothing consumed; bodies cut at ?max_body=."""
    cluster, errors = request.app[CLUSTER], Errors()
    topic, channel = request.match_info["topic"], request.match_info["channel"]
    try:
        n = int(request.query.get("n", PEEK_N))
        max_body = int(request.query.get("max_body", PEEK_PREVIEW))
    except ValueError:
        return error(400, "INVALID_N")
    if not 1 <= n <= PEEK_MAX_N or not 0 <= max_body <= 1 << 20:
        return error(400, "INVALID_N" if not 1 <= n <= PEEK_MAX_N else "INVALID_MAX_BODY")
    qs = urlencode({"topic": topic, "channel": channel, "n": n, "max_body": max_body})

    async def one(p: dict) -> dict | None:
        node = producer_http_address(p)
        try:
            got = await cluster.get(f"http://{node}/channel/peek?{qs}")
        except PeerError as exc:
            if "TOPIC_NOT_FOUND" in str(exc) or "CHANNEL_NOT_FOUND" in str(exc):
                return None  # this broker does not have the channel
            raise
        return {"node": node, "hostname": p.get("hostname", ""), **got}

    try:
        producers = await cluster.topic_producers(topic, errors)
    except AllFailed as exc:
        return upstream(exc)
    results = await asyncio.gather(*(one(p) for p in producers), return_exceptions=True)
    found, failed = [], []
    for p, res in zip(producers, results):
        if isinstance(res, PeerError):
            failed.append((producer_http_address(p), str(res)))
        elif isinstance(res, BaseException):
            raise res
        elif res is not None:
            found.append(res)
    if failed and len(failed) == len(producers):
        return upstream(AllFailed("failed to query any nsqd: " + "\n".join(t for _, t in failed)))
    for node, text in failed:
        errors.add(node, text)
    found.sort(key=lambda f: f["hostname"])
    nodes = [{k: f.get(k) for k in ("node", "hostname", "depth", "deferred_count", "in_flight_count")}
             for f in found]
    messages = [{"node": f["node"], **m} for f in found for m in f.get("messages") or ()]
    return reply(with_errors({"topic": topic, "channel": channel, "nodes": nodes, "messages": messages}, errors))


async def h_nodes(request: web.Request) -> web.Response:
    """GET /api/nodes: every producer (broker) known."""
    errors = Errors()
    try:
        producers = await request.app[CLUSTER].producers(errors)
    except AllFailed as exc:
        return upstream(exc)
    return reply(with_errors({"nodes": producers}, errors))


async def h_node(request: web.Request) -> web.Response:
    """GET /api/nodes/:node: every topic and channel (with clients) of one broker."""
    cluster, errors = request.app[CLUSTER], Errors()
    node = request.match_info["node"]
    try:
        producers = await cluster.producers(errors, topics=False)
    except AllFailed as exc:
        return upstream(exc)
    found = [p for p in producers if producer_http_address(p) == node]
    if not found:
        return error(404, "NODE_NOT_FOUND")
    try:
        topics = await cluster.node_stats(found, "", "", True, Errors())
    except AllFailed as exc:
        return upstream(exc)
    clients = sum(len(c["clients"] or ()) for t in topics for c in t["channels"] or ())
    return reply(with_errors({"node": node, "topics": topics,
                              "total_messages": sum(t["message_count"] for t in topics),
                              "total_clients": clients}, errors))


async def h_counter(request: web.Request) -> web.Response:
    """GET /api/counter: message_count per topic:channel:node."""
    cluster, errors = request.app[CLUSTER], Errors()
    try:
        producers = await cluster.producers(errors, topics=False)
        rows = await cluster.node_stats(producers, "", "", False, errors)
    except AllFailed as exc:
        return upstream(exc)
    out: dict[str, dict] = {}
    for row in rows:
        for ch in row["channels"] or ():
            key = f"{row['topic_name']}:{ch['channel_name']}:{row['node']}"
            entry = out.setdefault(key, {"node": row["node"], "topic_name": row["topic_name"],
                                         "channel_name": ch["channel_name"], "message_count": 0})
            entry["message_count"] += ch["message_count"]
    return reply(with_errors({"stats": out}, errors))


async def h_topic_stats(request: web.Request) -> web.Response:
    """GET /api/stats/topics (nsqmp): the topic list page's numbers and rates in one answer."""
    try:
        snap = await request.app[GATHER].snapshot()
    except AllFailed as exc:
        return upstream(exc)
    from nsqmp.admin.history import HISTORY

    sampler = request.app.get(HISTORY)
    summaries = snap.summaries()
    rows = []
    for name in sorted(summaries):
        row = dict(summaries[name])  # the snapshot's rows are shared by every answer
        row["publish_rate"], row["delivery_rate"] = sampler.rates(name) if sampler else (None, None)
        rows.append(row)
    return reply(with_errors({"topics": rows}, snap.errors))


async def h_lookup(request: web.Request) -> web.Response:
    """GET /api/lookup (nsqmp): what each lookupd knows (topics, channels, producers, tombstones)."""
    cluster = request.app[CLUSTER]

    async def one(addr: str) -> dict:
        entry: dict = {"address": addr, "error": "", "topics": []}
        try:
            topics = (await cluster.get(f"http://{addr}/topics")).get("topics") or []
            nodes = (await cluster.get(f"http://{addr}/nodes")).get("producers") or []
            for name in sorted(topics):
                found = await cluster.get(f"http://{addr}/lookup?topic={quote(name)}")
                tomb = [producer_http_address(n) for n in nodes
                        for t, dead in zip(n.get("topics") or (), n.get("tombstones") or ()) if t == name and dead]
                entry["topics"].append({
                    "topic": name, "channels": sorted(found.get("channels") or []),
                    "producers": sorted(producer_http_address(p) for p in found.get("producers") or ()),
                    "tombstoned": sorted(tomb)})
        except PeerError as exc:
            entry["error"] = str(exc)
        return entry

    found = await asyncio.gather(*(one(a) for a in cluster.lookupds))
    bad = [e["error"] for e in found if e["error"]]
    return reply({"lookupds": found, "message": "WARNING: " + "; ".join(bad) if bad else ""})


async def h_graphite(request: web.Request) -> web.Response:
    """GET /api/graphite?metric=rate&target=...: nsqadmin's Graphite rate (needs --graphite-url)."""
    opts = request.app[OPTS]
    if request.query.get("metric") != "rate":
        return error(400, "INVALID_ARG_METRIC")
    target = request.query.get("target")
    if target is None:
        return error(400, "INVALID_ARG_TARGET")
    interval = int(opts.statsd_interval)
    query = urlencode({"from": f"-{interval * 2}sec", "until": f"-{interval}sec", "format": "json",
                       "target": target})
    try:
        data = await request.app[CLUSTER].get(f"{opts.graphite_url}/render?{query}")
        rate = data[0]["datapoints"][0][0]
    except (PeerError, LookupError, TypeError):
        return error(500, "INTERNAL_ERROR")
    return reply({"rate": "N/A" if rate is None or rate < 0 else f"{rate / interval:.2f}"})


async def h_render(request: web.Request) -> web.Response:
    """GET /render (with --proxy-graphite): nsqadmin's reverse proxy to Graphite's /render."""
    opts = request.app[OPTS]
    url = f"{opts.graphite_url.rstrip('/')}/render?{request.query_string}"
    headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
    session = request.app[CLUSTER].session
    try:
        async with session.get(url, headers=headers) as resp:
            body = await resp.read()
            return web.Response(status=resp.status, body=body,
                                content_type=resp.content_type or "application/octet-stream")
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return error(502, f"UPSTREAM_ERROR: {exc}")


def add_routes(router: web.UrlDispatcher, base: str, proxy_graphite: bool = False) -> None:
    """The read routes under the base path."""
    router.add_get(base + "/api/topics/{topic}", h_topic)
    router.add_get(base + "/api/topics/{topic}/{channel}", h_channel)
    router.add_get(base + "/api/topics/{topic}/{channel}/peek", h_channel_peek)
    router.add_get(base + "/api/nodes", h_nodes)
    router.add_get(base + "/api/nodes/{node}", h_node)
    router.add_get(base + "/api/counter", h_counter)
    router.add_get(base + "/api/graphite", h_graphite)
    router.add_get(base + "/api/stats/topics", h_topic_stats)
    router.add_get(base + "/api/lookup", h_lookup)
    if proxy_graphite:
        router.add_get(base + "/render", h_render)
