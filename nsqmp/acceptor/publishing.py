"""The publishing commands of a V2 connection: PUB, DPUB, MPUB, and the run of PUBs.

A mixin of V2Connection (nsqmp.acceptor.tcp), not a class of its own: the parse loop ends a
run of PUBs (`_flush_pubs`) before any other command, and these methods are called from it
and from COMMANDS exactly as if they were written in the connection's class, so splitting
the file costs no call per command (the publish path is the hottest there is).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from nsqmp.acceptor.publisher import TopicFull
from nsqmp.acceptor.gotext import go_q, go_s
from nsqmp.acceptor.session import Params
from nsqmp.diskqueue.encoder import SPAN
from nsqmp.protocol import errors as E
from nsqmp.protocol.errors import FatalClientError
from nsqmp.protocol.frames import OK_FRAME
from nsqmp.protocol.names import is_valid_name
from nsqmp.protocol.parser import BODY_PENDING, mpub_spans

if TYPE_CHECKING:
    from nsqmp.diskqueue.pubrun import SegmentTail
    from nsqmp.acceptor.authorize import ConnAuth
    from nsqmp.acceptor.host import AcceptorSide

log = logging.getLogger("nsqmp.acceptor")
# a publish run with more than this many bytes in the buffer writes out the routers'
# waiting deliveries first, as an MPUB's handler does (mixed workload: "out")
_DELIVER_FIRST = 16384


class PubRun:
    """PUBs or DPUBs to one topic waiting to be published together (PublishCommands._queue_pub)."""
    __slots__ = ("topic", "cmd", "spans", "defers")

    def __init__(self, topic: bytes, cmd: str, defers: list[int] | None) -> None:
        self.topic = topic
        self.cmd = cmd  # the first command's: its error is the run's
        self.spans = bytearray()  # SPANs of the bodies in the read buffer
        self.defers = defers  # each DPUB's delay (ms), or None: none deferred


class PublishCommands:
    """PUB, DPUB and MPUB of V2Connection."""

    # the V2Connection state these methods use (declared for the type checker)
    host: AcceptorSide
    buf: bytearray
    auth: ConnAuth
    pub_counts: dict[bytes, int]
    _pubs: PubRun | None
    _eof: bool
    _publish_spans: Callable[[bytes, bytearray, bytes | bytearray, int | list[int]], None]
    _send: Callable[[int, bytes | bytearray], None]
    _send_now: Callable[[int, bytes], None]
    _run_tail: SegmentTail | None
    _run_topic: bytes
    _run_slot: int
    _published: Callable[[object], None]
    _body_ready: Callable[[Params, int, int], None]  # V2Connection's (NeedMore until it is here)
    _body_so_far: Callable[[], tuple[int, int]]
    write: Callable[[bytes], None]

    def cmd_pub(self, params: Params, body_off: int, body_len: int) -> None:
        """PUB <topic>: one message, answered OK once it is in the topic's segment."""
        if len(params) < 2:
            raise FatalClientError(E.E_INVALID, "PUB insufficient number of parameters")
        topic = params[1]
        if not is_valid_name(topic):
            raise FatalClientError(E.E_BAD_TOPIC, f"PUB topic name {go_q(topic)} is not valid")
        self._body_ready(params, body_off, body_len)
        self.auth.check(self, "PUB", topic, b"")
        self._queue_pub(topic, body_off, body_len, 0, "PUB")

    def cmd_mpub(self, params: Params, body_off: int, body_len: int) -> None:
        """MPUB <topic>: messages published all or nothing, one OK."""
        if len(params) < 2:
            raise FatalClientError(E.E_INVALID, "MPUB insufficient number of parameters")
        topic = params[1]
        if not is_valid_name(topic):
            raise FatalClientError(E.E_BAD_TOPIC, f"E_BAD_TOPIC MPUB topic name {go_q(topic)} is not valid")
        self.auth.check(self, "MPUB", topic, b"")  # before the body, as nsqd
        if body_off == BODY_PENDING and self._eof and body_len >= 0:
            # nsqd reads the messages from the stream: those complete before the end still count
            body_off, body_len = self._body_so_far()
        self._body_ready(params, body_off, body_len)
        # checked and split straight out of the read buffer (all or nothing): the encoder
        # reads each body where it is, no copy per message
        opts = self.host.opts
        spans, bad = mpub_spans(self.buf, body_off, body_len, opts.max_msg_size, opts.max_body_size)
        if spans is None:
            raise FatalClientError(*bad)
        self.host.deliver_waiting()
        self._publish(topic, spans, E.E_MPUB_FAILED, "MPUB")

    def cmd_dpub(self, params: Params, body_off: int, body_len: int) -> None:
        """DPUB <topic> <defer_time>: one message, delivered after its delay."""
        if len(params) < 3:
            raise FatalClientError(E.E_INVALID, "DPUB insufficient number of parameters")
        topic = params[1]
        if not is_valid_name(topic):
            raise FatalClientError(E.E_BAD_TOPIC, f"DPUB topic name {go_q(topic)} is not valid")
        raw = params[2]
        if raw and not raw.isdigit():  # an empty number is 0, as Go's ByteToBase10 reads it
            raise FatalClientError(E.E_INVALID, f"DPUB could not parse timeout {go_s(raw)}")
        defer_ms = int(raw or b"0")
        max_ms = int(self.host.opts.max_req_timeout * 1000)
        if defer_ms > max_ms:
            raise FatalClientError(E.E_INVALID, f"DPUB timeout {defer_ms} out of range 0-{max_ms}")
        self._body_ready(params, body_off, body_len)
        self.auth.check(self, "DPUB", topic, b"")
        self._queue_pub(topic, body_off, body_len, defer_ms, "DPUB")

    def _pub_run(self, buf: bytes | bytearray, pos: int) -> int:
        """The PUB/MPUBs at buf[pos:] (the read buffer, or a read not yet added to it) on
        the topic of this connection's last publish, while they would be answered OK: one
        C call from there to the segment (SegmentTail.run), their OKs in one write, then its
        PUBLISH_AT to the router. Returns where the first command not taken starts (pos
        if none was): the parse loop gives it to its handler, which gives nsqd's exact
        answer (an error, or the wait for more)."""
        if len(buf) - pos > _DELIVER_FIRST:  # a big MPUB: what consumers wait for goes first
            self.host.deliver_waiting()
        try:
            end, commands, messages, record = self._run_tail.run(buf, pos)  # type: ignore[union-attr]
        except OSError:  # the handler writes the first of them again and answers the error
            return pos
        if commands:
            # the OKs first: the publisher's next command waits for them, the router's
            # record does not (the messages are in the segment either way)
            self.write(OK_FRAME if commands == 1 else OK_FRAME * commands)
            self._send_now(self._run_slot, record)
            topic = self._run_topic
            self.pub_counts[topic] = self.pub_counts.get(topic, 0) + messages
            self._published(self)
        return end

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
            run = self._pubs = PubRun(topic, cmd, [] if defer_ms > 0 else None)
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
            self._publish_spans(topic, self.buf, spans, defer_ms)
        except TopicFull:
            raise FatalClientError(code, f"{cmd} failed topic full") from None
        except OSError as exc:
            log.error("%s to %s failed: %s", cmd, topic.decode(), exc)
            self.host.publish_failed(exc)
            raise FatalClientError(code, f"{cmd} failed {exc.strerror or exc}") from None
        self.write(OK_FRAME if oks == 1 else OK_FRAME * oks)
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + len(spans) // SPAN.size
        self.host.published(self)  # health, the producers' board, a full ring's hold
        if not defer_ms and not self.auth.service.enabled:
            # the next commands on this topic may go by _pub_run (no AUTH to check each time);
            # asked again after every publish here: a deleted topic has a new writer
            run = self.host.run_tail(topic)
            if run is None:
                self._run_tail = None
            else:
                self._run_tail, self._run_slot = run
                self._run_topic = topic
