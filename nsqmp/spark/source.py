"""The "nsq" data source: streaming and batch reads, streaming and batch writes.

Where each piece runs (PySpark 4 Python Data Source API):

* ``NSQStreamReader``: ``initialOffset``/``latestOffset``/``partitions``/``commit`` run in
  one long-lived Python process on the driver side, on one instance. It owns the NSQ
  connections (``Consumer``). ``latestOffset`` moves buffered messages into a new batch and
  returns its end offset; ``partitions`` ships that batch's rows to the executors inside
  the partitions, as Arrow IPC bytes; ``read`` (in an executor) only decodes them. The
  messages stay in flight on the broker until the batch is committed: they are FIN'd when
  Spark calls ``commit(end)`` or asks for the next batch (``latestOffset(start=end)``),
  whichever comes first; both come after the sink committed the batch.
* ``NSQBatchReader``: each partition (an executor task) opens its own connections, drains
  up to its share of ``maxMessages`` or until the topic is idle, and FINs at the end.
* Writers: ``write`` runs in executors and publishes with MPUB; the driver-side commit has
  nothing to do (an OK from nsqd means the messages are stored).

Offsets are ``{"session": <reader id>, "n": <messages handed out by that reader>}``. The
broker cannot replay by offset: a batch that Spark replays after a driver restart comes
from a reader that is gone, so its partitions are empty, and its messages, never FIN'd,
are delivered again by the broker into later batches (at-least-once).
"""
from __future__ import annotations

import logging
import math
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from nsqmp.spark.consumer import Consumer
from nsqmp.spark.options import (
    MAX_CONNECTIONS_PER_NSQD,
    NSQOptionError,
    ReadOptions,
    WriteOptions,
    log_options,
    read_mode,
    read_options,
    write_options,
)
from nsqmp.spark.publisher import publish_arrow

log = logging.getLogger("nsqmp.spark")

PARTITION_BYTES = 32 << 20

SCHEMA = StructType([
    StructField("id", StringType()),
    StructField("body", BinaryType()),
    StructField("timestamp", TimestampType()),
    StructField("attempts", IntegerType()),
    StructField("topic", StringType()),
])
ARROW_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("body", pa.binary()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("attempts", pa.int32()),
    ("topic", pa.string()),
])


def to_record_batch(msgs: list, topic: str) -> pa.RecordBatch:
    """Messages (nsqmp.client.wire.Message) -> one Arrow batch of SCHEMA.

    timestamp: nsqd's nanoseconds since the epoch, truncated to microseconds (Spark's
    TimestampType), UTC.
    """
    ids = pa.array([m.id for m in msgs], pa.binary()).cast(pa.string())
    bodies = pa.array([m.body for m in msgs], pa.binary())
    ts = pa.array([m.timestamp // 1000 for m in msgs], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    attempts = pa.array([m.attempts for m in msgs], pa.int32())
    topics = pa.array([topic] * len(msgs), pa.string())
    return pa.RecordBatch.from_arrays([ids, bodies, ts, attempts, topics], schema=ARROW_SCHEMA)


def _ipc(batches: list[pa.RecordBatch]) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ARROW_SCHEMA) as out:
        for b in batches:
            out.write_batch(b)
    return sink.getvalue().to_pybytes()


def _check_schema(schema: StructType) -> None:
    got = [(f.name, f.dataType) for f in schema.fields]
    want = [(f.name, f.dataType) for f in SCHEMA.fields]
    if got != want:
        raise NSQOptionError(
            f"nsq: the source's schema is fixed ({SCHEMA.simpleString()}); got {schema.simpleString()}")


# -- streaming read ------------------------------------------------------------------------------
class _Batch:
    __slots__ = ("chunks", "parts", "rows")

    def __init__(self, chunks: list, rows: int) -> None:
        self.chunks = chunks
        self.rows = rows
        self.parts: list[InputPartition] | None = None


class NSQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.session = uuid.uuid4().hex[:16]
        self.n = 0
        self.batches: dict[int, _Batch] = {}   # end n -> batch, until acknowledged
        self.cutoff_ns: int | None = None
        self.consumer: Consumer | None = None

    def _consumer(self) -> Consumer:
        if self.consumer is None:
            o = self.opts
            conns = o.connections_per_nsqd
            self.consumer = Consumer(
                o.addresses, o.topic, o.channel, connections_per_nsqd=conns,
                rdy=math.ceil(o.max_in_flight / conns), msg_timeout_ms=o.msg_timeout_ms,
                connect_timeout_ms=o.connect_timeout_ms, client_id=o.client_id,
            ).start()
        return self.consumer

    # offsets
    def _mine(self, offset: dict | None) -> bool:
        return isinstance(offset, dict) and offset.get("session") == self.session

    def initialOffset(self) -> dict:
        self._consumer()
        return {"session": self.session, "n": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.batch_cap)

    def prepareForTriggerAvailableNow(self) -> None:
        # "what is there": messages nsqd stamped before now; later ones are left in flight
        # (never returned, given back to the broker when the query ends)
        self.cutoff_ns = time.time_ns()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        consumer = self._consumer()
        self._ack_through(start)
        if isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            cap = self.opts.max_in_flight * len(self.opts.addresses)
        else:
            cap = self.opts.batch_cap
        if self.cutoff_ns is not None:
            wait = self.opts.idle_timeout_ms / 1000
        else:
            wait = self.opts.poll_timeout_ms / 1000
        chunks = consumer.take(cap, wait, self.cutoff_ns)
        if not chunks:
            return start
        rows = sum(len(ch.msgs) for ch in chunks)
        # while messages keep arriving, let the batch fill a little longer: each micro-batch
        # has a fixed cost of a few hundred ms, bigger batches are cheaper per row
        fill_until = time.monotonic() + self.opts.fill_ms / 1000
        while rows < cap and time.monotonic() < fill_until:
            more = consumer.take(cap - rows, 0.02, self.cutoff_ns)
            if not more:
                break
            chunks += more
            rows += sum(len(ch.msgs) for ch in more)
        self.n += rows
        self.batches[self.n] = _Batch(chunks, rows)
        return {"session": self.session, "n": self.n}

    def partitions(self, start: dict, end: dict):
        if not self._mine(end):
            # a batch planned by an earlier run of the query (driver restart): its messages
            # were never FIN'd, the broker delivers them again into later batches
            return []
        batch = self.batches.get(end["n"])
        if batch is None:
            if self._mine(start) and start.get("n") == end.get("n"):
                return []
            raise RuntimeError(f"nsq: no batch for offsets {start} -> {end}: already acknowledged")
        if batch.parts is None:
            # the rows travel to the executors inside the partitions (so Spark warns about
            # large tasks): at most rowsPerPartition rows and PARTITION_BYTES of bodies each
            parts, current, size = [], [], 0
            for ch in batch.chunks:
                for m in ch.msgs:
                    current.append(m)
                    size += len(m.body)
                    if len(current) >= self.opts.rows_per_partition or size >= PARTITION_BYTES:
                        parts.append(InputPartition(_ipc([to_record_batch(current, self.opts.topic)])))
                        current, size = [], 0
            if current:
                parts.append(InputPartition(_ipc([to_record_batch(current, self.opts.topic)])))
            batch.parts = parts
        return batch.parts

    def read(self, partition: InputPartition):
        with pa.ipc.open_stream(partition.value) as reader:
            yield from reader

    def commit(self, end: dict) -> None:
        self._ack_through(end)

    def _ack_through(self, offset: dict | None) -> None:
        """FIN every batch that ends at or before `offset` (Spark has committed it)."""
        if not self._mine(offset) or self.consumer is None:
            return
        upto = offset["n"]
        done = sorted(n for n in self.batches if n <= upto)
        if not done:
            return
        chunks = []
        for n in done:
            chunks += self.batches.pop(n).chunks
        self.consumer.fin(chunks)

    def stop(self) -> None:
        if self.consumer is not None:
            self.consumer.close(graceful=True)
            self.consumer = None


# -- batch read --------------------------------------------------------------------------------
@dataclass
class _ReadTask:
    address: str
    share: int


class NSQBatchReader(DataSourceReader):
    FILL_ROWS = 8192

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self):
        o = self.opts
        total = len(o.addresses) * o.partitions_per_nsqd
        share = math.ceil(o.max_messages / total)
        return [InputPartition(_ReadTask(a, share)) for a in o.addresses for _ in range(o.partitions_per_nsqd)]

    def read(self, partition: InputPartition):
        o = self.opts
        task: _ReadTask = partition.value
        conns = min(MAX_CONNECTIONS_PER_NSQD, max(1, math.ceil(task.share / o.max_rdy)))
        consumer = Consumer(
            [task.address], o.topic, o.channel, connections_per_nsqd=conns,
            rdy=math.ceil(task.share / conns), msg_timeout_ms=o.msg_timeout_ms,
            connect_timeout_ms=o.connect_timeout_ms, client_id=o.client_id,
        ).start()
        held: list = []
        got = 0
        finished = False
        try:
            idle = o.idle_timeout_ms / 1000
            while got < task.share:
                chunks = consumer.take(task.share - got, idle)
                if not chunks:
                    break
                rows = sum(len(ch.msgs) for ch in chunks)
                # fill up an Arrow batch while messages keep coming
                while rows < self.FILL_ROWS and got + rows < task.share:
                    more = consumer.take(task.share - got - rows, 0.02)
                    if not more:
                        break
                    chunks += more
                    rows += sum(len(ch.msgs) for ch in more)
                held += chunks
                got += rows
                yield to_record_batch([m for ch in chunks for m in ch.msgs], o.topic)
            finished = True
        finally:
            if finished:
                if o.ack == "fin":
                    consumer.fin(held)
                else:
                    consumer.requeue(held)
            # not finished (an error, or Spark stopped early, e.g. a limit): closing the
            # connections gives every message back to the broker
            consumer.close(graceful=finished)


# -- writes --------------------------------------------------------------------------------------
@dataclass
class NSQCommitMessage(WriterCommitMessage):
    partition: int
    published: int


def _resolve_column(schema: StructType, opts: WriteOptions) -> str:
    names = schema.fieldNames()
    if opts.column is not None:
        matches = [n for n in names if n.lower() == opts.column.lower()]
        if not matches:
            raise NSQOptionError(f"nsq: option column: no column {opts.column!r} in {names}")
        name = matches[0]
    else:
        candidates = [n for n in names if n.lower() in ("body", "value")]
        if candidates:
            name = candidates[0]
        elif len(names) == 1:
            name = names[0]
        else:
            raise NSQOptionError(
                f"nsq: which column holds the message body? none is named 'body' or 'value' in {names}; "
                "set .option(\"column\", ...)")
    dtype = schema[name].dataType
    if not isinstance(dtype, (BinaryType, StringType)):
        raise NSQOptionError(
            f"nsq: column {name!r} is {dtype.simpleString()}; the message body must be binary or string "
            "(cast it, e.g. to_json(struct(*)) or col.cast('string'))")
    return name


class _WriterBase:
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.column = _resolve_column(schema, opts)

    def write(self, iterator):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        published = publish_arrow(self.opts, self.column, iterator, partition)
        return NSQCommitMessage(partition, published)


class NSQBatchWriter(_WriterBase, DataSourceArrowWriter):
    def commit(self, messages) -> None:
        pass

    def abort(self, messages) -> None:
        # what was published stays published: nsqd has no way to take messages back
        pass


class NSQStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


# -- the data source ---------------------------------------------------------------------------
class NSQDataSource(DataSource):
    """format("nsq"): read from or publish to NSQ topics (nsqd or nsqmp)."""

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self):
        if read_mode(self.options) == "log":
            from nsqmp.spark.log import LOG_SCHEMA
            return LOG_SCHEMA
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if read_mode(self.options) == "log":  # the topic as a log: nsqmp/spark/log.py
            from nsqmp.spark.log import NSQLogBatchReader
            return NSQLogBatchReader(log_options(self.options, streaming=False))
        _check_schema(schema)
        return NSQBatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if read_mode(self.options) == "log":
            from nsqmp.spark.log import NSQLogStreamReader
            return NSQLogStreamReader(log_options(self.options, streaming=True))
        _check_schema(schema)
        return NSQStreamReader(read_options(self.options, streaming=True))

    def simpleStreamReader(self, schema: StructType):
        raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED",
                                         messageParameters={"feature": "simpleStreamReader"})

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise NSQOptionError("nsq: a topic cannot be overwritten, only appended to: use .mode(\"append\")")
        return NSQBatchWriter(write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return NSQStreamWriter(write_options(self.options), schema)
