"""Type stub for the C extension nsqmp._native (sources in native/)."""

from collections import deque
from collections.abc import Sequence
from typing import Any, overload

from typing_extensions import Buffer

RING_HEADER_SIZE: int

def ring_size(capacity: int) -> int:
    """Bytes of buffer needed for a ring of this data capacity (512 + capacity)."""

class Ring:
    """SPSC record ring over a writable, 8-byte aligned, formatted buffer."""

    def __new__(cls, buf: Buffer) -> Ring: ...
    @classmethod
    def format(cls, buf: Buffer, capacity: int) -> Ring: ...
    @property
    def capacity(self) -> int: ...
    @property
    def max_record(self) -> int: ...
    @property
    def used(self) -> int: ...
    @property
    def free(self) -> int: ...
    def push(self, data: Buffer, /) -> int: ...
    def push_many(self, records: Sequence[Buffer], start: int = 0) -> tuple[int, bool]: ...
    def prepare_wait(self, needed: int, /) -> bool: ...
    def release_if_idle(self) -> int: ...
    def pop(self) -> bytes | None: ...
    def pop_many(self, max_records: int = 1 << 30, max_bytes: int = 1 << 62) -> list[bytes]: ...
    def prepare_sleep(self) -> bool: ...
    def take_producer_wakeup(self) -> bool: ...
    def release(self) -> None: ...

class DeadlineHeap:
    """Indexed 4-ary heap of deadlines keyed by (owner, token); see native/heap.h."""

    def __new__(cls) -> DeadlineHeap: ...
    def __len__(self) -> int: ...
    def arm(self, owner: int, token: int, deadline: int, /) -> bool: ...
    def disarm(self, owner: int, token: int, /) -> bool: ...
    def get(self, owner: int, token: int, /) -> int | None: ...
    def arm_many(self, owner: int, buf: Buffer, /) -> int: ...
    def disarm_many(self, owner: int, buf: Buffer, /) -> int: ...
    def next_deadline(self) -> int | None: ...
    def pop_due(self, now: int, max_count: int | None = None) -> list[tuple[int, bytes]]: ...
    def forget_owner(self, owner: int, /) -> int: ...

MAX_LINE: int
NO_BODY: int
BODY_PENDING: int
BODY_INVALID: int
SCAN_NEED_MORE: int
SCAN_MORE: int
SCAN_BODY_PENDING: int
SCAN_BAD_BODY: int
SCAN_LINE_TOO_LONG: int

class Parser:
    """Framing of NSQ V2 commands in a read buffer; see native/parser.h and nsqmp/protocol/pyparser.py."""

    def __new__(cls, max_msg_size: int, max_body_size: int, max_line: int = 16384) -> Parser: ...
    @property
    def max_msg_size(self) -> int: ...
    @property
    def max_body_size(self) -> int: ...
    @property
    def max_line(self) -> int: ...
    def scan(
        self, buf: Buffer, pos: int = 0, max_commands: int = 1024
    ) -> tuple[list[tuple[tuple[bytes, ...], int, int, int]], int, int, tuple[str, str] | None]: ...
    def fins(self, buf: Buffer, pos: int = 0, max_ids: int = 512) -> tuple[bytes, int]: ...

def mpub_spans(
    buf: Buffer, start: int, length: int, max_msg_size: int, max_body_size: int, /
) -> tuple[bytes | None, tuple[str, str] | None]: ...

CRC32C_HARDWARE: int

def crc32c(data: Buffer, value: int = 0, /) -> int:
    """CRC-32C of data, continuing from value (the crc32c package's value); see native/publish.h."""

def crc32c_table(data: Buffer, value: int = 0, /) -> int:
    """crc32c() through the portable table even where SSE4.2 is used (for the tests)."""

def records_size(spans: Buffer, deferred: bool, /) -> int: ...
def encode_records(
    dst: Buffer, dst_pos: int, src: Buffer, spans: Buffer, ts_ns: int, first_id: int, due_ns: int, /
) -> int:
    """Segment records of every span of src, written into dst at dst_pos; see native/publish.h."""

PUB_RUN_END: int
PUB_RUN_MORE: int
PUB_RUN_OTHER: int
PUB_RUN_ROOM: int
PUB_RUN_MAPPED_MAX: int

def pub_run(
    buf: Buffer, pos: int, topic: Buffer, fd: int, file_pos: int, room: int, max_msg_size: int,
    max_body_size: int, ts_ns: int, node: int, ms: int, seq: int,
    window: Buffer | None = None, window_pos: int = 0, /
) -> tuple[int, int, int, int, int, int, int]:
    """The PUB/MPUBs for topic at buf[pos:] appended to fd at file_pos: copied into window
    (the file's mapping) at window_pos if small, else one pwrite:
    (end, commands, messages, written, ms, seq, status); see native/pubrun.c."""

class Message:
    """A message as the router holds it, in one allocation (native/message.h, readback.c; twin
    nsqmp/router/pyreadback.py). id and body are copies, read-only."""

    ts: int
    segment: object
    offset: int
    @property
    def id(self) -> bytes: ...
    @property
    def body(self) -> bytes: ...
    def __new__(cls, msg_id: Buffer, ts: int, body: Buffer, segment: object, offset: int) -> Message: ...

def read_messages(
    buf: Buffer, base: int, want: int, segment: object, /
) -> tuple[list[tuple[Message, int]], int, int]:
    """Up to want segment records from the start of buf: (entries (Message, due_ns), consumed, deferred)."""

def pack_frames(
    head: Buffer, entries: Sequence[tuple[Message, int]], start: int, max_bytes: int, /
) -> tuple[bytes, int]:
    """head + NSQ message frames of entries[start:] within max_bytes of frames: (bytes, next index)."""

def pack_members(head: Buffer, members: list, start: int, max_bytes: int, /) -> tuple[bytes, int]:
    """pack_frames over a flight's flat members (message, attempts, ...); indices count messages."""

# coalesce.c (twin: nsqmp.ipc.records.coalesce_publish_at_py)
def coalesce_publish_at(records: list[bytes], layout: tuple[int, int, int, int, int], /) -> list[bytes]:
    """records with each run of back-to-back PUBLISH_ATs of one topic and file as one;
    layout = (kind, offset_at, count_at, size_at, topic_len_at): records.PUBLISH_AT_LAYOUT."""

# acklog.c
def keep_entries(data: Buffer, live: Buffer, /) -> bytes:
    """The 16-byte ack log entries of data whose acceptor << 32 | seq is in live (sorted u64s)."""

# flight.c (struct in flight.h; twin nsqmp/router/pyinflight.py Flight)
class Flight:
    """The messages one delivery pass handed to one consumer: one deadline, one timer entry."""

    token: int
    consumer: Any
    deadline: int
    delivered: int
    live: int
    members: list
    def __new__(
        cls, token: int, consumer: Any, deadline: int, delivered: int, live: int = 0, members: list | None = None
    ) -> Flight: ...

# inflight.c
class InFlightMap:
    """A channel's messages in flight by id: (message, attempts, flight); twin nsqmp/router/pyinflight.py.

    Holds this module's Message and Flight only (read from their structs): any other
    message or flight handed to it raises TypeError."""

    def __new__(cls) -> InFlightMap: ...
    def __len__(self) -> int: ...
    def __contains__(self, msg_id: object, /) -> bool: ...
    def get(self, msg_id: bytes, /) -> tuple[Message, int, Flight] | None: ...
    def put(self, message: Message, attempts: int, flight: Flight, /) -> None: ...
    def remove(self, msg_id: bytes, /) -> None: ...
    def move(self, msg_id: bytes, flight: Flight, /) -> None: ...
    @property
    def stale(self) -> int: ...
    def fly(self, ready: deque[tuple[Message, int]], n: int, flight: Flight, members: list, out: list | None, /) -> int: ...
    def land(self, members: list, flight: Flight, ready: deque[tuple[Message, int]], /) -> int: ...
    def expire(self, members: list, flight: Flight, ready: deque[tuple[Message, int]], /) -> int: ...
    def forget(self, messages: list[Message], /) -> None: ...
    def alive(self, members: list, flight: Flight, /) -> list: ...
    @overload
    def finish(
        self, ids: Buffer, start: int, consumer: object, bad: list, emptied: list[Flight], /
    ) -> tuple[list[Message], list[list]]: ...
    @overload
    def finish(
        self, ids: Buffer, start: int, consumer: object, bad: list, emptied: list[Flight],
        channel: int, acks: bytearray, /
    ) -> tuple[list[Message], list]: ...
    def entries(self) -> list[tuple[Message, int, Flight]]: ...
    def clear(self) -> None: ...

# layouts.c: the constants of layouts.h (NQL_ prefix dropped) and ring.h (RING_)
layouts: dict[str, int | bytes]

def timerfd_open() -> int:
    """A non-blocking CLOCK_MONOTONIC timerfd, disarmed (timerfd.c)."""
def timerfd_arm(fd: int, deadline_ns: int, /) -> None:
    """Readable at deadline_ns (absolute, time.monotonic_ns); 0 disarms."""
def timerfd_clear(fd: int, /) -> int:
    """Expirations consumed; 0 when it was not readable."""
