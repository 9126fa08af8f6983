"""AUTH on one connection: its secret, the auth server's last answer, and nsqd's CheckAuth.

`nsqmp.acceptor.auth` is the HTTP client of the auth servers; this module is the
connection's side: the AUTH command, the check before PUB/MPUB/DPUB/SUB (re-asking once
the answer's ttl has passed), and the auth fields of a client's /stats.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import orjson

from nsqmp.acceptor import flow
from nsqmp.acceptor.auth import AuthFailed, AuthState
from nsqmp.acceptor.gotext import go_q
from nsqmp.acceptor.session import STATE_INIT, Params
from nsqmp.acceptor.upgrade import common_name
from nsqmp.protocol import errors as E
from nsqmp.protocol.errors import FatalClientError
from nsqmp.protocol.frames import response as response_frame

if TYPE_CHECKING:
    from nsqmp.acceptor.host import AuthService
    from nsqmp.acceptor.tcp import V2Connection

log = logging.getLogger("nsqmp.acceptor")


class Suspended(Exception):
    """The command waits for something (an auth server): parse it again once that is done."""


class ConnAuth:
    """nsqd's AuthSecret/AuthState of one client, and its CheckAuth."""
    __slots__ = ("service", "secret", "state", "fresh")

    def __init__(self, service: AuthService) -> None:
        self.service = service
        self.secret = b""
        self.state: AuthState | None = None
        self.fresh = False  # an answer just fetched for the command being re-parsed

    def check(self, conn: V2Connection, cmd: str, topic: bytes, channel: bytes) -> None:
        """nsqd's CheckAuth: authorized first, re-asked once the answer's ttl has passed,
        then the topic (and channel, for SUB) must be allowed. A re-ask suspends the
        command; it is parsed again when the answer is in."""
        if not self.service.enabled:
            return
        state = self.state
        if state is None or not state.authorizations:
            raise FatalClientError(E.E_AUTH_FIRST, f"AUTH required before {cmd}")
        if self.fresh:
            self.fresh = False
        elif state.expires < conn.host.loop.time():
            self.query(conn, first=False)
            raise Suspended
        if not state.allows(topic.decode(), channel.decode()):
            raise FatalClientError(E.E_UNAUTHORIZED, f"AUTH failed for {cmd} on {go_q(topic)} {go_q(channel)}")

    def query(self, conn: V2Connection, first: bool) -> None:
        """Ask the auth servers off the parse path: nothing more is read meanwhile."""
        conn.waiting_for = "AUTH"
        conn.flow.pause_reading(flow.WAIT)
        conn.host.loop.create_task(self._ask(conn, first))

    async def _ask(self, conn: V2Connection, first: bool) -> None:
        try:
            state = await self.service.query(
                conn.remote_ip, conn.tls, common_name(conn), self.secret, conn.host.loop.time())
        except Exception as exc:  # AuthFailed, or a bug: the client only learns that AUTH failed
            if not isinstance(exc, AuthFailed):
                log.exception("%s: AUTH query failed", conn.remote)
            # errors contacting the auth server are not for untrusted clients' eyes
            log.warning("PROTOCOL(V2): [%s] AUTH failed %s", conn.remote, exc, extra=conn.log_fields())
            conn.waiting_for = ""
            conn.send_error(FatalClientError(E.E_AUTH_FAILED, "AUTH failed"))
            return
        if conn.closed:
            return
        self.state = state
        conn.waiting_for = ""
        conn.last_read = time.monotonic()  # the silence deadline starts again with reading
        if first:
            if not state.authorizations:
                conn.send_error(FatalClientError(E.E_UNAUTHORIZED, "AUTH no authorizations found"))
                return
            conn.write(response_frame(orjson.dumps({
                "identity": state.identity, "identity_url": state.identity_url,
                "permission_count": len(state.authorizations)})))
        else:
            self.fresh = True
        conn.flow.resume_reading(flow.WAIT)
        conn.process()

    def stats(self) -> dict:
        """authed / auth_identity / auth_identity_url for /stats, omitted when empty (as nsqd)."""
        state = self.state
        if state is None:
            return {}
        out: dict = {}
        if state.authorizations:
            out["authed"] = True
        if state.identity:
            out["auth_identity"] = state.identity
        if state.identity_url:
            out["auth_identity_url"] = state.identity_url
        return out


def cmd_auth(conn: V2Connection, params: Params, body_off: int, body_len: int) -> None:
    """AUTH: the secret goes to the auth servers; their answer is the response."""
    if conn.state != STATE_INIT:
        raise FatalClientError(E.E_INVALID, "cannot AUTH in current state")
    if len(params) != 1:
        raise FatalClientError(E.E_INVALID, "AUTH invalid number of parameters")
    body = conn.body(params, body_off, body_len)  # the parser checked its size as nsqd
    auth = conn.auth
    if auth.state is not None and auth.state.authorizations:
        raise FatalClientError(E.E_INVALID, "AUTH already set")
    if not auth.service.enabled:
        raise FatalClientError(E.E_AUTH_DISABLED, "AUTH disabled")
    auth.secret = body
    auth.query(conn, first=True)
