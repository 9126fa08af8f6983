"""The admin's aiohttp application: pages, static files, the JSON API, CSRF/Origin checks.

Routes are nsqadmin 1.3.0's (nsqadmin/http.go) under `--base-path`, plus nsqmp's additions
(API.md is the contract with the front end in static/).
"""
from __future__ import annotations

import asyncio
import gc
import html
import logging
import secrets
import signal
from importlib import resources
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from nsqmp.admin import NSQADMIN_VERSION
from nsqmp.admin.cluster import AllFailed, Cluster, Errors
from nsqmp.admin.gather import Gatherer
from nsqmp.admin.options import AdminOptions

log = logging.getLogger("nsqmp.admin")

STATIC_DIR = Path(str(resources.files("nsqmp.admin") / "static"))
PAGES = ("/", "/topics", "/topics/{topic}", "/topics/{topic}/{channel}", "/nodes", "/nodes/{node}",
         "/lookup", "/counter")
MUTATING = frozenset(("POST", "PUT", "DELETE", "PATCH"))
CSRF_HEADER = "X-NSQMP-CSRF-Token"
_V1 = {"X-NSQ-Content-Type": "nsq; version=1.0"}

OPTS: web.AppKey[AdminOptions] = web.AppKey("opts", AdminOptions)
CLUSTER: web.AppKey[Cluster] = web.AppKey("cluster", Cluster)
GATHER: web.AppKey[Gatherer] = web.AppKey("gatherer", Gatherer)
TOKEN: web.AppKey[str] = web.AppKey("csrf_token", str)


def nsqmp_version() -> str:
    """The installed nsqmp's version ("dev" from a source tree)."""
    from nsqmp.version import package_version

    return package_version()


# -- answers ---------------------------------------------------------------------------------
def reply(data: object, status: int = 200) -> web.Response:
    """nsqadmin's RespondV1: JSON body, its content types."""
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json",
                        charset="utf-8", headers=_V1)


def error(status: int, message: str) -> web.Response:
    """nsqadmin's error answer: {"message": TEXT} with the status."""
    return reply({"message": message}, status)


def upstream(exc: AllFailed) -> web.Response:
    """Every peer failed: 502 UPSTREAM_ERROR."""
    log.error("%s", exc)
    return error(502, f"UPSTREAM_ERROR: {exc}")


def with_errors(data: dict, errors: Errors) -> dict:
    """Add nsqadmin's "message" (WARNING: ...) and nsqmp's per-node "errors" to an answer."""
    if errors.items:
        log.warning("%s", errors.message())
    data["message"] = errors.message()
    data["errors"] = errors.as_json()
    return data


def is_admin(request: web.Request) -> bool:
    """isAuthorizedAdminRequest: no --admin-user means everyone; else the ACL header's user."""
    opts = request.app[OPTS]
    if not opts.admin_users:
        return True
    return request.headers.get(opts.acl_http_header, "") in opts.admin_users


# -- CSRF and Origin -------------------------------------------------------------------------
@web.middleware
async def guard(request: web.Request, handler):
    """Refuse a mutating request with a foreign Origin or without the CSRF token (403)."""
    if request.method in MUTATING:
        origin = request.headers.get("Origin")
        if origin is not None and origin.split("://", 1)[-1].rstrip("/") != request.host:
            return error(403, "ORIGIN_MISMATCH")
        # /config/:opt is for nsqadmin's scripts, which send no token (config_api says why)
        config = request.path.startswith(request.app[OPTS].normalised_base_path() + "/config/")
        token = request.headers.get(CSRF_HEADER)
        if not (config and request.method == "PUT"):
            if not token:
                return error(403, "CSRF_TOKEN_MISSING")
            if not secrets.compare_digest(token, request.app[TOKEN]):
                return error(403, "CSRF_TOKEN_INVALID")
    try:
        return await handler(request)
    except web.HTTPNotFound:  # nsqadmin's router answers these in JSON too
        return error(404, "NOT_FOUND")
    except web.HTTPMethodNotAllowed:
        return error(405, "METHOD_NOT_ALLOWED")


# -- pages, static, config -------------------------------------------------------------------
async def h_index(request: web.Request) -> web.Response:
    """index.html with the base path, CSRF token and version filled in (API.md)."""
    app = request.app
    text = (STATIC_DIR / "index.html").read_text()
    for key, value in (("__NSQMP_BASE_PATH__", app[OPTS].normalised_base_path()),
                       ("__NSQMP_CSRF_TOKEN__", app[TOKEN]),
                       ("__NSQMP_VERSION__", f"{NSQADMIN_VERSION} (nsqmp {nsqmp_version()})")):
        text = text.replace(key, html.escape(value, quote=True))
    return web.Response(text=text, content_type="text/html", headers={"Cache-Control": "no-store"})


async def h_ping(request: web.Request) -> web.Response:
    """GET /ping: OK."""
    return web.Response(text="OK")


async def h_config(request: web.Request) -> web.Response:
    """GET /api/config (nsqmp): what nsqadmin's index template gets, and ours."""
    opts = request.app[OPTS]
    return reply({
        "version": NSQADMIN_VERSION, "nsqmp_version": nsqmp_version(),
        "base_path": opts.normalised_base_path(), "csrf_token": request.app[TOKEN],
        "is_admin": is_admin(request), "nsqlookupd": opts.lookupd_http_addresses,
        "nsqd": opts.nsqd_http_addresses, "graph_enabled": bool(opts.graphite_url),
        "graphite_url": opts.graphite_url, "proxy_graphite": opts.proxy_graphite,
        "statsd_prefix": opts.statsd_prefix, "statsd_counter_format": opts.statsd_counter_format,
        "statsd_gauge_format": opts.statsd_gauge_format, "statsd_interval": int(opts.statsd_interval),
        "history": {"interval": opts.history_interval, "window": opts.history_window},
        "refresh_interval": opts.refresh_interval,
    })


async def h_topics(request: web.Request) -> web.Response:
    """GET /api/topics[?inactive=true]: topic names (or lookupd-only topics with channels)."""
    cluster, errors = request.app[CLUSTER], Errors()
    try:
        if cluster.lookupds:
            topics = await cluster.topics(errors)
        else:  # from nsqd addresses: the brokers' /stats, gathered once for every page (gather.py)
            snap = await request.app[GATHER].snapshot()
            topics, errors = snap.topic_names(), snap.errors
        if request.query.get("inactive") == "true":
            inactive: dict[str, list[str]] = {}
            if cluster.lookupds:  # nsqadmin asks topic by topic; we ask them all at once
                found = await asyncio.gather(*(cluster.topic_producers(n, Errors()) for n in topics),
                                             return_exceptions=True)
                orphans = [n for n, p in zip(topics, found) if not p or isinstance(p, AllFailed)]
                chans = await asyncio.gather(*(cluster.lookupd_topic_channels(n, Errors()) for n in orphans),
                                             return_exceptions=True)
                inactive = {n: c if isinstance(c, list) else [] for n, c in zip(orphans, chans)}
            return reply(with_errors({"topics": inactive}, errors))
    except AllFailed as exc:
        return upstream(exc)
    return reply(with_errors({"topics": topics}, errors))


def routes(app: web.Application, base: str) -> None:
    """Every route under the base path."""
    from nsqmp.admin import actions, api, config_api, history

    r = app.router
    for page in PAGES:
        r.add_get(base + page if page != "/" or not base else base, h_index)
    if base:
        r.add_get(base + "/", h_index)
    r.add_get(base + "/ping", h_ping)
    r.add_static(base + "/static", STATIC_DIR, follow_symlinks=False)
    r.add_get(base + "/api/config", h_config)
    r.add_get(base + "/api/topics", h_topics)
    api.add_routes(r, base, app[OPTS].proxy_graphite)
    actions.add_routes(r, base)
    history.add_routes(r, base)
    config_api.add_routes(r, base)


async def _start_session(app: web.Application) -> None:
    opts = app[OPTS]
    timeout = aiohttp.ClientTimeout(total=opts.http_client_request_timeout,
                                    sock_connect=opts.http_client_connect_timeout)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, ttl_dns_cache=60), timeout=timeout)
    app[CLUSTER] = Cluster(session, opts.lookupd_http_addresses, opts.nsqd_http_addresses, timeout)
    app[GATHER] = Gatherer(app[CLUSTER])


async def _close_session(app: web.Application) -> None:
    await app[CLUSTER].session.close()


def make_app(opts: AdminOptions) -> web.Application:
    """The admin application for `opts` (the client session starts with the app)."""
    app = web.Application(middlewares=[guard])
    app[OPTS] = opts
    app[TOKEN] = opts.csrf_token or secrets.token_hex(16)
    routes(app, opts.normalised_base_path())
    app.on_startup.append(_start_session)
    app.on_cleanup.append(_close_session)
    from nsqmp.admin import history

    history.attach(app)
    return app


async def _serve(opts: AdminOptions) -> None:
    host, _, port = opts.http_address.rpartition(":")
    runner = web.AppRunner(make_app(opts), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host.strip("[]") or "0.0.0.0", int(port))
    await site.start()
    bound = site._server.sockets[0].getsockname()  # the real port when given :0
    log.info("HTTP: listening on %s:%d", bound[0], bound[1])
    # the modules and the app live as long as the process: out of the collector's sight, the full
    # collections that big gatherings trigger have only the gatherings' objects left to scan
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("HTTP: closing %s:%d", bound[0], bound[1])
    await runner.cleanup()


def serve(opts: AdminOptions) -> int:
    """Run the admin until SIGINT/SIGTERM; logs the bound address (the real port for :0)."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        pass
    asyncio.run(_serve(opts))
    return 0


__all__ = ["make_app", "serve", "reply", "error", "with_errors", "upstream", "is_admin", "CLUSTER",
           "GATHER", "OPTS", "TOKEN"]
