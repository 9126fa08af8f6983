"""ReadPath's pure-Python twin (the reference): what the event loop calls with every read
of a V2 connection. The native one is ``nsqmp._native.ReadPath`` (native/readpath.c);
:mod:`nsqmp.acceptor.readpath` picks one. Both make the same calls, in the same order,
with the same arguments, and the tests drive both.

Two reads are taken from the read itself, before anything is copied into the
connection's buffer: a publisher's read that starts with PUB/MPUBs on the topic of its
last publish (one segment-tail run, ``_pub_run``), and a consumer's read that starts with
plain FIN lines (one call of the parser's ``fins``, then ``_send_fins``). Whatever else
the read holds (all of it when neither applies) joins ``buf`` and the parse loop,
``process()``, which handles it exactly as it would have without them.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsqmp.acceptor.publishing import PubRun
    from nsqmp.diskqueue.pubrun import SegmentTail

_RUN_HEADS = (b"PUB ", b"MPUB ")  # what a publish run may start with


class ReadPath:
    """data_received of V2Connection (nsqmp.acceptor.tcp), given the module's constants
    once by configure()."""

    # the connection's state the read path reads (V2Connection sets it)
    buf: bytearray
    decode: Callable[[bytes], bytes] | None
    waiting_for: str
    _pubs: PubRun | None
    _run_tail: SegmentTail | None
    state: int
    closed: bool
    magic_ok: bool
    tls: bool
    _tls_required: bool
    last_read: float
    _busy_touch: Callable[[], None]
    _fins_of: Callable[[bytes | bytearray, int], tuple[bytes, int]]
    # V2Connection's methods it calls (declared only: a method here would come before the
    # mixins' in V2Connection's MRO)
    _decode_read: Callable[[bytes], bytes | None]
    _pub_run: Callable[[bytes | bytearray, int], int]
    _send_fins: Callable[[bytes], None]
    process: Callable[[], None]

    _state_init = -1
    _fin_states: tuple[int, int] = (-1, -1)

    @classmethod
    def configure(cls, state_init: int, fin_states: tuple[int, int], ok_frame: bytes,
                  deliver_first: int) -> None:
        """The connection module's constants (ok_frame and deliver_first are _pub_run's)."""
        cls._state_init = state_init
        cls._fin_states = fin_states

    def data_received(self, data: bytes) -> None:
        """A read: a publisher's run or a consumer's FINs at its start are taken from the
        read itself; the rest joins buf and the parse loop."""
        if self.decode is not None:
            plain = self._decode_read(data)
            if plain is None:  # undecodable: the connection is closed
                return
            data = plain
        self.last_read = time.monotonic()
        end = 0
        quiet = not self.buf and self._pubs is None and not self.waiting_for and not self.closed
        if self.state == self._state_init:
            # a publisher waits for our answer, and sends again soon after it: be awake
            # then (noted as the read came: the poll's window is judged by when work
            # arrives). A consumer's FINs and RDYs wait for nothing from us (its messages
            # come from the router): polling after them only took CPU from the routers
            self._busy_touch()
            if quiet and self._run_tail is not None and data.startswith(_RUN_HEADS):
                end = self._pub_run(data, 0)
        elif (self.state in self._fin_states and quiet and self.magic_ok
              and not (self._tls_required and not self.tls) and data.startswith(b"FIN ")):
            ids, stop = self._fins_of(data, 0)
            if ids:
                self._send_fins(ids)
                end = stop
        if end and (end >= len(data) or self.closed):
            return
        self.buf += data[end:] if end else data
        self.process()
