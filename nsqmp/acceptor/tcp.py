"""The NSQ TCP protocol V2 on one connection: framing and dispatch, and the data path.

`data_received` feeds the buffer and drains it: one scan of the buffer by the command
parser (native, `nsqmp.protocol.parser`) yields every complete command, and each goes to
its handler from COMMANDS (keyed by the wire token, one handler per command, named after
it) with its params and the offset and size of its body in the buffer. Handlers raise
ClientError (the connection stays) or FatalClientError (error frame, then close), as nsqd
does. Consumer-side commands become records for the topic's router; deliveries come back
as ready-made frames that are written as they are.

The data-path handlers (PUB, DPUB, MPUB in publishing.py; RDY, FIN, REQ, TOUCH in
consuming.py) are methods of this class written in mixins: the loop and they share the run
of PUBs and the tick's FIN record, and a mixin's method costs what one written here does,
so the hot path pays no call for the split. The rest sits in small neighbours, each behind
a narrow interface:

- session.py: the states and the control commands (IDENTIFY, SUB, CLS, NOP);
- authorize.py: AUTH and the check before PUB/SUB (ConnAuth);
- upgrade.py: TLS (start_tls), snappy and deflate;
- heartbeat.py: heartbeats and the read deadline (Heartbeat);
- flow.py: every reason reading is paused (FlowControl);
- clientstats.py: the connection as /stats shows it;
- host.py: what the connection may ask of its acceptor (AcceptorSide).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from nsqmp.acceptor import session
from nsqmp.acceptor.ahead import Ahead
from nsqmp.acceptor.authorize import ConnAuth, Suspended, cmd_auth
from nsqmp.acceptor.flow import FlowControl
from nsqmp.acceptor.gotext import go_s
from nsqmp.acceptor.heartbeat import Heartbeat
from nsqmp.acceptor.host import AcceptorSide
from nsqmp.acceptor.identify import ClientSettings
from nsqmp.acceptor.consuming import ConsumeCommands
from nsqmp.acceptor.publishing import _DELIVER_FIRST, PublishCommands, PubRun
from nsqmp.acceptor.readpath import ReadPath
from nsqmp.acceptor.session import FIN_STATES, STATE_CLOSING, STATE_INIT, STATE_SUBSCRIBED, Params
from nsqmp.diskqueue.pubrun import SegmentTail
from nsqmp.ipc import records
from nsqmp.protocol import errors as E
from nsqmp.protocol.errors import ClientError, FatalClientError
from nsqmp.protocol.frames import MAGIC_V2, OK_FRAME, error
from nsqmp.protocol.parser import BODY_INVALID, BODY_PENDING, SCAN_LINE_TOO_LONG, SCAN_MORE

__all__ = ["V2Connection", "COMMANDS", "NeedMore", "Suspended", "fin_run_worth_a_break",
           "STATE_INIT", "STATE_SUBSCRIBED", "STATE_CLOSING"]

log = logging.getLogger("nsqmp.acceptor")

_PUB_TOKENS = (b"PUB", b"DPUB")  # taken in runs (V2Connection._queue_pub)
_RUN_HEADS = (b"PUB ", b"MPUB ")  # what a publish run may start with (V2Connection._pub_run)
# A run of FINs in the middle of a scanned batch is left to Parser.fins() only when it is
# this long or ends the batch: leaving the batch throws away the commands scanned after the
# run (up to scan's 1,024), so a consumer sending TOUCH, FIN, TOUCH, FIN, ... had the rest
# of its buffer scanned again for every FIN (about 0.1 ms a command).
_FIN_RUN_BREAK = 128
# what became of a scanned batch (V2Connection.process)
_DONE, _AGAIN, _STOP = 0, 1, 2


def fin_run_worth_a_break(commands: list, i: int) -> int:
    """For the FIN at commands[i] (scan's output): 0 if the run of FINs from it is worth
    leaving the batch for Parser.fins() (it is _FIN_RUN_BREAK long, or reaches the end of
    the batch); otherwise the index of the first command after the run, before which no
    FIN need be asked about again."""
    end = min(len(commands), i + _FIN_RUN_BREAK)
    for j in range(i + 1, end):
        if commands[j][0][0] != b"FIN":
            return j
    return 0


class NeedMore(Exception):
    """The buffer does not yet hold the whole command."""


# the errors nsqd gives when the stream ends inside a body: (code, size cut, body cut)
_CUT_SHORT = {
    b"IDENTIFY": (E.E_BAD_BODY, "IDENTIFY failed to read body size", "IDENTIFY failed to read body"),
    b"AUTH": (E.E_BAD_BODY, "AUTH failed to read body size", "AUTH failed to read body"),
    b"PUB": (E.E_BAD_MESSAGE, "PUB failed to read message body size", "PUB failed to read message body"),
    b"DPUB": (E.E_BAD_MESSAGE, "DPUB failed to read message body size", "DPUB failed to read message body"),
    b"MPUB": (E.E_BAD_BODY, "MPUB failed to read body size", "MPUB failed to read message count"),
}


class V2Connection(ReadPath, PublishCommands, ConsumeCommands, asyncio.Protocol):
    """One client on the TCP port: its buffer, its state, its parse loop."""

    def __init__(self, host: AcceptorSide) -> None:
        self.host = host
        self.conn = host.new_conn_id()
        self.transport: asyncio.Transport | None = None
        self.flow = FlowControl()
        self.heartbeat = Heartbeat(self, host.loop)
        self.auth = ConnAuth(host.auth)
        self.buf = bytearray()
        self.magic_ok = False
        self.state = STATE_INIT
        self.settings = ClientSettings()
        self.topic: bytes = b""
        self.channel: bytes = b""
        self.router = -1
        self.rdy = 0
        self.remote = ""
        self.remote_ip = ""
        self.connect_ts = int(time.time())
        self.last_read = time.monotonic()
        self.closed = False
        self.write_paused = False  # the transport is over its high-water mark (flow.py)
        self.tls = False
        # what parsing waits for, or "": SUB is answered once the router has the channel
        # (as nsqd creates it before its OK), the TLS handshake, an auth server's answer.
        # Until then nothing more is parsed, so responses stay in order.
        self.waiting_for = ""
        # stream compression negotiated in IDENTIFY (nsqmp.acceptor.upgrade)
        self.encode: Callable[[bytes], bytes] | None = None
        self.decode: Callable[[bytes], bytes] | None = None
        self.rescan = False  # set by a handler that changed how the rest of the buffer reads
        self.pub_counts: dict[bytes, int] = {}  # messages published per topic (/stats producers)
        self._fins = bytearray()  # the FIN record this tick's FINs are added to
        self.ahead = Ahead()  # frames its router sent ahead of its credit (nsqmp.acceptor.ahead)
        self._pubs: PubRun | None = None  # PUB/DPUBs of this read not yet published
        # the (code, text) of the last scanned command when its body size broke a limit
        self._bad_body: tuple[str, str] | None = None
        # the client shut its side: a command cut short gets nsqd's "failed to read" error
        self._eof = False
        self._pending_at = 0  # where the line of a command waiting for its body starts
        # the acceptor's calls on the data path, looked up once (see nsqmp.acceptor.host)
        self._send = host.send_record
        self._send_now = host.send_record_now  # a run's PUBLISH_AT (_pub_run)
        self._extend = host.extend_record
        self._publish_spans = host.publish_spans
        # a run of PUB/MPUB on the last publish's topic goes to its segment tail in one C
        # call (SegmentTail.run), once a publish by a handler found one; its PUBLISH_AT to
        # the topic's router slot
        self._run_tail: SegmentTail | None = None
        self._run_topic = b""
        self._run_slot = 0
        self._busy_touch = host.busy_touch
        self._published = host.published
        self._scan, self._fins_of = host.parser.scan, host.parser.fins
        self._tls_required = bool(host.tls_required)  # True or "tcp-https": TLS before all but IDENTIFY

    # -- transport callbacks ---------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        """Accepted: records for this connection reach it from now on; heartbeats start."""
        self.transport = transport
        self.flow.transport = transport
        peer = transport.get_extra_info("peername") or ("", 0)
        self.remote = f"{peer[0]}:{peer[1]}"
        host = str(peer[0])
        self.remote_ip = host
        self.settings.client_id = host
        self.settings.hostname = host
        self.host.attach(self)
        self.heartbeat.arm()
        log.info("TCP: new client(%s)", self.remote, extra={"remote": self.remote})

    # data_received: ReadPath's (native/readpath.c, or its twin nsqmp/acceptor/pyreadpath.py)

    def _decode_read(self, data: bytes) -> bytes | None:
        """A read of a compressed stream, decompressed; None once an undecodable one closed
        the connection (a corrupt compressed stream cannot be resynchronised)."""
        try:
            return self.decode(data)  # type: ignore[misc]
        except Exception:
            log.info("%s: undecodable compressed stream, closing", self.remote)
            self.close()
            return None

    def eof_received(self) -> bool | None:
        """The client shut its side (nsqd's reads fail with EOF): a command whose body was cut
        short gets nsqd's error before the close; a partial command line just closes."""
        if not self.closed and self.magic_ok and not self.waiting_for:
            self._eof = True
            self.process()
        return None  # close our side too

    def connection_lost(self, exc) -> None:
        """Gone: the acceptor forgets it, its router drops the consumer."""
        self.closed = True
        self.heartbeat.cancel()
        self.host.detach(self)
        if self.magic_ok:
            log.info("PROTOCOL(V2): [%s] exiting ioloop", self.remote, extra=self.log_fields())
        if self.pub_counts:
            self.host.producer_left()
        if self.router >= 0:
            self.return_ahead()  # before the GONE: their attempt is not counted
            self._send(self.router, records.gone(self.conn))

    def pause_writing(self) -> None:
        """The client does not read what it is sent; it is still read (nsqmp.acceptor.flow
        says why): only the state is kept (the tests read it)."""
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False

    # -- output ----------------------------------------------------------------
    def write(self, data: bytes | memoryview) -> None:
        """Send a frame (or frames), compressed if the client asked for it."""
        if not self.closed and self.transport is not None:
            if self.encode is not None:
                data = self.encode(bytes(data))
            self.transport.write(data)

    def send_error(self, err: ClientError) -> None:
        """An error frame; a fatal error closes the connection after it."""
        # nsqd logs every error it sends a client (its IOLoop), at ERROR
        log.error("[%s] - %s", self.remote, err.wire.decode(errors="replace"),
                  extra={**self.log_fields(), "code": err.code, "fatal": err.fatal})
        self.write(error(err.wire))
        if err.fatal:
            self.close()

    def log_fields(self) -> dict[str, str]:
        """The fields a log line about this client carries (--log-format json): its
        address and, after IDENTIFY, its client id and user agent."""
        s = self.settings
        return {"remote": self.remote, "client_id": s.client_id, "user_agent": s.user_agent}

    def close(self) -> None:
        """Close after what is written so far (connection_lost follows)."""
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    # -- the acceptor's calls (records from the router) --------------------------
    def sub_confirmed(self) -> None:
        """The router created the channel: answer the SUB, then read on."""
        session.sub_confirmed(self)

    def send_sub(self) -> None:
        """Tell the topic's router about this consumer (again, after a router restart)."""
        session.send_sub(self)

    # -- parsing ---------------------------------------------------------------
    def process(self) -> None:
        """Handle every complete command in the buffer, until one waits or the buffer ends.

        One function on purpose (speed): a publisher sending one PUB per write runs this
        once per command, and the batch loop in a function of its own cost a Python call
        per read; the steps are marked instead."""
        buf = self.buf
        if not self.magic_ok and not self._magic():
            return
        pos = 0
        scan, fins = self._scan, self._fins_of
        commands_get = COMMANDS.get
        try:
            while not self.closed and not self.waiting_for:
                # only IDENTIFY (which ends the batch when it upgrades) changes self.tls
                tls_gate = self._tls_required and not self.tls  # true or tcp-https
                # 0. a publisher's run of PUB/MPUB on its last topic: one C call to the segment
                if self._run_tail is not None and self._pubs is None and buf.startswith(_RUN_HEADS, pos):
                    end = self._pub_run(buf, pos)
                    if end != pos:
                        pos = end
                        if pos == len(buf) or self.closed:
                            break
                        continue
                # 1. a consumer's run of plain FIN lines: one C call, no tuple per command
                fin_run = self.state in FIN_STATES and not tls_gate
                if fin_run and buf.startswith(b"FIN ", pos):
                    ids, end = fins(buf, pos)
                    if ids:
                        self._flush_pubs()
                        self._send_fins(ids)
                        pos = end
                        continue
                # 2. one scan: every complete command from pos, each to its handler
                batch_start = pos
                commands, _end, status, bad_body = scan(buf, pos)
                outcome = _DONE
                short_run_until = 0  # commands before it are in a FIN run too short for fins()
                for i, (params, body_off, body_len, next_pos) in enumerate(commands):
                    token = params[0]
                    if token == b"FIN" and fin_run and pos != batch_start and i >= short_run_until:
                        short_run_until = fin_run_worth_a_break(commands, i)
                        if not short_run_until:
                            outcome = _AGAIN  # the run starting here goes by fins() above
                            break
                    if self._pubs is not None and token not in _PUB_TOKENS:
                        self._flush_pubs()
                    handler = commands_get(token)
                    if handler is None:
                        raise FatalClientError(E.E_INVALID, f"invalid command {go_s(token)}")
                    if tls_gate and token != b"IDENTIFY":
                        raise FatalClientError(E.E_INVALID, f"cannot {go_s(token)} in current state (TLS required)")
                    if body_off == BODY_INVALID:
                        self._bad_body = bad_body
                    elif body_off == BODY_PENDING:
                        self._pending_at = next_pos
                    try:
                        handler(self, params, body_off, body_len)
                    except (NeedMore, Suspended):
                        outcome = _STOP  # pos stays on this command's line
                        break
                    except FatalClientError:
                        raise
                    except ClientError as err:
                        self._flush_pubs()
                        self.send_error(err)  # a non-fatal error consumed its command (none has a body)
                    pos = next_pos
                    if self.closed or self.waiting_for or self.rescan:
                        outcome = _STOP
                        break
                    fin_run = self.state in FIN_STATES and not tls_gate  # after SUB or CLS
                # 3. what next: scan again, wait, or read more
                if outcome == _STOP and self.rescan:  # the rest was decompressed: scan it again
                    self.rescan = False
                    continue
                if outcome == _AGAIN:
                    continue
                if outcome == _STOP:
                    break
                if status == SCAN_MORE:
                    continue
                if status == SCAN_LINE_TOO_LONG:
                    # nsqd's ReadSlice fails with a full bufio buffer: it closes and sends nothing
                    log.info("%s: command line longer than %d bytes, closing", self.remote,
                             self.host.parser.max_line)
                    self._flush_pubs()
                    self.close()
                break
            if self._pubs is not None:
                self._flush_pubs()  # while the spans still point into the buffer
        except FatalClientError as err:
            try:
                self._flush_pubs()  # the commands before the failing one are answered first
            except FatalClientError as first:
                err = first
            self.send_error(err)
            return
        if pos:
            del buf[:pos]

    def _magic(self) -> bool:
        """The 4-byte protocol magic: True once it has come and was V2's."""
        buf = self.buf
        if len(buf) < 4:
            return False
        magic = bytes(buf[:4]).decode("latin-1")
        log.info("CLIENT(%s): desired protocol magic '%s'", self.remote, magic, extra={"remote": self.remote})
        if bytes(buf[:4]) != MAGIC_V2:
            self.write(error(b"E_BAD_PROTOCOL"))
            self.close()
            log.error("client(%s) bad protocol magic '%s'", self.remote, magic, extra={"remote": self.remote})
            return False
        self.magic_ok = True
        del buf[:4]
        return True

    def body(self, params: Params, body_off: int, body_len: int) -> bytes:
        """The body of the command being handled; NeedMore until it is all here."""
        self._body_ready(params, body_off, body_len)
        with memoryview(self.buf) as view:  # one copy, and the buffer is free to resize after
            return bytes(view[body_off:body_off + body_len])

    def _body_ready(self, params: Params, body_off: int, body_len: int) -> None:
        """Called once the command's own checks passed, as nsqd reads the body only then."""
        if body_off >= 0:
            return
        if body_off == BODY_INVALID:
            assert self._bad_body is not None
            raise FatalClientError(*self._bad_body)
        if not self._eof:
            raise NeedMore
        code, size_text, body_text = _CUT_SHORT[params[0]]
        raise FatalClientError(code, size_text if body_len < 0 else body_text)

    def _body_so_far(self) -> tuple[int, int]:
        """Offset and size of what arrived of the pending command's body."""
        start = self.buf.index(b"\n", self._pending_at) + 5
        return start, len(self.buf) - start


ReadPath.configure(STATE_INIT, FIN_STATES, OK_FRAME, _DELIVER_FIRST)

# one handler per command, keyed by its wire token; each is called (conn, params, body_off, body_len)
COMMANDS: dict[bytes, Callable[..., None]] = {
    b"IDENTIFY": session.cmd_identify,
    b"AUTH": cmd_auth,
    b"PUB": V2Connection.cmd_pub,
    b"MPUB": V2Connection.cmd_mpub,
    b"SUB": session.cmd_sub,
    b"RDY": V2Connection.cmd_rdy,
    b"DPUB": V2Connection.cmd_dpub,
    b"FIN": V2Connection.cmd_fin,
    b"REQ": V2Connection.cmd_req,
    b"TOUCH": V2Connection.cmd_touch,
    b"CLS": session.cmd_cls,
    b"NOP": session.cmd_nop,
}
