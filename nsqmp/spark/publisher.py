"""Executor side of the nsq sink: Arrow batches -> MPUB, pipelined, with size checks.

Every row is checked before anything of its Arrow batch is sent: a null or empty body, or
one larger than ``maxMessageSize`` (nsqd's --max-msg-size, 1048576 by default), fails the
task with the row's index, its size and the limit. A broker whose limit is lower answers
E_BAD_MESSAGE; that error is translated the same way. Each MPUB holds at most
``batchSize`` messages and ``maxBodySize`` bytes (nsqd's --max-body-size); up to WINDOW of
them are in flight on the connection before their OKs are read.
"""
from __future__ import annotations

import collections
import re
import socket

import pyarrow as pa
import pyarrow.compute as pc

from nsqmp.client import wire
from nsqmp.client.sync import Connection, NSQError
from nsqmp.spark.consumer import USER_AGENT
from nsqmp.spark.options import WriteOptions

WINDOW = 8
_TOO_BIG = re.compile(r"too big (\d+) > (\d+)")


class NSQPublishError(RuntimeError):
    """Publishing failed: the text names the topic, the rows and the broker's answer."""


class Publisher:
    def __init__(self, opts: WriteOptions, first: int = 0) -> None:
        self.opts = opts
        self.conn: Connection | None = None
        self.address = ""
        errors = []
        n = len(opts.addresses)
        for k in range(n):
            address = opts.addresses[(first + k) % n]
            try:
                conn = Connection.connect(address, timeout=max(opts.connect_timeout_ms / 1000, 1.0))
                conn.identify(client_id="nsqmp-spark-writer", hostname=socket.gethostname(),
                              user_agent=USER_AGENT)
                conn.sock.settimeout(60.0)
                self.conn, self.address = conn, address
                break
            except (OSError, EOFError, NSQError) as exc:
                errors.append(f"{address}: {getattr(exc, 'strerror', None) or exc}")
        if self.conn is None:
            raise NSQPublishError(f"nsq: cannot connect to any nsqd to publish to {opts.topic!r}: "
                                  + "; ".join(errors))
        self.outstanding: collections.deque[tuple[int, list[int]]] = collections.deque()
        self.published = 0

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def publish(self, bodies: list[bytes], first_row: int) -> None:
        """MPUB `bodies` (already checked); first_row: index of bodies[0] in the task's rows."""
        opts = self.opts
        limit_body = opts.max_body_size
        start = 0
        n = len(bodies)
        while start < n:
            size = 4
            end = start
            while end < n and end - start < opts.batch_size:
                add = 4 + len(bodies[end])
                if end > start and size + add > limit_body:
                    break
                size += add
                end += 1
            self._send(wire.mpub(opts.topic, bodies[start:end]), first_row + start, bodies[start:end])
            start = end

    def _send(self, command: bytes, first_row: int, bodies: list[bytes]) -> None:
        while len(self.outstanding) >= WINDOW:
            self._read_one()
        try:
            self.conn.send(command)
        except OSError as exc:
            # the broker may have closed after an error frame: report that answer first
            while self.outstanding:
                self._read_one()
            raise NSQPublishError(f"nsq: publishing to {self.opts.topic!r} on nsqd {self.address} failed: "
                                  f"{exc.strerror or exc}") from None
        self.outstanding.append((first_row, [len(b) for b in bodies]))

    def flush(self) -> None:
        while self.outstanding:
            self._read_one()

    def _read_one(self) -> None:
        first_row, sizes = self.outstanding.popleft()
        try:
            frame = self.conn.read_frame()
        except (OSError, EOFError) as exc:
            raise NSQPublishError(f"nsq: nsqd {self.address} closed the connection while publishing rows "
                                  f"{first_row}-{first_row + len(sizes) - 1} to {self.opts.topic!r}: {exc}") from None
        if frame.type == wire.FRAME_ERROR:
            raise NSQPublishError(self._explain(frame.data.decode(errors="replace"), first_row, sizes))
        if frame.data != b"OK":
            raise NSQPublishError(f"nsq: unexpected answer to MPUB from nsqd {self.address}: {frame.data!r}")
        self.published += len(sizes)

    def _explain(self, text: str, first_row: int, sizes: list[int]) -> str:
        rows = f"rows {first_row}-{first_row + len(sizes) - 1}"
        m = _TOO_BIG.search(text)
        if text.startswith("E_BAD_MESSAGE") and m:
            size, limit = int(m.group(1)), int(m.group(2))
            row = first_row + next((i for i, s in enumerate(sizes) if s == size), 0)
            return (f"nsq: row {row} is {size} bytes, larger than the broker's max message size {limit} bytes "
                    f"(nsqd {self.address} answered {text!r}); set option maxMessageSize to {limit} to check "
                    "before publishing, or raise --max-msg-size on the broker")
        return f"nsq: nsqd {self.address} refused MPUB of {rows} to {self.opts.topic!r}: {text}"


def _body_column(batch: pa.RecordBatch, column: str) -> pa.Array:
    idx = batch.schema.get_field_index(column)
    if idx < 0:
        raise NSQPublishError(f"nsq: no column {column!r} in {batch.schema.names}")
    col = batch.column(idx)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary() if pa.types.is_string(col.type) else pa.large_binary())
    return col


def check_sizes(col: pa.Array, column: str, first_row: int, max_size: int) -> None:
    """Raise NSQPublishError naming the first null, empty or too-large row."""
    if col.null_count:
        i = pc.index(pc.is_null(col), True).as_py()
        raise NSQPublishError(f"nsq: row {first_row + i}: column {column!r} is null; NSQ messages need a body")
    if len(col) == 0:
        return
    lengths = pc.binary_length(col)
    biggest = pc.max(lengths).as_py()
    if biggest > max_size:
        i = pc.index(pc.greater(lengths, max_size), True).as_py()
        size = lengths[i].as_py()
        raise NSQPublishError(
            f"nsq: row {first_row + i} (column {column!r}) is {size} bytes, larger than the max message "
            f"size {max_size} bytes (option maxMessageSize; nsqd's --max-msg-size, 1048576 by default)")
    if pc.min(lengths).as_py() == 0:
        i = pc.index(pc.equal(lengths, 0), True).as_py()
        raise NSQPublishError(f"nsq: row {first_row + i}: column {column!r} is empty; NSQ refuses empty messages")


def publish_arrow(opts: WriteOptions, column: str, batches, partition: int = 0) -> int:
    """Publish the body column of every Arrow batch; returns how many messages nsqd acknowledged."""
    pub: Publisher | None = None
    row = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            col = _body_column(batch, column)
            check_sizes(col, column, row, opts.max_message_size)
            if pub is None:
                pub = Publisher(opts, partition)
            pub.publish(col.to_pylist(), row)
            row += batch.num_rows
        if pub is not None:
            pub.flush()
            return pub.published
        return 0
    finally:
        if pub is not None:
            pub.close()
