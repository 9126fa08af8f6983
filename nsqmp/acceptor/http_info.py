"""HTTP /ping, /info and /config/<option> (nsqd's doPing, doInfo, doConfig)."""
from __future__ import annotations

import orjson

from nsqmp.acceptor.http_request import JSON, TEXT, HttpError, Request
from nsqmp.acceptor.identify import VERSION
from nsqmp.config.options import DURATION, OPTIONS_BY_ATTR, parse_address
from nsqmp.golog import LEVELS


async def h_ping(server, req: Request):
    """GET /ping: OK, or NOK and why while the disk refuses writes."""
    if server.health:
        return 500, f"NOK - {server.health}".encode(), TEXT
    return 200, b"OK", TEXT


async def h_info(server, req: Request):
    """GET /info: version, ports, limits."""
    opts = server.opts
    return 200, orjson.dumps({
        "version": VERSION,
        "broadcast_address": opts.broadcast_address,
        "hostname": server.hostname,
        "http_port": server.http_port,
        "tcp_port": server.tcp_port,
        "start_time": server.start_time,
        "max_heartbeat_interval": int(opts.max_heartbeat_interval * 1e9),
        "max_output_buffer_size": opts.max_output_buffer_size,
        "max_output_buffer_timeout": int(opts.max_output_buffer_timeout * 1e9),
        "max_deflate_level": opts.max_deflate_level,
        "topology_zone": "",
        "topology_region": "",
    }), JSON


async def h_config(server, req: Request):
    """GET /config/<option>: the option's value as JSON (nsqd's config-file key names).

    PUT changes nsqlookupd_tcp_addresses (a JSON array of host:port) or log_level (text) at
    run time, as nsqd does: router 0 relays the value to every acceptor (acceptor 0 then
    connects to the new set of lookupds) before this acceptor answers with the new value.
    """
    key = req.path[len("/config/"):]
    if req.method == "PUT":
        await _config_put(server, key, req.body)
    elif req.method != "GET":
        raise HttpError(405, "METHOD_NOT_ALLOWED")
    else:
        # a PUT answered by another acceptor a moment ago: its CONFIG_SET may be waiting in
        # our ring while this request was read first
        server.catch_up()
    try:
        value = getattr(server.opts, key)
    except AttributeError:
        raise HttpError(400, "INVALID_OPTION") from None
    return 200, orjson.dumps(config_value(key, value)), JSON


def config_value(key: str, value):
    """An option's value as nsqd's JSON has it: a duration is Go's time.Duration, an
    integer count of nanoseconds; a repeatable option a list."""
    option = OPTIONS_BY_ATTR.get(key)
    if option is not None and option.type is DURATION and isinstance(value, (int, float)):
        return round(value * 1e9)
    if isinstance(value, tuple):
        return list(value)
    return value


def _parse_lookupd_addresses(body: bytes) -> list[str]:
    """A JSON array of host:port strings (null is the empty list, as Go reads it)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise HttpError(400, "INVALID_VALUE") from None
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise HttpError(400, "INVALID_VALUE")
    try:
        return [str(parse_address(a)) for a in value]
    except ValueError:
        raise HttpError(400, "INVALID_VALUE") from None


async def _config_put(server, key: str, body: bytes) -> None:
    if not body or len(body) > server.opts.max_msg_size:
        raise HttpError(413, "INVALID_VALUE")
    value: str | list[str]
    if key == "nsqlookupd_tcp_addresses":
        value = _parse_lookupd_addresses(body)
    elif key == "log_level":
        value = body.decode("utf-8", "replace").lower()
        if value not in LEVELS:
            raise HttpError(400, "INVALID_VALUE")
    else:
        raise HttpError(400, "INVALID_OPTION")
    replies = await server.ask_routers({"op": "config_set", "option": key, "value": value},
                                       [server.plan.router_slot(0)])
    if not replies or replies[0].get("error"):
        raise HttpError(500, "INTERNAL_ERROR")
