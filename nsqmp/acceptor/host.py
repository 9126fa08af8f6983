"""What a V2 connection may ask of its acceptor: the one door between the two.

`nsqmp.acceptor.role.Acceptor` implements it for the running broker; the unit tests
(tests/acceptor/test_v2_connection.py) implement it with a recorder. A connection holds
its acceptor only through this interface: nothing else of the acceptor is its business.

The record and publish calls are attributes holding bound methods (set once in the
acceptor's setup), not methods of the acceptor: the connection caches them, so a RDY,
a FIN or a run of PUBs pays one Python call for its record, as before the split.
"""
from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nsqmp.acceptor.tcp import V2Connection
    from nsqmp.diskqueue.pubrun import SegmentTail


class AuthService(Protocol):
    """The auth servers (nsqmp.acceptor.auth.AuthClient), as a connection sees them."""

    @property
    def enabled(self) -> bool: ...

    async def query(self, remote_ip: str, tls: bool, common_name: str, secret: bytes,
                    now: float) -> Any: ...


class CommandParser(Protocol):
    """The native command parser (nsqmp.protocol.parser.Parser)."""
    max_line: int

    def scan(self, buf: bytearray, pos: int) -> tuple[list, int, int, Any]: ...

    def fins(self, buf: bytearray, pos: int) -> tuple[bytes, int]: ...


class AcceptorSide(Protocol):
    """Everything a V2Connection asks of its acceptor."""

    opts: Any  # the broker's options (max_rdy_count, max_req_timeout, max_msg_size, ...)
    loop: asyncio.AbstractEventLoop  # timers (heartbeats) and tasks (AUTH, TLS)
    index: int  # this acceptor's number, shown in a client's /stats
    parser: CommandParser
    auth: AuthService
    tls_context: ssl.SSLContext | None  # None: no certificate, no TLS upgrade
    tls_required: bool | str  # True, False or "tcp-https"

    #: send a record to the ring of a router slot (Endpoint.send)
    send_record: Callable[[int, bytes | bytearray], None]
    #: the same for a record no later one joins, pushed at once if nothing waits for the
    #: slot (Endpoint.send_now: a publish run's PUBLISH_AT)
    send_record_now: Callable[[int, bytes], None]
    #: add bytes to the record last queued for a slot, if it is still the last (Endpoint.extend_last)
    extend_record: Callable[[int, bytearray, bytes, int], bool]
    #: append the bodies at spans of a buffer to the topic's segment (Publisher.publish_spans)
    publish_spans: Callable[[bytes, bytearray, bytes | bytearray, int | list[int]], None]
    #: the segment tail that takes a run of PUB/MPUB on a topic, and its router's slot
    #: (Publisher.run_tail; None: the topic's publishes all go by publish_spans)
    run_tail: Callable[[bytes], tuple[SegmentTail, int] | None]
    #: a publisher's data came in: keep the loop awake for its next write (BusyPoll.touch)
    busy_touch: Callable[[], None]

    def new_conn_id(self) -> int:
        """A connection ID unique in the run (acceptor, generation, number)."""

    def router_slot(self, topic: bytes) -> int:
        """The ring slot of the router that owns a topic."""

    def attach(self, conn: V2Connection) -> None:
        """The connection is open: records for its ID reach it from now on."""

    def detach(self, conn: V2Connection) -> None:
        """The connection is gone (its router is told by the connection)."""

    def published(self, conn: V2Connection) -> None:
        """A publish went to disk: health, the producers' board, the ring's back-pressure."""

    def publish_failed(self, exc: OSError) -> None:
        """A publish failed writing to disk: every acceptor's /ping says so."""

    def producer_left(self) -> None:
        """A connection that published has gone: the producers' board changes."""

    def deliver_waiting(self) -> None:
        """Write out the routers' records (deliveries) already waiting, before a big publish."""
