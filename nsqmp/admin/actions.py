"""The admin's actions (nsqadmin/http.go's POST/DELETE routes) and their notifications
(nsqadmin/notify.go). Every action needs the CSRF token (server.guard) and, with --admin-user,
an admin user (403 FORBIDDEN); each answers {"message": ""} or nsqadmin's "WARNING: ...".
"""
from __future__ import annotations

import asyncio
import base64
import logging
import re
import socket
import time
from urllib.parse import quote

import aiohttp
import orjson
from aiohttp import web

from nsqmp.admin.cluster import AllFailed, Cluster, Errors, producer_http_address
from nsqmp.admin.server import CLUSTER, OPTS, error, is_admin, reply, upstream

log = logging.getLogger("nsqmp.admin")

_NAME = re.compile(r"^[.a-zA-Z0-9_-]+(#ephemeral)?$")
_PENDING: web.AppKey[set] = web.AppKey("notifications", set)


def valid_name(name: str) -> bool:
    """protocol.IsValidTopicName / IsValidChannelName."""
    return 0 < len(name) <= 64 and _NAME.match(name) is not None


def _answer(errors: Errors) -> web.Response:
    if errors.items:
        log.warning("%s", errors.message())
    return reply({"message": errors.message()})


async def _body(request: web.Request) -> dict | None:
    try:
        data = orjson.loads(await request.read() or b"null")
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _basic_user(request: web.Request) -> str:
    kind, _, b64 = request.headers.get("Authorization", "").partition(" ")
    if kind != "Basic":
        return ""
    try:
        user, sep, _ = base64.b64decode(b64, validate=True).decode().partition(":")
    except ValueError:
        return ""
    return user if sep else ""


def notify(request: web.Request, action: str, topic: str, channel: str = "", node: str = "") -> None:
    """notifyAdminAction: POST nsqadmin's AdminAction JSON to --notification-http-endpoint,
    in the background (never delays the answer)."""
    endpoint = request.app[OPTS].notification_http_endpoint
    if not endpoint:
        return
    scheme = "https" if request.secure or request.headers.get("X-Scheme") == "https" else "http"
    body: dict = {"action": action, "topic": topic}
    if channel:
        body["channel"] = channel
    if node:
        body["node"] = node
    body["timestamp"] = int(time.time())
    user = _basic_user(request)
    if user:
        body["user"] = user
    peer = request.transport.get_extra_info("peername") if request.transport else None
    body.update(remote_ip=f"{peer[0]}:{peer[1]}" if peer else "", user_agent=request.headers.get("User-Agent", ""),
                url=f"{scheme}://{request.host}{request.rel_url}", via=socket.gethostname())
    session = request.app[CLUSTER].session

    async def send() -> None:
        try:
            async with session.post(endpoint, data=orjson.dumps(body),
                                    headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            log.error("failed to send notification to %s - %s", endpoint, exc)

    pending = request.app.setdefault(_PENDING, set())  # keep a reference until it is sent
    task = asyncio.get_running_loop().create_task(send())
    pending.add(task)
    task.add_done_callback(pending.discard)


async def _broker_action(cluster: Cluster, topic: str, uri: str, qs: str, errors: Errors) -> None:
    """actionHelper: POST uri?qs to every broker having the topic."""
    producers = await cluster.topic_producers(topic, errors)
    await cluster.post_all([producer_http_address(p) for p in producers], uri, qs, errors)


def _guarded(handler):
    """Refuse non-admins (403 FORBIDDEN) and turn AllFailed into 502, as every action does."""
    async def wrapped(request: web.Request) -> web.Response:
        if not is_admin(request):
            return error(403, "FORBIDDEN")
        try:
            return await handler(request)
        except AllFailed as exc:
            return upstream(exc)
    wrapped.__doc__ = handler.__doc__
    return wrapped


@_guarded
async def h_create(request: web.Request) -> web.Response:
    """POST /api/topics {"topic", "channel"?}: create on the lookupds (and the channel on brokers)."""
    body = await _body(request)
    if body is None:
        return error(400, "INVALID_BODY")
    topic, channel = str(body.get("topic") or ""), str(body.get("channel") or "")
    if not valid_name(topic):
        return error(400, "INVALID_TOPIC")
    if channel and not valid_name(channel):
        return error(400, "INVALID_CHANNEL")
    cluster, errors = request.app[CLUSTER], Errors()
    await cluster.post_all(cluster.lookupds, "topic/create", f"topic={quote(topic)}", errors)
    if channel:
        qs = f"topic={quote(topic)}&channel={quote(channel)}"
        await cluster.post_all(cluster.lookupds, "channel/create", qs, errors)
        if cluster.lookupds:
            producers = await cluster.topic_producers(topic, errors)
            await cluster.post_all([producer_http_address(p) for p in producers], "channel/create", qs, errors)
    notify(request, "create_topic", topic)
    if channel:
        notify(request, "create_channel", topic, channel)
    return _answer(errors)


@_guarded
async def h_topic_action(request: web.Request) -> web.Response:
    """POST /api/topics/:topic[/:channel] {"action": "pause"|"unpause"|"empty"}."""
    topic = request.match_info["topic"]
    channel = request.match_info.get("channel", "")
    body = await _body(request)
    if body is None:
        return error(400, "INVALID_BODY")
    action = body.get("action")
    if action not in ("pause", "unpause", "empty"):
        return error(400, "INVALID_ACTION")
    kind = "channel" if channel else "topic"
    qs = f"topic={quote(topic)}" + (f"&channel={quote(channel)}" if channel else "")
    errors = Errors()
    try:
        await _broker_action(request.app[CLUSTER], topic, f"{kind}/{action}", qs, errors)
    finally:
        notify(request, f"{action}_{kind}", topic, channel)
    return _answer(errors)


@_guarded
async def h_delete(request: web.Request) -> web.Response:
    """DELETE /api/topics/:topic[/:channel]: on every lookupd, then every broker having it."""
    topic = request.match_info["topic"]
    channel = request.match_info.get("channel", "")
    kind = "channel" if channel else "topic"
    qs = f"topic={quote(topic)}" + (f"&channel={quote(channel)}" if channel else "")
    cluster, errors = request.app[CLUSTER], Errors()
    producers = await cluster.topic_producers(topic, errors)  # before the lookupds forget them
    await cluster.post_all(cluster.lookupds, f"{kind}/delete", qs, errors)
    await cluster.post_all([producer_http_address(p) for p in producers], f"{kind}/delete", qs, errors)
    notify(request, f"delete_{kind}", topic, channel)
    return _answer(errors)


@_guarded
async def h_tombstone(request: web.Request) -> web.Response:
    """DELETE /api/nodes/:node {"topic"}: tombstone the node for the topic on every lookupd,
    then delete the topic on that node."""
    node = request.match_info["node"]
    body = await _body(request)
    if body is None:
        return error(400, "INVALID_BODY")
    topic = str(body.get("topic") or "")
    if not valid_name(topic):
        return error(400, "INVALID_TOPIC")
    cluster, errors = request.app[CLUSTER], Errors()
    await cluster.post_all(cluster.lookupds, "topic/tombstone", f"topic={quote(topic)}&node={quote(node)}", errors)
    await cluster.post_all([node], "topic/delete", f"topic={quote(topic)}", errors)
    notify(request, "tombstone_topic_producer", topic, "", node)
    return _answer(errors)


def add_routes(router: web.UrlDispatcher, base: str) -> None:
    """The action routes under the base path."""
    router.add_post(base + "/api/topics", h_create)
    router.add_post(base + "/api/topics/{topic}", h_topic_action)
    router.add_post(base + "/api/topics/{topic}/{channel}", h_topic_action)
    router.add_delete(base + "/api/topics/{topic}", h_delete)
    router.add_delete(base + "/api/topics/{topic}/{channel}", h_delete)
    router.add_delete(base + "/api/nodes/{node}", h_tombstone)
