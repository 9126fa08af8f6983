"""Message TTL and dead letters on an acceptor: the two HTTP routes (POST /topic/ttl,
POST /channel/dead-letter: control requests to the router that owns the topic) and the
publish of a dead letter a router asks for (DEAD_LETTER, acceptor 0 only).

The dead letter goes through the ordinary publish path (segment append, PUBLISH to the
dead-letter topic's router, as an HTTP /pub), and only then does the router hear
DEAD_LETTER_OK: it acknowledges the original after that (nsqmp/router/deadletter.py).
"""
from __future__ import annotations

import logging

from nsqmp.acceptor.http_admin import admin, topic_arg, topic_channel_args
from nsqmp.acceptor.http_request import HttpError, Request
from nsqmp.acceptor.publisher import TopicFull
from nsqmp.config.options import parse_duration
from nsqmp.ipc import records
from nsqmp.protocol.names import is_valid_name

log = logging.getLogger("nsqmp.acceptor")

MAX_ATTEMPTS = 65535  # as an attempts count fits in a message frame (u16)


def on_dead_letter(server, src: int, rec: bytes) -> None:
    """DEAD_LETTER from router src: publish the body to the dead-letter topic, then
    answer. A failed publish is not answered: the router sends it again later."""
    token, topic, body = records.parse_dead_letter(rec)
    if not is_valid_name(topic):  # the router checked it; a bad one would make a bad directory
        log.error("dead letter to an invalid topic %r dropped", topic)
        return
    try:
        server.publisher.publish(topic, [body])
    except TopicFull:
        log.warning("dead-letter topic %s is full: a dead letter waits", topic.decode(errors="replace"))
        return
    except OSError as exc:
        log.error("dead letter to %s failed: %s", topic.decode(errors="replace"), exc)
        server.health_error(exc)
        return
    server.endpoint.send(src, records.dead_letter_ok([token]))


async def h_topic_ttl(server, req: Request):
    """POST /topic/ttl?topic=T&ttl=<Go duration>: the topic's own message TTL; ttl=0
    removes it (the broker's --msg-ttl applies again)."""
    topic = topic_arg(req, "INVALID_ARG_TOPIC")
    raw = req.query.get("ttl")
    if raw is None:
        raise HttpError(400, "MISSING_ARG_TTL")
    try:
        seconds = parse_duration(raw)  # Go's time.ParseDuration: "1h", "90s", "0"
    except ValueError:
        raise HttpError(400, "INVALID_TTL") from None
    ttl_ms = round(seconds * 1000)
    if seconds < 0 or (seconds > 0 and ttl_ms == 0):
        raise HttpError(400, "INVALID_TTL")
    return await admin(server, {"op": "topic_ttl", "topic": topic, "ttl_ms": ttl_ms})


async def h_channel_dead_letter(server, req: Request):
    """POST /channel/dead-letter?topic=T&channel=C&max_attempts=N[&to=T2]: after N
    deliveries a message goes to T2 (default T.dead) instead; max_attempts=0 turns it off."""
    topic, channel = topic_channel_args(req)
    raw = req.query.get("max_attempts")
    if raw is None:
        raise HttpError(400, "MISSING_ARG_MAX_ATTEMPTS")
    if not raw.isdigit() or int(raw) > MAX_ATTEMPTS:
        raise HttpError(400, "INVALID_MAX_ATTEMPTS")
    to = req.query.get("to") or None
    if to is not None and not is_valid_name(to.encode()):
        raise HttpError(400, "INVALID_ARG_TO")
    return await admin(server, {"op": "channel_dead_letter", "topic": topic, "channel": channel,
                                "max_attempts": int(raw), "to": to})


ROUTES = {
    "/topic/ttl": (("POST",), h_topic_ttl),
    "/channel/dead-letter": (("POST",), h_channel_dead_letter),
}
