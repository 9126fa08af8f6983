"""HTTP topic and channel administration: /topic/* and /channel/* (create, delete,
empty, pause, unpause), each a control request to the router that owns the topic."""
from __future__ import annotations

from nsqmp.acceptor.http_request import TEXT, HttpError, Request, check_params
from nsqmp.protocol.names import is_valid_name

_STATUS = {"TOPIC_NOT_FOUND": 404, "CHANNEL_NOT_FOUND": 404, "INVALID_REQUEST": 400}


async def admin(server, request: dict):
    """Ask the owning router; its error becomes nsqd's status and message."""
    reply = await server.ask_owner(request)
    err = reply.get("error")
    if err:
        raise HttpError(_STATUS.get(err, 500), err)
    return 200, b"", TEXT


def topic_arg(req: Request, invalid: str | None = "INVALID_TOPIC") -> str:
    """The `topic` parameter: 400 MISSING_ARG_TOPIC without it, 400 `invalid` for a bad
    name (nsqd's /topic/* say INVALID_TOPIC, its topic-and-channel endpoints
    INVALID_ARG_TOPIC; None: not checked, as nsqd's delete and pause)."""
    check_params(req)
    topic = req.query.get("topic")
    if topic is None:
        raise HttpError(400, "MISSING_ARG_TOPIC")
    if invalid and not is_valid_name(topic.encode()):
        raise HttpError(400, invalid)
    return topic


def topic_channel_args(req: Request) -> tuple[str, str]:
    """nsqd's GetTopicChannelArgs: both present and valid."""
    topic = topic_arg(req, "INVALID_ARG_TOPIC")
    channel = req.query.get("channel")
    if channel is None:
        raise HttpError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel.encode()):
        raise HttpError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def _topic_op(op: str, validate: bool):
    async def handler(server, req: Request):
        return await admin(server, {"op": op, "topic": topic_arg(req, "INVALID_TOPIC" if validate else None)})
    return handler


def _channel_op(op: str):
    async def handler(server, req: Request):
        topic, channel = topic_channel_args(req)
        return await admin(server, {"op": op, "topic": topic, "channel": channel})
    return handler




ADMIN_ROUTES = {
    "/topic/create": (("POST",), _topic_op("topic_create", validate=True)),
    "/topic/delete": (("POST",), _topic_op("topic_delete", validate=False)),
    "/topic/empty": (("POST",), _topic_op("topic_empty", validate=True)),
    "/topic/pause": (("POST",), _topic_op("topic_pause", validate=False)),
    "/topic/unpause": (("POST",), _topic_op("topic_unpause", validate=False)),
    "/channel/create": (("POST",), _channel_op("channel_create")),
    "/channel/delete": (("POST",), _channel_op("channel_delete")),
    "/channel/empty": (("POST",), _channel_op("channel_empty")),
    "/channel/pause": (("POST",), _channel_op("channel_pause")),
    "/channel/unpause": (("POST",), _channel_op("channel_unpause")),
}
