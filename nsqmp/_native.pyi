"""Type stub for the C extension nsqmp._native (sources in native/)."""

from collections.abc import Sequence

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

class Message:
    """A message as the router holds it (native/readback.c; twin nsqmp/router/pyreadback.py)."""

    id: bytes
    ts: int
    body: bytes
    segment: object
    offset: int
    def __new__(cls, msg_id: bytes, ts: int, body: bytes, segment: object, offset: int) -> Message: ...

def read_messages(
    buf: Buffer, base: int, want: int, segment: object, /
) -> tuple[list[tuple[Message, int]], int, int]:
    """Up to want segment records from the start of buf: (entries (Message, due_ns), consumed, deferred)."""

def pack_frames(
    head: Buffer, entries: Sequence[tuple[Message, int]], start: int, max_bytes: int, /
) -> tuple[bytes, int]:
    """head + NSQ message frames of entries[start:] within max_bytes of frames: (bytes, next index)."""

# acklog.c
def keep_entries(data: Buffer, live: Buffer, /) -> bytes:
    """The 16-byte ack log entries of data whose acceptor << 32 | seq is in live (sorted u64s)."""

# benchclient.c
def fin_replies(buf: Buffer, /) -> tuple[bytes, int, int, bytes | None]:
    """(replies, messages, consumed, error): FIN per message frame, NOP per heartbeat."""
def publish_loop(fd: int, command: bytes, until: float, /) -> tuple[int, tuple[int, bytes] | None]:
    """Send command, wait for its response, until the wall clock passes until: (OKs, error)."""
