"""The NSQ TCP protocol V2 on one connection: framing, state machine, one handler per command.

`data_received` appends to a buffer and runs the parse loop: one scan of the buffer by the
command parser (native, `nsqmp.protocol.parser`) yields every complete command, and each goes
to its handler from COMMANDS (keyed by the wire token) with its params and the offset and
size of its body in the buffer. Handlers raise ClientError (the connection stays) or
FatalClientError (error frame, then close), as nsqd does.
Consumer-side commands become records for the topic's router; deliveries come back as
ready-made frames that are written as they are.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import zlib
from collections.abc import Callable

import orjson

from nsqmp.acceptor.auth import AuthFailed, AuthState
from nsqmp.acceptor.identify import ClientSettings, IdentifyError, negotiate, response
from nsqmp.acceptor.publisher import TopicFull
from nsqmp.ipc import records
from nsqmp.protocol import errors as E
from nsqmp.diskqueue.encoder import SPAN
from nsqmp.protocol.errors import ClientError, FatalClientError
from nsqmp.protocol.frames import (
    CLOSE_WAIT_FRAME, HEARTBEAT_FRAME, MAGIC_V2, OK_FRAME, error, response as response_frame,
)
from nsqmp.protocol.names import is_valid_name
from nsqmp.protocol.parser import (
    BODY_INVALID, BODY_PENDING, SCAN_LINE_TOO_LONG, SCAN_MORE, mpub_spans,
)

log = logging.getLogger("nsqmp.acceptor")

STATE_INIT, STATE_SUBSCRIBED, STATE_CLOSING = 0, 3, 4
_FIN_STATES = (STATE_SUBSCRIBED, STATE_CLOSING)  # where FIN, REQ and TOUCH are allowed
_PUB_TOKENS = (b"PUB", b"DPUB")  # taken in runs (V2Connection._queue_pub)
# FINs a connection sends in one tick travel to the router as one FIN record of up to this
# many bytes (512 IDs): one ring record and one router dispatch for a consumer's window
_FIN_RECORD_MAX = records.CONN.size + 16 * 512
# A run of FINs in the middle of a scanned batch is left to Parser.fins() only when it is
# this long or ends the batch: leaving the batch throws away the commands scanned after the
# run (up to scan's 1,024), so a consumer sending TOUCH, FIN, TOUCH, FIN, ... had the rest
# of its buffer scanned again for every FIN (about 0.1 ms a command).
_FIN_RUN_BREAK = 128


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


Params = tuple[bytes, ...]  # a command line split on single spaces; [0] is the token


class _PubRun:
    """PUBs or DPUBs to one topic waiting to be published together (V2Connection._queue_pub)."""
    __slots__ = ("topic", "cmd", "spans", "defers")

    def __init__(self, topic: bytes, cmd: str, defers: list[int] | None) -> None:
        self.topic = topic
        self.cmd = cmd  # the first command's: its error is the run's
        self.spans = bytearray()  # SPANs of the bodies in the read buffer
        self.defers = defers  # each DPUB's delay (ms), or None: none deferred


class NeedMore(Exception):
    """The buffer does not yet hold the whole command."""


class Suspended(Exception):
    """The command waits for something (an auth server): parse it again once that is done."""


class V2Connection(asyncio.Protocol):
    def __init__(self, server) -> None:
        self.server = server
        self.opts = server.opts
        self.conn = server.new_conn_id()
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.magic_ok = False
        self.state = STATE_INIT
        self.settings = ClientSettings()
        self.topic: bytes = b""
        self.channel: bytes = b""
        self.router = -1
        self._fins = bytearray()  # the FIN record this tick's FINs are added to
        self._pubs: _PubRun | None = None  # PUB/DPUBs of this read not yet published
        self.rdy = 0
        self.remote = ""
        self.connect_ts = int(time.time())
        self.last_read = time.monotonic()
        self._heartbeat: asyncio.TimerHandle | None = None
        self._read_deadline: asyncio.TimerHandle | None = None
        self.closed = False
        self.paused = False
        # what parsing waits for, or "": SUB is answered once the router has the channel
        # (as nsqd creates it before its OK), the TLS handshake, an auth server's answer.
        # Until then nothing more is parsed, so responses stay in order.
        self.waiting_for = ""
        self.tls = False
        self.remote_ip = ""
        # AUTH: the secret and the auth server's last answer (nsqd's AuthSecret/AuthState)
        self.auth_secret = b""
        self.auth_state: AuthState | None = None
        self._auth_fresh = False  # an answer just fetched for the command being re-parsed
        # the (code, text) of the last scanned command when its body size broke a limit
        self._bad_body: tuple[str, str] | None = None
        # set by a handler that changed how the rest of the buffer reads (compression)
        self._rescan = False
        # the client shut its side: a command cut short gets nsqd's "failed to read" error
        self._eof = False
        self._pending_at = 0  # where the line of a command waiting for its body starts
        # stream compression negotiated in IDENTIFY (snappy framing or raw deflate)
        self._encode: Callable[[bytes], bytes] | None = None
        self._decode: Callable[[bytes], bytes] | None = None
        self.pub_counts: dict[bytes, int] = {}  # messages published per topic (/stats producers)

    # -- transport callbacks ---------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("", 0)
        self.remote = f"{peer[0]}:{peer[1]}"
        host = str(peer[0])
        self.remote_ip = host
        self.settings.client_id = host
        self.settings.hostname = host
        self.server.connections[self.conn] = self
        self._arm_heartbeat()

    def data_received(self, data: bytes) -> None:
        if self._decode is not None:
            try:
                data = self._decode(data)
            except Exception:  # a corrupt compressed stream cannot be resynchronised
                log.info("%s: undecodable compressed stream, closing", self.remote)
                self.close()
                return
        self.buf += data
        self.last_read = time.monotonic()
        if self.state == STATE_INIT:
            # a publisher waits for our answer, and sends again soon after it: be awake
            # then. A consumer's FINs and RDYs wait for nothing from us (its messages come
            # from the router): polling after them only took CPU from the routers
            # (router CPU +19 % in nsqmp bench timer)
            self.server.busy.touch()
        self._process()

    def eof_received(self) -> bool | None:
        """The client shut its side (nsqd's reads fail with EOF): a command whose body was cut
        short gets nsqd's error before the close; a partial command line just closes."""
        if not self.closed and self.magic_ok and not self.waiting_for:
            self._eof = True
            self._process()
        return None  # close our side too

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._cancel_heartbeat()
        self.server.connections.pop(self.conn, None)
        if self.pub_counts:
            self.server.producers.changed()
        if self.router >= 0:
            self.server.endpoint.send(self.router, records.CONN.pack(records.GONE, self.conn))

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False

    # -- output ----------------------------------------------------------------
    def write(self, data: bytes | memoryview) -> None:
        if not self.closed and self.transport is not None:
            if self._encode is not None:
                data = self._encode(bytes(data))
            self.transport.write(data)

    def send_error(self, err: ClientError) -> None:
        self.write(error(err.wire))
        if err.fatal:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    # -- heartbeats: one per interval; two intervals of silence close ----------------
    # nsqd sets a read deadline of two intervals before every read. Re-arming a timer per
    # read is too dear here, so each beat checks the silence, and when the deadline falls
    # before the next beat it arms a one-off check for that moment: the connection closes
    # two intervals after the last thing read, as in nsqd, not at the following beat.
    def _arm_heartbeat(self) -> None:
        interval = self.settings.heartbeat_interval_ms
        if interval <= 0 or self.closed:
            return
        self._heartbeat = self.server.loop.call_later(interval / 1000, self._beat)

    def _cancel_heartbeat(self) -> None:
        for handle in (self._heartbeat, self._read_deadline):
            if handle is not None:
                handle.cancel()
        self._heartbeat = self._read_deadline = None

    def _silent_too_long(self) -> bool:
        # nsqd's read deadline only runs while it reads: not while a command is being served
        if self.waiting_for:
            return False
        # 5 ms of slack: the loop's timers have millisecond resolution
        return time.monotonic() - self.last_read >= 2 * self.settings.heartbeat_interval_ms / 1000 - 0.005

    def _beat(self) -> None:
        self._heartbeat = None
        if self._silent_too_long():
            self._expire()
            return
        self.write(HEARTBEAT_FRAME)
        self._arm_heartbeat()
        interval = self.settings.heartbeat_interval_ms / 1000
        due = self.last_read + 2 * interval - time.monotonic()
        if due < interval and self._read_deadline is None:
            self._read_deadline = self.server.loop.call_later(due, self._check_read_deadline)

    def _check_read_deadline(self) -> None:
        self._read_deadline = None
        if not self.closed and self._silent_too_long():
            self._expire()

    def _expire(self) -> None:
        log.info("%s: no command for two heartbeat intervals, closing", self.remote)
        self._cancel_heartbeat()
        self.close()

    # -- parsing ---------------------------------------------------------------
    def _process(self) -> None:
        buf = self.buf
        if not self.magic_ok:
            if len(buf) < 4:
                return
            if bytes(buf[:4]) != MAGIC_V2:
                self.write(error(b"E_BAD_PROTOCOL"))
                self.close()
                return
            self.magic_ok = True
            del buf[:4]
        pos = 0
        scan = self.server.parser.scan
        fins = self.server.parser.fins
        commands_get = COMMANDS.get
        try:
            while not self.closed and not self.waiting_for:
                # only IDENTIFY (which ends the batch when it upgrades) changes self.tls
                tls_gate = bool(self.server.tls_required) and not self.tls  # true or tcp-https
                # a consumer's run of plain FIN lines: one C call, no tuple per command
                fin_run = self.state in _FIN_STATES and not tls_gate
                if fin_run and buf.startswith(b"FIN ", pos):
                    ids, end = fins(buf, pos)
                    if ids:
                        self._flush_pubs()
                        self._send_fins(ids)
                        pos = end
                        continue
                batch_start = pos
                commands, _end, status, bad_body = scan(buf, pos)
                stopped = again = False
                short_run_until = 0  # commands before it are in a FIN run too short for fins()
                for i, (params, body_off, body_len, next_pos) in enumerate(commands):
                    token = params[0]
                    if token == b"FIN" and fin_run and pos != batch_start and i >= short_run_until:
                        short_run_until = fin_run_worth_a_break(commands, i)
                        if not short_run_until:
                            again = True  # the run starting here goes by fins() above
                            break
                    if self._pubs is not None and token not in _PUB_TOKENS:
                        self._flush_pubs()
                    handler = commands_get(token)
                    if handler is None:
                        raise FatalClientError(E.E_INVALID, f"invalid command {_s(token)}")
                    if tls_gate and token != b"IDENTIFY":
                        raise FatalClientError(E.E_INVALID, f"cannot {_s(token)} in current state (TLS required)")
                    if body_off == BODY_INVALID:
                        self._bad_body = bad_body
                    elif body_off == BODY_PENDING:
                        self._pending_at = next_pos
                    try:
                        handler(self, params, body_off, body_len)
                    except (NeedMore, Suspended):
                        stopped = True  # pos stays on this command's line
                        break
                    except FatalClientError:
                        raise
                    except ClientError as err:
                        self._flush_pubs()
                        self.send_error(err)  # a non-fatal error consumed its command (none has a body)
                    pos = next_pos
                    if self.closed or self.waiting_for or self._rescan:
                        stopped = True
                        break
                    fin_run = self.state in _FIN_STATES and not tls_gate  # after SUB or CLS
                if again:
                    continue
                if stopped:
                    if self._rescan:  # the rest of the buffer was decompressed: scan it again
                        self._rescan = False
                        continue
                    break
                if status == SCAN_MORE:
                    continue
                if status == SCAN_LINE_TOO_LONG:
                    # nsqd's ReadSlice fails with a full bufio buffer: it closes and sends nothing
                    log.info("%s: command line longer than %d bytes, closing", self.remote,
                             self.server.parser.max_line)
                    self._flush_pubs()
                    self.close()
                break
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

    def _body(self, params: Params, body_off: int, body_len: int) -> bytes:
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

    # -- commands --------------------------------------------------------------
    def cmd_nop(self, params: Params, body_off: int, body_len: int) -> None:
        pass

    def cmd_identify(self, params: Params, body_off: int, body_len: int) -> None:
        if self.state != STATE_INIT:
            raise FatalClientError(E.E_INVALID, "cannot IDENTIFY in current state")
        body = self._body(params, body_off, body_len)
        buf, end = self.buf, body_off + body_len
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise FatalClientError(E.E_BAD_BODY, "IDENTIFY failed to decode JSON body") from None
        try:
            negotiate(data, self.opts, self.settings)
        except IdentifyError as exc:
            raise FatalClientError(E.E_BAD_BODY, f"IDENTIFY {exc}") from None
        if not self.settings.feature_negotiation:
            # nsqd answers OK at once: without feature negotiation nothing is upgraded
            self.settings.tls = self.settings.snappy = self.settings.deflate = False
        if self.settings.snappy and self.settings.deflate:
            raise FatalClientError(E.E_IDENTIFY_FAILED, "cannot enable both deflate and snappy compression")
        self._cancel_heartbeat()
        self._arm_heartbeat()
        if self.settings.feature_negotiation:
            self.write(response_frame(response(self.opts, self.settings)))
        else:
            self.write(OK_FRAME)
        if self.settings.tls:
            # nothing more is read in the clear: the client's next bytes are its ClientHello
            self.waiting_for = "TLS"
            assert self.transport is not None  # IDENTIFY arrived through it
            self.transport.pause_reading()
            self.server.loop.create_task(self._start_tls(bytes(buf[end:])))
            del buf[end:]
        elif self.settings.snappy or self.settings.deflate:
            self._upgrade(buf, end)
            self._rescan = True

    async def _start_tls(self, early: bytes) -> None:
        """TLS server handshake (5 s, as nsqd), OK over TLS, then any compression upgrade."""
        if early:
            log.info("%s: sent data before the TLS handshake, closing", self.remote)
            self.close()
            return
        head = await self._peek_record_header()
        if head is not None and not _looks_like_tls(head):
            # Go's crypto/tls gives up on the record header; nsqd sends its error in the clear
            log.info("%s: not a TLS handshake: %r", self.remote, head)
            self.send_error(FatalClientError(
                E.E_IDENTIFY_FAILED, "IDENTIFY failed tls: first record does not look like a TLS handshake"))
            return
        try:
            self.transport = await self.server.loop.start_tls(
                self.transport, self, self.server.tls_context, server_side=True, ssl_handshake_timeout=5.0)
        except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
            log.info("%s: TLS handshake failed: %s", self.remote, exc)
            if self.transport is not None:
                self.transport.close()
            self.closed = True
            return
        self.tls = True
        self.write(OK_FRAME)
        if self.settings.snappy or self.settings.deflate:
            self._upgrade(self.buf, len(self.buf))
        self.waiting_for = ""
        self._process()

    async def _peek_record_header(self) -> bytes | None:
        """The first 5 bytes the client sends for the handshake (a TLS record header), read
        with MSG_PEEK so that the TLS layer still gets them; None if they do not come."""
        raw = self.transport.get_extra_info("socket") if self.transport is not None else None
        if raw is None:
            return None
        peek = socket.socket(fileno=os.dup(raw.fileno()))
        try:
            for _ in range(500):  # nsqd's 5 s handshake deadline
                try:
                    head = peek.recv(5, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                except BlockingIOError:
                    head = None  # nothing yet
                except OSError:
                    return None
                if head is not None and (len(head) >= 5 or not head):
                    return head or None  # the header, or None at EOF
                if self.closed:
                    return None
                await asyncio.sleep(0.01)
            return None
        finally:
            peek.close()

    def _upgrade(self, buf: bytearray, end: int) -> None:
        """Switch the stream to snappy (framing format) or raw deflate, as nsqd does right
        after the IDENTIFY response, and confirm with an OK sent compressed."""
        if self.settings.snappy:
            import snappy

            out, inp = snappy.StreamCompressor(), snappy.StreamDecompressor()
            self._encode, self._decode = out.add_chunk, inp.decompress
        else:
            deflater = zlib.compressobj(self.settings.deflate_level, zlib.DEFLATED, -15)
            inflater = zlib.decompressobj(-15)
            self._encode = lambda d: deflater.compress(d) + deflater.flush(zlib.Z_SYNC_FLUSH)
            self._decode = inflater.decompress
        if len(buf) > end:  # bytes the client sent after IDENTIFY are already compressed
            rest = bytes(buf[end:])
            del buf[end:]
            buf += self._decode(rest)
        self.write(OK_FRAME)

    def cmd_pub(self, params: Params, body_off: int, body_len: int) -> None:
        if len(params) < 2:
            raise FatalClientError(E.E_INVALID, "PUB insufficient number of parameters")
        topic = params[1]
        if not is_valid_name(topic):
            raise FatalClientError(E.E_BAD_TOPIC, f"PUB topic name {_q(topic)} is not valid")
        self._body_ready(params, body_off, body_len)
        self._check_auth("PUB", topic, b"")
        self._queue_pub(topic, body_off, body_len, 0, "PUB")

    def cmd_mpub(self, params: Params, body_off: int, body_len: int) -> None:
        if len(params) < 2:
            raise FatalClientError(E.E_INVALID, "MPUB insufficient number of parameters")
        topic = params[1]
        if not is_valid_name(topic):
            raise FatalClientError(E.E_BAD_TOPIC, f"E_BAD_TOPIC MPUB topic name {_q(topic)} is not valid")
        self._check_auth("MPUB", topic, b"")  # before the body, as nsqd
        if body_off == BODY_PENDING and self._eof and body_len >= 0:
            # nsqd reads the messages from the stream: those complete before the end still count
            body_off, body_len = self._body_so_far()
        self._body_ready(params, body_off, body_len)
        # checked and split straight out of the read buffer (all or nothing): the encoder
        # reads each body where it is, no copy per message
        spans, bad = mpub_spans(self.buf, body_off, body_len, self.opts.max_msg_size, self.opts.max_body_size)
        if spans is None:
            raise FatalClientError(*bad)
        self.server.deliver_waiting()
        self._publish(topic, spans, E.E_MPUB_FAILED, "MPUB")

    def cmd_dpub(self, params: Params, body_off: int, body_len: int) -> None:
        if len(params) < 3:
            raise FatalClientError(E.E_INVALID, "DPUB insufficient number of parameters")
        topic = params[1]
        if not is_valid_name(topic):
            raise FatalClientError(E.E_BAD_TOPIC, f"DPUB topic name {_q(topic)} is not valid")
        raw = params[2]
        if raw and not raw.isdigit():  # an empty number is 0, as Go's ByteToBase10 reads it
            raise FatalClientError(E.E_INVALID, f"DPUB could not parse timeout {_s(raw)}")
        defer_ms = int(raw or b"0")
        max_ms = int(self.opts.max_req_timeout * 1000)
        if defer_ms > max_ms:
            raise FatalClientError(E.E_INVALID, f"DPUB timeout {defer_ms} out of range 0-{max_ms}")
        self._body_ready(params, body_off, body_len)
        self._check_auth("DPUB", topic, b"")
        self._queue_pub(topic, body_off, body_len, defer_ms, "DPUB")

    def _queue_pub(self, topic: bytes, body_off: int, body_len: int, defer_ms: int, cmd: str) -> None:
        """PUBs and DPUBs that arrived together go out together: a run of them to one topic
        (all deferred, or none) is one append, one record for the router and one write of
        their OKs, in order. Any other command, the end of the read, or an error ends the
        run first (_flush_pubs), so every response still comes in the commands' order."""
        run = self._pubs
        if run is not None and (run.topic != topic or (run.defers is not None) != (defer_ms > 0)):
            self._flush_pubs()
            run = None
        if run is None:
            run = self._pubs = _PubRun(topic, cmd, [] if defer_ms > 0 else None)
        run.spans += SPAN.pack(body_off, body_len)
        if run.defers is not None:
            run.defers.append(defer_ms)

    def _flush_pubs(self) -> None:
        """Publish the queued run of PUB/DPUB (if any) and answer each with OK. If it fails,
        the error is the first command's, as it would have been had each gone alone."""
        run = self._pubs
        if run is None:
            return
        self._pubs = None
        code = E.E_PUB_FAILED if run.cmd == "PUB" else E.E_DPUB_FAILED
        self._publish(run.topic, run.spans, code, run.cmd, run.defers or 0, len(run.spans) // SPAN.size)

    def _publish(self, topic: bytes, spans: bytes | bytearray, code: str, cmd: str,
                 defer_ms: int | list[int] = 0, oks: int = 1) -> None:
        """Publish the bodies at these spans of the read buffer (see Publisher.publish_spans)
        and answer `oks` OKs."""
        try:
            self.server.publisher.publish_spans(topic, self.buf, spans, defer_ms)
        except TopicFull:
            raise FatalClientError(code, f"{cmd} failed topic full") from None
        except OSError as exc:
            log.error("%s to %s failed: %s", cmd, topic.decode(), exc)
            self.server.health_error(exc)
            raise FatalClientError(code, f"{cmd} failed {exc.strerror or exc}") from None
        self.write(OK_FRAME if oks == 1 else OK_FRAME * oks)
        self.server.health_ok()
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + len(spans) // SPAN.size
        self.server.producers.changed()
        self.server.apply_backpressure(self)

    def client_stats(self, topic: str | None) -> dict:
        """nsqd's ClientV2Stats of this connection for /stats "producers" (pub_counts of
        `topic` only, when given). The consumer counters live on the router: a connection
        that also consumes shows its RDY here but 0 in flight, sent, finished, requeued."""
        s = self.settings
        counts = [{"topic": t.decode(), "count": n}
                  for t, n in self.pub_counts.items() if topic is None or t.decode() == topic]
        return {
            "client_id": s.client_id, "hostname": s.hostname, "version": "V2",
            "remote_address": self.remote, "state": self.state, "ready_count": self.rdy,
            "in_flight_count": 0, "message_count": 0, "finish_count": 0, "requeue_count": 0,
            "connect_ts": self.connect_ts, "sample_rate": s.sample_rate,
            "deflate": s.deflate, "snappy": s.snappy, "user_agent": s.user_agent,
            **self._auth_stats(),
            **({"pub_counts": counts} if counts else {}),
            "tls": self.tls, **self.tls_stats(),
            "topology_zone": "", "topology_region": "",
            "nsqmp_acceptor": self.server.index,
        }

    def cmd_sub(self, params: Params, body_off: int, body_len: int) -> None:
        if self.state != STATE_INIT:
            raise FatalClientError(E.E_INVALID, "cannot SUB in current state")
        if self.settings.heartbeat_interval_ms <= 0:
            raise FatalClientError(E.E_INVALID, "cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise FatalClientError(E.E_INVALID, "SUB insufficient number of parameters")
        topic, channel = params[1], params[2]
        if not is_valid_name(topic):
            raise FatalClientError(E.E_BAD_TOPIC, f"SUB topic name {_q(topic)} is not valid")
        if not is_valid_name(channel):
            raise FatalClientError(E.E_BAD_CHANNEL, f"SUB channel name {_q(channel)} is not valid")
        self._check_auth("SUB", topic, channel)
        self.topic, self.channel = topic, channel
        self.router = self.server.router_slot(topic)
        self.state = STATE_SUBSCRIBED
        self.waiting_for = "SUB"
        self.send_sub()

    def sub_confirmed(self) -> None:
        """The router created the channel: answer the SUB, then read on."""
        if self.waiting_for != "SUB":
            return  # a re-sent SUB (router restart) of a connection already answered
        self.waiting_for = ""
        self.write(OK_FRAME)
        self._process()

    def send_sub(self) -> None:
        """Tell the topic's router about this consumer (again, after a router restart)."""
        s = self.settings
        info = orjson.dumps({
            "client_id": s.client_id, "hostname": s.hostname, "user_agent": s.user_agent,
            "remote_address": self.remote, "connect_ts": self.connect_ts,
            "msg_timeout": s.msg_timeout_ms, "sample_rate": s.sample_rate,
            "acceptor": self.server.index,
            "snappy": s.snappy, "deflate": s.deflate, "tls": self.tls, **self.tls_stats(),
            **self._auth_stats(),
        })
        ep = self.server.endpoint
        # the first SUB holds the connection until SUB_OK; a re-sent one does not (RESUB)
        kind = records.SUB if self.waiting_for == "SUB" else records.RESUB
        ep.send(self.router, records.sub(self.conn, self.topic, self.channel, info, kind))
        if self.rdy:
            ep.send(self.router, records.CONN_U32.pack(records.RDY, self.conn, self.rdy))
        if self.state == STATE_CLOSING:
            ep.send(self.router, records.CONN.pack(records.CLS, self.conn))

    # -- AUTH ------------------------------------------------------------------------
    def cmd_auth(self, params: Params, body_off: int, body_len: int) -> None:
        if self.state != STATE_INIT:
            raise FatalClientError(E.E_INVALID, "cannot AUTH in current state")
        if len(params) != 1:
            raise FatalClientError(E.E_INVALID, "AUTH invalid number of parameters")
        body = self._body(params, body_off, body_len)  # the parser checked its size as nsqd
        if self.auth_state is not None and self.auth_state.authorizations:
            raise FatalClientError(E.E_INVALID, "AUTH already set")
        if not self.server.auth.enabled:
            raise FatalClientError(E.E_AUTH_DISABLED, "AUTH disabled")
        self.auth_secret = body
        self._query_auth(first=True)

    def _check_auth(self, cmd: str, topic: bytes, channel: bytes) -> None:
        """nsqd's CheckAuth: authorized first, re-asked once the answer's ttl has passed,
        then the topic (and channel, for SUB) must be allowed. A re-ask suspends the
        command; it is parsed again when the answer is in."""
        if not self.server.auth.enabled:
            return
        state = self.auth_state
        if state is None or not state.authorizations:
            raise FatalClientError(E.E_AUTH_FIRST, f"AUTH required before {cmd}")
        if self._auth_fresh:
            self._auth_fresh = False
        elif state.expires < self.server.loop.time():
            self._query_auth(first=False)
            raise Suspended
        if not state.allows(topic.decode(), channel.decode()):
            raise FatalClientError(E.E_UNAUTHORIZED, f"AUTH failed for {cmd} on {_q(topic)} {_q(channel)}")

    def _query_auth(self, first: bool) -> None:
        """Ask the auth servers off the parse path: nothing more is read meanwhile."""
        self.waiting_for = "AUTH"
        if self.transport is not None:
            self.transport.pause_reading()
        self.server.loop.create_task(self._auth(first))

    async def _auth(self, first: bool) -> None:
        try:
            state = await self.server.auth.query(
                self.remote_ip, self.tls, self._common_name(), self.auth_secret, self.server.loop.time())
        except Exception as exc:  # AuthFailed, or a bug: the client only learns that AUTH failed
            if not isinstance(exc, AuthFailed):
                log.exception("%s: AUTH query failed", self.remote)
            # errors contacting the auth server are not for untrusted clients' eyes
            log.warning("%s: AUTH failed %s", self.remote, exc)
            self.waiting_for = ""
            self.send_error(FatalClientError(E.E_AUTH_FAILED, "AUTH failed"))
            return
        if self.closed:
            return
        self.auth_state = state
        self.waiting_for = ""
        self.last_read = time.monotonic()  # the silence deadline starts again with reading
        if first:
            if not state.authorizations:
                self.send_error(FatalClientError(E.E_UNAUTHORIZED, "AUTH no authorizations found"))
                return
            self.write(response_frame(orjson.dumps({
                "identity": state.identity, "identity_url": state.identity_url,
                "permission_count": len(state.authorizations)})))
        else:
            self._auth_fresh = True
        self.server.resume_reading(self)
        self._process()

    def _common_name(self) -> str:
        """CN of the client's TLS certificate, if it sent one (Go keeps the last CN)."""
        if not self.tls or self.transport is None:
            return ""
        ssl_object = self.transport.get_extra_info("ssl_object")
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        cn = ""
        for rdn in (cert or {}).get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    cn = value
        return cn

    def tls_stats(self) -> dict:
        """nsqd's TLS fields of a client's /stats (its prettyConnectionState)."""
        ssl_object = self.transport.get_extra_info("ssl_object") if self.tls and self.transport else None
        if ssl_object is None:
            return {"tls_cipher_suite": "", "tls_version": "", "tls_negotiated_protocol": "",
                    "tls_negotiated_protocol_is_mutual": False}
        cipher = ssl_object.cipher()
        return {
            "tls_cipher_suite": go_cipher_suite(cipher[0] if cipher else "", self.server.tls_context),
            "tls_version": go_tls_version(ssl_object.version() or ""),
            "tls_negotiated_protocol": ssl_object.selected_alpn_protocol() or "",
            "tls_negotiated_protocol_is_mutual": True,  # Go: deprecated, always true
        }

    def _auth_stats(self) -> dict:
        """authed / auth_identity / auth_identity_url for /stats, omitted when empty (as nsqd)."""
        state = self.auth_state
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

    def cmd_rdy(self, params: Params, body_off: int, body_len: int) -> None:
        if self.state == STATE_CLOSING:
            return
        if self.state != STATE_SUBSCRIBED:
            raise FatalClientError(E.E_INVALID, "cannot RDY in current state")
        count = 1
        if len(params) > 1:
            raw = params[1]
            if raw and not raw.isdigit():
                raise FatalClientError(E.E_INVALID, f"RDY could not parse count {_s(raw)}")
            count = int(raw) if raw else 0  # nsqd's ByteToBase10 reads "" as 0
        if count > self.opts.max_rdy_count:
            raise FatalClientError(E.E_INVALID, f"RDY count {count} out of range 0-{self.opts.max_rdy_count}")
        self.rdy = count
        self.server.endpoint.send(self.router, records.CONN_U32.pack(records.RDY, self.conn, count))

    def cmd_fin(self, params: Params, body_off: int, body_len: int) -> None:
        self._send_fins(self._message_command(params, "FIN", 2))

    def _send_fins(self, ids: bytes) -> None:
        """Queue FINs (16-byte IDs end to end) for the router. While the tick's FIN record
        is still the last record queued for it (nothing of this or any other connection
        came after), the IDs join that record; the rest go in new ones."""
        ep = self.server.endpoint
        start, total = 0, len(ids)
        while start < total:
            room = _FIN_RECORD_MAX - len(self._fins)
            piece = ids[start:start + room]
            if room >= 16 and ep.extend_last(self.router, self._fins, piece, _FIN_RECORD_MAX):
                start += len(piece)
                continue
            piece = ids[start:start + _FIN_RECORD_MAX - records.CONN.size]
            self._fins = bytearray(records.CONN.pack(records.FIN, self.conn))
            self._fins += piece
            ep.send(self.router, self._fins)
            start += len(piece)

    def _message_command(self, params, cmd: str, min_params: int) -> bytes:
        """State and parameter checks shared by FIN, REQ and TOUCH; returns the ID."""
        if self.state not in _FIN_STATES:
            raise FatalClientError(E.E_INVALID, f"cannot {cmd} in current state")
        if len(params) < min_params:
            raise FatalClientError(E.E_INVALID, f"{cmd} insufficient number of params")
        msg_id = params[1]
        if len(msg_id) != 16:
            raise FatalClientError(E.E_INVALID, "Invalid Message ID")
        return msg_id

    def cmd_req(self, params: Params, body_off: int, body_len: int) -> None:
        msg_id = self._message_command(params, "REQ", 3)
        raw = params[2]
        if raw and not raw.isdigit():  # an empty number is 0, as Go's ByteToBase10 reads it
            raise FatalClientError(E.E_INVALID, f"REQ could not parse timeout {_s(raw)}")
        # nsqd clamps rather than refuses
        delay = min(int(raw or b"0"), int(self.opts.max_req_timeout * 1000))
        self.server.endpoint.send(self.router, records.REQ_HEAD.pack(records.REQ, self.conn, delay, msg_id))

    def cmd_touch(self, params: Params, body_off: int, body_len: int) -> None:
        msg_id = self._message_command(params, "TOUCH", 2)
        self.server.endpoint.send(self.router, records.CONN_ID.pack(records.TOUCH, self.conn, msg_id))

    def cmd_cls(self, params: Params, body_off: int, body_len: int) -> None:
        if self.state != STATE_SUBSCRIBED:
            raise FatalClientError(E.E_INVALID, "cannot CLS in current state")
        self.state = STATE_CLOSING
        self.server.endpoint.send(self.router, records.CONN.pack(records.CLS, self.conn))
        self.write(CLOSE_WAIT_FRAME)


# the errors nsqd gives when the stream ends inside a body: (code, size cut, body cut)
_CUT_SHORT = {
    b"IDENTIFY": (E.E_BAD_BODY, "IDENTIFY failed to read body size", "IDENTIFY failed to read body"),
    b"AUTH": (E.E_BAD_BODY, "AUTH failed to read body size", "AUTH failed to read body"),
    b"PUB": (E.E_BAD_MESSAGE, "PUB failed to read message body size", "PUB failed to read message body"),
    b"DPUB": (E.E_BAD_MESSAGE, "DPUB failed to read message body size", "DPUB failed to read message body"),
    b"MPUB": (E.E_BAD_BODY, "MPUB failed to read body size", "MPUB failed to read message count"),
}


# the suites nsqd names (prettyConnectionState.GetCipherSuite), by their OpenSSL names
_GO_SUITES = {
    "RC4-SHA": "TLS_RSA_WITH_RC4_128_SHA",
    "DES-CBC3-SHA": "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "AES128-SHA": "TLS_RSA_WITH_AES_128_CBC_SHA",
    "AES256-SHA": "TLS_RSA_WITH_AES_256_CBC_SHA",
    "ECDHE-ECDSA-RC4-SHA": "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "ECDHE-ECDSA-AES128-SHA": "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "ECDHE-ECDSA-AES256-SHA": "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "ECDHE-RSA-RC4-SHA": "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "ECDHE-RSA-DES-CBC3-SHA": "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "ECDHE-RSA-AES128-SHA": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "ECDHE-RSA-AES256-SHA": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
}
_GO_VERSIONS = {"SSLv3": "SSL30", "TLSv1": "TLS1.0", "TLSv1.1": "TLS1.1", "TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}


def go_cipher_suite(name: str, ctx) -> str:
    """nsqd's name for a suite; any other is "Unknown <IANA number>", as nsqd prints it."""
    if name in _GO_SUITES:
        return _GO_SUITES[name]
    for c in ctx.get_ciphers() if ctx is not None else ():
        if c["name"] == name:
            return f"Unknown {c['id'] & 0xFFFF}"
    return f"Unknown {name}"


def go_tls_version(version: str) -> str:
    return _GO_VERSIONS.get(version, f"Unknown {version}")


def _looks_like_tls(head: bytes) -> bool:
    """Go's crypto/tls check of a client's first record header: an alert or a handshake of a
    version below 16.0 (an SSLv2 hello, 0x80, gets its own error there and here a failed
    handshake)."""
    return head[0] == 0x80 or (head[0] in (0x15, 0x16) and (head[1] << 8 | head[2]) < 0x1000)


def _s(raw: bytes) -> str:
    """Bytes from the wire as Go's %s prints them: as they are (FatalClientError.wire gives them back)."""
    return raw.decode("utf-8", "surrogateescape")


def _q(name: bytes) -> str:
    """Go's %q (strconv.Quote) of a name from the wire."""
    out = ['"']
    for ch in name.decode("utf-8", "surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


COMMANDS: dict[bytes, Callable[..., None]] = {
    b"IDENTIFY": V2Connection.cmd_identify,
    b"AUTH": V2Connection.cmd_auth,
    b"PUB": V2Connection.cmd_pub,
    b"MPUB": V2Connection.cmd_mpub,
    b"SUB": V2Connection.cmd_sub,
    b"RDY": V2Connection.cmd_rdy,
    b"DPUB": V2Connection.cmd_dpub,
    b"FIN": V2Connection.cmd_fin,
    b"REQ": V2Connection.cmd_req,
    b"TOUCH": V2Connection.cmd_touch,
    b"CLS": V2Connection.cmd_cls,
    b"NOP": V2Connection.cmd_nop,
}
