"""The shared gathering (nsqmp/admin/gather.py) against real HTTP brokers stand-ins: one
gathering for concurrent callers, reused within max_age, never reused across an action; the
flat arrays and the topic list's totals match the /stats they came from."""
from __future__ import annotations

import asyncio

import aiohttp
import orjson
from aiohttp import web

from nsqmp.admin.cluster import Cluster
from nsqmp.admin.gather import Gatherer, compact, compact_body


def _stats(paused: bool) -> dict:
    return {"topics": [
        {"topic_name": "a", "depth": 5, "backend_depth": 2, "message_count": 40, "paused": paused, "channels": [
            {"channel_name": "x", "depth": 3, "message_count": 40, "in_flight_count": 4, "deferred_count": 1},
            {"channel_name": "y", "depth": 0, "message_count": 40, "in_flight_count": 0, "deferred_count": 0}]},
        {"topic_name": "b", "depth": 0, "backend_depth": 0, "message_count": 7, "channels": None}]}


def test_compact_keeps_what_the_list_and_the_history_need():
    n = compact(_stats(False))
    assert n.names == ["a", "b"] and n.cnames == ["x", "y"]
    assert list(n.tvals) == [5, 2, 40, 0, 0, 0, 7, 0]
    assert list(n.cend) == [2, 2]
    assert list(n.cvals) == [3, 40, 32, 0, 40, 40]


async def _broker(state: dict) -> tuple[web.AppRunner, int]:
    """A broker stand-in: /info, /stats (counting them) and /topic/pause (changing them)."""
    async def stats(request: web.Request) -> web.Response:
        state["stats"] += 1
        await asyncio.sleep(0.1)  # long enough for callers to meet
        return web.Response(body=orjson.dumps(_stats(state["paused"])), content_type="application/json")

    async def info(request: web.Request) -> web.Response:
        return web.json_response({"version": "1.3.0", "hostname": "h", "tcp_port": 1, "http_port": state["port"],
                                  "broadcast_address": "127.0.0.1"})

    async def pause(request: web.Request) -> web.Response:
        state["paused"] = True
        return web.Response(text="OK")

    app = web.Application()
    app.router.add_get("/stats", stats)
    app.router.add_get("/info", info)
    app.router.add_post("/topic/pause", pause)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


def test_one_gathering_for_concurrent_callers_and_none_reused_across_an_action():
    async def main() -> None:
        state = {"stats": 0, "paused": False, "port": 0}
        runner, state["port"] = await _broker(state)
        addr = f"127.0.0.1:{state['port']}"
        try:
            async with aiohttp.ClientSession() as session:
                cluster = Cluster(session, [], [addr])
                g = Gatherer(cluster)
                first = await asyncio.gather(*(g.snapshot() for _ in range(5)))
                assert state["stats"] == 1 and all(s is first[0] for s in first)
                assert await g.snapshot() is first[0]  # within max_age: reused
                row = first[0].summaries()["a"]
                assert (row["depth"], row["memory_depth"], row["message_count"], row["channel_count"],
                        row["node_count"], row["paused"]) == (5, 3, 40, 2, 1, False)
                assert first[0].topic_names() == ["a", "b"]
                await cluster.post(f"http://{addr}/topic/pause?topic=a")  # an action: stale now
                after = await g.snapshot()
                assert state["stats"] == 2 and after.summaries()["a"]["paused"] is True
                await asyncio.sleep(0.05)
                assert (await g.snapshot(max_age=0.01)) is not after and state["stats"] == 3
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_a_body_is_cut_a_topic_at_a_time_as_it_would_be_whole():
    stats = _stats(True)
    stats["topics"].append({"topic_name": "c\u00e9{\"topic_name\":", "depth": 1, "channels": [{"channel_name": "z"}]})
    laid_out = orjson.dumps(dict(version="1.3.0", **stats, memory={"heap_objects": 1}))
    for body in (laid_out, bytearray(laid_out), orjson.dumps({"status_code": 200, "data": stats}),
                 orjson.dumps(stats, option=orjson.OPT_INDENT_2), orjson.dumps({"topics": None})):
        whole = compact(orjson.loads(body) if b"status_code" not in body else stats)
        cut = compact_body(body)
        assert (cut.names, cut.cnames, cut.tvals, cut.cend, cut.cvals) == (
            whole.names, whole.cnames, whole.tvals, whole.cend, whole.cvals)
    assert compact_body(laid_out).names == ["a", "b", "c\u00e9{\"topic_name\":"]
