"""The V2 connection's states and its control commands: IDENTIFY, SUB (and its answer from
the router), CLS, NOP. The data-path commands (PUB, MPUB, DPUB, RDY, FIN, REQ, TOUCH) are
in nsqmp.acceptor.tcp beside the parse loop; AUTH is in nsqmp.acceptor.authorize.

Each handler takes (conn, params, body_off, body_len), as COMMANDS calls it.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import orjson

from nsqmp.acceptor import flow, upgrade
from nsqmp.acceptor.clientstats import tls_stats
from nsqmp.acceptor.gotext import go_identify, go_q
from nsqmp.acceptor.identify import IdentifyError, negotiate, response
from nsqmp.ipc import records
from nsqmp.protocol import errors as E
from nsqmp.protocol.errors import FatalClientError
from nsqmp.protocol.frames import CLOSE_WAIT_FRAME, OK_FRAME, response as response_frame
from nsqmp.protocol.names import is_valid_name

if TYPE_CHECKING:
    from nsqmp.acceptor.tcp import V2Connection

log = logging.getLogger("nsqmp.acceptor")

Params = tuple[bytes, ...]  # a command line split on single spaces; [0] is the token

# nsqd's client states (the numbers its /stats shows)
STATE_INIT, STATE_SUBSCRIBED, STATE_CLOSING = 0, 3, 4
FIN_STATES = (STATE_SUBSCRIBED, STATE_CLOSING)  # where FIN, REQ and TOUCH are allowed


def cmd_nop(conn: V2Connection, params: Params, body_off: int, body_len: int) -> None:
    """NOP: nothing, no answer."""


def cmd_identify(conn: V2Connection, params: Params, body_off: int, body_len: int) -> None:
    """IDENTIFY: negotiate the client's settings, answer, then start the upgrades."""
    if conn.state != STATE_INIT:
        raise FatalClientError(E.E_INVALID, "cannot IDENTIFY in current state")
    body = conn.body(params, body_off, body_len)
    end = body_off + body_len
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise FatalClientError(E.E_BAD_BODY, "IDENTIFY failed to decode JSON body") from None
    settings = conn.settings
    if log.isEnabledFor(logging.DEBUG):
        log.debug("PROTOCOL(V2): [%s] %s", conn.remote, go_identify(data), extra={"remote": conn.remote})
    given = data if isinstance(data, dict) else {}
    log.info("[%s] IDENTIFY: %s", conn.remote, go_identify(data), extra={
        "remote": conn.remote, "client_id": str(given.get("client_id", "")),
        "user_agent": str(given.get("user_agent", ""))})
    try:
        negotiate(data, conn.host.opts, settings)
    except IdentifyError as exc:
        raise FatalClientError(E.E_BAD_BODY, f"IDENTIFY {exc}") from None
    if not settings.feature_negotiation:
        # nsqd answers OK at once: without feature negotiation nothing is upgraded
        settings.tls = settings.snappy = settings.deflate = False
    if settings.snappy and settings.deflate:
        raise FatalClientError(E.E_IDENTIFY_FAILED, "cannot enable both deflate and snappy compression")
    conn.heartbeat.rearm()
    if settings.feature_negotiation:
        conn.write(response_frame(response(conn.host.opts, settings)))
    else:
        conn.write(OK_FRAME)
    _log_upgrades(conn)
    if settings.tls:
        # nothing more is read in the clear: the client's next bytes are its ClientHello
        conn.waiting_for = "TLS"
        conn.flow.pause_reading(flow.WAIT)
        buf = conn.buf
        conn.host.loop.create_task(upgrade.start_tls(conn, bytes(buf[end:])))
        del buf[end:]
    elif settings.snappy or settings.deflate:
        upgrade.start_compression(conn, end)
        conn.rescan = True  # the rest of the buffer was decompressed: scan it again


def _log_upgrades(conn: V2Connection) -> None:
    """nsqd's lines for the upgrades IDENTIFY negotiated (they start right after)."""
    settings = conn.settings
    if settings.tls:
        log.info("PROTOCOL(V2): [%s] upgrading connection to TLS", conn.remote, extra=conn.log_fields())
    if settings.snappy:
        log.info("PROTOCOL(V2): [%s] upgrading connection to snappy", conn.remote, extra=conn.log_fields())
    if settings.deflate:
        log.info("PROTOCOL(V2): [%s] upgrading connection to deflate (level %d)", conn.remote,
                 settings.deflate_level, extra=conn.log_fields())


def cmd_sub(conn: V2Connection, params: Params, body_off: int, body_len: int) -> None:
    """SUB: become the consumer of a channel; answered once its router has the channel."""
    if conn.state != STATE_INIT:
        raise FatalClientError(E.E_INVALID, "cannot SUB in current state")
    if conn.settings.heartbeat_interval_ms <= 0:
        raise FatalClientError(E.E_INVALID, "cannot SUB with heartbeats disabled")
    if len(params) < 3:
        raise FatalClientError(E.E_INVALID, "SUB insufficient number of parameters")
    topic, channel = params[1], params[2]
    if not is_valid_name(topic):
        raise FatalClientError(E.E_BAD_TOPIC, f"SUB topic name {go_q(topic)} is not valid")
    if not is_valid_name(channel):
        raise FatalClientError(E.E_BAD_CHANNEL, f"SUB channel name {go_q(channel)} is not valid")
    conn.auth.check(conn, "SUB", topic, channel)
    conn.topic, conn.channel = topic, channel
    if log.isEnabledFor(logging.DEBUG):
        names = {"topic": topic.decode(errors="replace"), "channel": channel.decode(errors="replace")}
        # nsqd's per-command line, Go's %s of the params: [SUB topic channel]
        log.debug("PROTOCOL(V2): [%s] [SUB %s %s]", conn.remote, names["topic"], names["channel"],
                  extra={**conn.log_fields(), **names})
    conn.router = conn.host.router_slot(topic)
    conn.state = STATE_SUBSCRIBED
    conn.waiting_for = "SUB"
    send_sub(conn)


def sub_confirmed(conn: V2Connection) -> None:
    """The router created the channel: answer the SUB, then read on."""
    if conn.waiting_for != "SUB":
        return  # a re-sent SUB (router restart) of a connection already answered
    conn.waiting_for = ""
    conn.write(OK_FRAME)
    conn.process()


def send_sub(conn: V2Connection) -> None:
    """Tell the topic's router about this consumer (again, after a router restart)."""
    conn.ahead.take()  # a restarted router knows nothing of what its predecessor sent ahead
    s = conn.settings
    host = conn.host
    info = orjson.dumps({
        "client_id": s.client_id, "hostname": s.hostname, "user_agent": s.user_agent,
        "remote_address": conn.remote, "connect_ts": conn.connect_ts,
        "msg_timeout": s.msg_timeout_ms, "sample_rate": s.sample_rate,
        "acceptor": host.index,
        "snappy": s.snappy, "deflate": s.deflate, "tls": conn.tls, **tls_stats(conn),
        **conn.auth.stats(),
    })
    # the first SUB holds the connection until SUB_OK; a re-sent one does not (RESUB)
    build = records.sub if conn.waiting_for == "SUB" else records.resub
    host.send_record(conn.router, build(conn.conn, conn.topic, conn.channel, info))
    if conn.rdy:
        host.send_record(conn.router, records.rdy(conn.conn, conn.rdy))
    if conn.state == STATE_CLOSING:
        host.send_record(conn.router, records.cls(conn.conn))


def cmd_cls(conn: V2Connection, params: Params, body_off: int, body_len: int) -> None:
    """CLS: no more deliveries; the client waits for its in-flight messages to finish."""
    if conn.state != STATE_SUBSCRIBED:
        raise FatalClientError(E.E_INVALID, "cannot CLS in current state")
    conn.state = STATE_CLOSING
    if log.isEnabledFor(logging.DEBUG):
        log.debug("PROTOCOL(V2): [%s] [CLS]", conn.remote, extra=conn.log_fields())
    conn.return_ahead()
    conn.host.send_record(conn.router, records.cls(conn.conn))
    conn.write(CLOSE_WAIT_FRAME)
