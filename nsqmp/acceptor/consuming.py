"""The consuming commands of a V2 connection: RDY, FIN, REQ, TOUCH.

A mixin of V2Connection (nsqmp.acceptor.tcp), not a class of its own: the parse loop hands
runs of FINs to `_send_fins` directly, and these methods are called from it and from
COMMANDS exactly as if they were written in the connection's class, so splitting the file
costs no call per command (a consumer's FINs are the other hot path).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from nsqmp.acceptor.ahead import Ahead
from nsqmp.acceptor.gotext import go_s
from nsqmp.acceptor.session import FIN_STATES, Params, STATE_CLOSING, STATE_SUBSCRIBED
from nsqmp.ipc import records
from nsqmp.layouts import ID
from nsqmp.protocol import errors as E
from nsqmp.protocol.errors import FatalClientError

if TYPE_CHECKING:
    from nsqmp.acceptor.host import AcceptorSide

log = logging.getLogger("nsqmp.acceptor")

# FINs a connection sends in one tick travel to the router as one FIN record of up to this
# many bytes (512 IDs): one ring record and one router dispatch for a consumer's window
_FIN_RECORD_MAX = records.FIN_IDS_AT + ID * 512


class ConsumeCommands:
    """RDY, FIN, REQ and TOUCH of V2Connection."""

    # the V2Connection state these methods use (declared for the type checker)
    host: AcceptorSide
    conn: int
    remote: str
    log_fields: Callable[[], dict[str, str]]
    state: int
    router: int
    rdy: int
    _fins: bytearray
    ahead: Ahead
    write: Callable[[bytes | memoryview], None]
    _send: Callable[[int, bytes | bytearray], None]
    _extend: Callable[[int, bytearray, bytes, int], bool]

    def cmd_rdy(self, params: Params, body_off: int, body_len: int) -> None:
        """RDY <count>: how many messages may be in flight to this client."""
        if self.state == STATE_CLOSING:
            log.info("PROTOCOL(V2): [%s] ignoring RDY after CLS in state ClientStateV2Closing", self.remote,
                     extra=self.log_fields())
            return
        if self.state != STATE_SUBSCRIBED:
            raise FatalClientError(E.E_INVALID, "cannot RDY in current state")
        count = 1
        if len(params) > 1:
            raw = params[1]
            if raw and not raw.isdigit():
                raise FatalClientError(E.E_INVALID, f"RDY could not parse count {go_s(raw)}")
            count = int(raw) if raw else 0  # nsqd's ByteToBase10 reads "" as 0
        max_rdy = self.host.opts.max_rdy_count
        if count > max_rdy:
            raise FatalClientError(E.E_INVALID, f"RDY count {count} out of range 0-{max_rdy}")
        if count < self.rdy and self.ahead:
            self.return_ahead()  # sent under the higher RDY: they would not fit under this one
        self.rdy = count
        self._send(self.router, records.rdy(self.conn, count))

    def cmd_fin(self, params: Params, body_off: int, body_len: int) -> None:
        """FIN <id>: the message is done (most come in runs, through Parser.fins)."""
        self._send_fins(self._message_command(params, "FIN", 2))

    def _send_fins(self, ids: bytes) -> None:
        """Queue FINs (16-byte IDs end to end) for the router. While the tick's FIN record
        is still the last record queued for it (nothing of this or any other connection
        came after), the IDs join that record; the rest go in new ones."""
        # each FIN frees room for one frame sent ahead, written now; the record says how many
        ahead = self.ahead.write(len(ids) // ID, self.write) if self.ahead else 0
        start, total = 0, len(ids)
        while start < total:
            room = _FIN_RECORD_MAX - len(self._fins)
            piece = ids[start:start + room]
            if room >= ID and self._extend(self.router, self._fins, piece, _FIN_RECORD_MAX):
                if ahead:
                    records.add_fin_ahead(self._fins, ahead)
                    ahead = 0
                start += len(piece)
                continue
            piece = ids[start:start + _FIN_RECORD_MAX - records.FIN_IDS_AT]
            self._fins = records.fin(self.conn, piece, ahead)  # a bytearray: the next FINs may join it
            ahead = 0
            self._send(self.router, self._fins)
            start += len(piece)

    def return_ahead(self, older_than: int | None = None) -> None:
        """Send the frames held ahead (those held since before older_than, when given) back
        to the router unwritten."""
        frames = self.ahead.take(older_than)
        if frames:
            self._send(self.router, records.unsent(self.conn, frames))

    def _message_command(self, params: Params, cmd: str, min_params: int) -> bytes:
        """State and parameter checks shared by FIN, REQ and TOUCH; returns the ID."""
        if self.state not in FIN_STATES:
            raise FatalClientError(E.E_INVALID, f"cannot {cmd} in current state")
        if len(params) < min_params:
            raise FatalClientError(E.E_INVALID, f"{cmd} insufficient number of params")
        msg_id = params[1]
        if len(msg_id) != ID:
            raise FatalClientError(E.E_INVALID, "Invalid Message ID")
        return msg_id

    def cmd_req(self, params: Params, body_off: int, body_len: int) -> None:
        """REQ <id> <timeout>: back to the queue, after a delay (clamped, as nsqd)."""
        msg_id = self._message_command(params, "REQ", 3)
        raw = params[2]
        if raw and not raw.isdigit():  # an empty number is 0, as Go's ByteToBase10 reads it
            raise FatalClientError(E.E_INVALID, f"REQ could not parse timeout {go_s(raw)}")
        # nsqd clamps rather than refuses
        delay, top = int(raw or b"0"), int(self.host.opts.max_req_timeout * 1000)
        if delay > top:
            log.info("PROTOCOL(V2): [%s] REQ timeout %d out of range 0-%d. Setting to %d", self.remote,
                     delay, top, top, extra=self.log_fields())
            delay = top
        self._send(self.router, records.req(self.conn, delay, msg_id))
        if self.ahead and self.ahead.write(1, self.write):  # the REQ freed room for one
            self._send(self.router, records.fin(self.conn, b"", 1))

    def cmd_touch(self, params: Params, body_off: int, body_len: int) -> None:
        """TOUCH <id>: the message's timeout starts again."""
        msg_id = self._message_command(params, "TOUCH", 2)
        self._send(self.router, records.touch(self.conn, msg_id))
