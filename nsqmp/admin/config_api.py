"""nsqadmin's /config/:opt: read any option by its config name; change the lookupd addresses or
the log level at run time. Only from --allow-config-from-cidr (default 127.0.0.1/8).

PUT here needs no CSRF token, as scripts written for nsqadmin send none: a browser cannot send a
cross-site PUT without a CORS preflight this server never grants, and server.guard still refuses
a foreign Origin.
"""
from __future__ import annotations

import ipaddress
import logging

import orjson
from aiohttp import web

from nsqmp.admin.server import CLUSTER, OPTS, error, reply

_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}  # lg.LogLevel's numbers
_PY_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
              "error": logging.ERROR, "fatal": logging.CRITICAL}
# nsqadmin's config names (flag names with "_", or the cfg tag) -> AdminOptions fields
NAMES = {
    "log_level": "log_level", "log_prefix": "log_prefix", "http_address": "http_address",
    "base_path": "base_path", "graphite_url": "graphite_url", "proxy_graphite": "proxy_graphite",
    "statsd_prefix": "statsd_prefix", "statsd_counter_format": "statsd_counter_format",
    "statsd_gauge_format": "statsd_gauge_format", "statsd_interval": "statsd_interval",
    "nsqlookupd_http_addresses": "lookupd_http_addresses", "nsqd_http_addresses": "nsqd_http_addresses",
    "http_client_connect_timeout": "http_client_connect_timeout",
    "http_client_request_timeout": "http_client_request_timeout",
    "notification_http_endpoint": "notification_http_endpoint", "acl_http_header": "acl_http_header",
    "admin_users": "admin_users", "allow_config_from_cidr": "allow_config_from_cidr",
}
_DURATIONS = {"statsd_interval", "http_client_connect_timeout", "http_client_request_timeout"}


def _value(opts, name: str) -> object:
    value = getattr(opts, NAMES[name])
    if name == "log_level":
        return _LEVELS.get(value, 2)
    if name in _DURATIONS:
        return int(value * 1e9)  # time.Duration: nanoseconds
    return value


async def h_config(request: web.Request) -> web.Response:
    """GET/PUT /config/:opt (nsqadmin's doConfig)."""
    opts = request.app[OPTS]
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if opts.allow_config_from_cidr:
        try:
            allowed = ipaddress.ip_address(peer[0]) in ipaddress.ip_network(opts.allow_config_from_cidr, strict=False)
        except (TypeError, ValueError):
            return error(400, "INVALID_REMOTE_ADDR")
        if not allowed:
            return error(403, "FORBIDDEN")
    name = request.match_info["opt"]
    if request.method == "PUT":
        body = await request.content.read(1024 * 1024 + 1)
        if not body or len(body) > 1024 * 1024:
            return error(413, "INVALID_VALUE")
        if name == "nsqlookupd_http_addresses":
            try:
                addrs = orjson.loads(body)
            except orjson.JSONDecodeError:
                return error(400, "INVALID_VALUE")
            if not isinstance(addrs, list) or not all(isinstance(a, str) for a in addrs):
                return error(400, "INVALID_VALUE")
            opts.lookupd_http_addresses = list(addrs)
            request.app[CLUSTER].lookupds = list(addrs)
        elif name == "log_level":
            level = body.decode(errors="replace").strip().lower()
            if level not in _LEVELS:
                return error(400, "INVALID_VALUE")
            opts.log_level = level
            logging.getLogger().setLevel(_PY_LEVELS[level])
        else:
            return error(400, "INVALID_OPTION")
    if name not in NAMES:
        return error(400, "INVALID_OPTION")
    value = _value(opts, name)
    if isinstance(value, str):  # RespondV1 sends a string as it is, not as JSON
        return web.Response(text=value, headers={"X-NSQ-Content-Type": "nsq; version=1.0"})
    return reply(value)


def add_routes(router: web.UrlDispatcher, base: str) -> None:
    """/config/:opt under the base path."""
    router.add_get(base + "/config/{opt}", h_config)
    router.add_put(base + "/config/{opt}", h_config)
