"""format("nsq") with option("mode", "log"): a topic read as a log, like Spark's Kafka source.

The broker's log API (nsqmp/acceptor/http_log.py) gives one partition per acceptor stream
and positions "SEQ:OFFSET" in it. Here:

* Offsets (what Spark checkpoints) are ``{"<partition>": "SEQ:OFFSET", ...}``: for each
  stream, the position of the next record to read. A partition missing from an offset
  starts at "0:0", the stream's earliest retained record.
* The driver only asks for positions: ``latestOffset`` asks ``/topic/offsets?at=latest``
  (bounded by maxOffsetsPerTrigger with ``/topic/log?format=next``, which moves no body);
  ``partitions(start, end)`` makes one Spark partition per stream range.
* Executors read their range themselves (``read``): ``/topic/log?format=binary`` pages
  from start to end. Positions are stable, so a batch Spark replays after a restart reads
  exactly the same records: with a checkpointed sink, no gap and no duplicate.
* No channel is created and nothing is FIN'd: any number of queries read the same topic,
  and the topic's channels do not see them.

An acceptor killed under a reader: the request fails, the reader retries (the port is
shared, another acceptor or the restarted one answers) until retryTimeoutMs.
"""
from __future__ import annotations

import http.client
import time
from dataclasses import dataclass
from urllib.parse import urlencode

import orjson
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType, TimestampType

from nsqmp.diskqueue.logread import LOG_CHUNK, LOG_HEAD, LOG_MAGIC, SKIPPED
from nsqmp.layouts import DEFER, DUE, LENGTH_MASK, MESSAGE_HEAD, RECORD_HEAD
from nsqmp.spark.options import LogOptions, NSQOptionError, split_address

LOG_SCHEMA = StructType([
    StructField("id", StringType()),
    StructField("body", BinaryType()),
    StructField("timestamp", TimestampType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", StringType()),
    StructField("deferred_until", TimestampType()),
])
LOG_ARROW_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("body", pa.binary()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.string()),
    ("deferred_until", pa.timestamp("us", tz="UTC")),
])
START = "0:0"
FILL_ROWS = 8192  # an executor yields Arrow batches of at least this many rows (but the last)


class NSQLogError(RuntimeError):
    """The log cannot be read as asked (an error answer, data loss, a broker gone too long)."""


def _pos(text: str) -> tuple[int, int]:
    seq, _, off = text.partition(":")
    return int(seq), int(off)


# -- HTTP ----------------------------------------------------------------------------------------
class LogClient:
    """GETs to the broker's log API on one kept-alive connection, retried on a dropped
    connection or a 5xx until retry_timeout_ms (the next try may reach another acceptor)."""

    def __init__(self, opts: LogOptions) -> None:
        self.opts = opts
        self._conn: http.client.HTTPConnection | None = None
        self._turn = 0

    def get(self, path: str, params: dict) -> tuple[int, bytes]:
        deadline = time.monotonic() + self.opts.retry_timeout_ms / 1000
        delay = 0.05
        while True:
            try:
                if self._conn is None:
                    host, port = split_address(self.opts.http_addresses[self._turn % len(self.opts.http_addresses)])
                    self._conn = http.client.HTTPConnection(host, port, timeout=self.opts.http_timeout_ms / 1000)
                self._conn.request("GET", f"{path}?{urlencode(params)}")
                resp = self._conn.getresponse()
                body = resp.read()
                if resp.status < 500:
                    return resp.status, body
                error: str = f"HTTP {resp.status} {body[:200]!r}"
            except (OSError, http.client.HTTPException) as exc:
                error = f"{type(exc).__name__}: {exc}"
            self.close()
            self._turn += 1
            if time.monotonic() + delay > deadline:
                raise NSQLogError(f"nsq log: broker {self.opts.http_addresses} does not answer {path}: {error}")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def json(self, path: str, params: dict, missing_ok: bool = False) -> dict | None:
        status, body = self.get(path, params)
        if status == 404 and missing_ok:
            return None
        if status != 200:
            raise NSQLogError(f"nsq log: {path} answered {status}: {body[:200]!r}")
        return orjson.loads(body)

    def offsets(self, at: str) -> dict[str, str]:
        """/topic/offsets at a point; {} for a topic that does not exist (yet)."""
        got = self.json("/topic/offsets", {"topic": self.opts.topic, "at": at}, missing_ok=True)
        return got["partitions"] if got else {}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def resolve(client: LogClient, spec: str) -> dict[str, str]:
    """startingOffsets/endingOffsets -> partition -> position."""
    low = spec.strip().lower()
    if low in ("earliest", "latest"):
        return client.offsets(low)
    if spec.strip().startswith("{"):
        try:
            given = orjson.loads(spec)
        except orjson.JSONDecodeError:
            raise NSQOptionError(f"nsq: offsets {spec!r}: not JSON") from None
        out, points = {}, {}
        for part, value in given.items():
            if value in ("earliest", "latest"):
                points.setdefault(value, client.offsets(value))
                value = points[value].get(str(part), START)
            try:
                _pos(value)
            except (ValueError, TypeError):
                raise NSQOptionError(f"nsq: offsets: partition {part}: {value!r} is not SEQ:OFFSET") from None
            out[str(int(part))] = value
        return out
    status, body = client.get("/topic/offsets", {"topic": client.opts.topic, "at": spec})
    if status == 400:
        raise NSQOptionError(f"nsq: offsets {spec!r}: not earliest, latest, a JSON map, an RFC 3339 time "
                             "or unix nanoseconds")
    if status == 404:
        return {}
    return orjson.loads(body)["partitions"]


# -- executors: one stream range -----------------------------------------------------------------
@dataclass
class LogRange:
    """What one Spark partition reads: stream `partition` from position start up to end."""
    partition: int
    start: str
    end: str


def decode(body: bytes, topic: str, partition: int) -> tuple[pa.RecordBatch, tuple[int, int], bool, int]:
    """A binary /topic/log answer -> (Arrow batch, next position, skipped, records)."""
    magic, _version, flags, _r, nseq, noff, _eseq, _eoff, chunks = LOG_HEAD.unpack_from(body, 0)
    if magic != LOG_MAGIC:
        raise NSQLogError("nsq log: not a log answer")
    ids, bodies, stamps, offsets, dues = [], [], [], [], []
    word_at, head_at, due_at = RECORD_HEAD.unpack_from, MESSAGE_HEAD.unpack_from, DUE.unpack_from
    at = LOG_HEAD.size
    for _ in range(chunks):
        seq, offset, size = LOG_CHUNK.unpack_from(body, at)
        at += LOG_CHUNK.size
        pos, stop = at, at + size
        prefix = f"{seq}:"
        while pos < stop:  # records as in the segment file (nsqmp.layouts)
            word = word_at(body, pos)[0]
            end = pos + 8 + (word & LENGTH_MASK)
            p = pos + 8
            if word & DEFER:
                dues.append(due_at(body, p)[0] // 1000 or None)
                p += 8
            else:
                dues.append(None)
            ts, _attempts, msg_id = head_at(body, p)
            ids.append(msg_id)
            stamps.append(ts // 1000)
            bodies.append(body[p + MESSAGE_HEAD.size:end])
            offsets.append(prefix + str(offset + pos - at))
            pos = end
        at = stop
    n = len(ids)
    batch = pa.RecordBatch.from_arrays([
        pa.array(ids, pa.binary()).cast(pa.string()),
        pa.array(bodies, pa.binary()),
        pa.array(stamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(offsets, pa.string()),
        pa.array(dues, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
    ], schema=LOG_ARROW_SCHEMA)
    return batch, (nseq, noff), bool(flags & SKIPPED), n


def read_range(opts: LogOptions, rng: LogRange):
    """Arrow batches of the records of one stream from rng.start up to rng.end (executor side)."""
    client = LogClient(opts)
    cur, end = rng.start, rng.end
    stuck = 0
    held: list[pa.RecordBatch] = []  # small answers are gathered: each batch yielded costs Spark a lot
    rows = 0
    try:
        while _pos(cur) < _pos(end):
            status, body = client.get("/topic/log", {
                "topic": opts.topic, "partition": rng.partition, "from": cur, "to": end,
                "n": opts.request_records, "max_bytes": opts.request_bytes, "format": "binary"})
            if status != 200:
                raise NSQLogError(f"nsq log: /topic/log answered {status}: {body[:200]!r}")
            batch, nxt, skipped, count = decode(body, opts.topic, rng.partition)
            if skipped and opts.fail_on_data_loss:
                raise NSQLogError(
                    f"nsq log: topic {opts.topic} partition {rng.partition}: records from {cur} are gone "
                    "(expired by retention, or finished by every channel of a topic without retention); "
                    "set failOnDataLoss=false to go on from what is retained")
            nxt_text = f"{nxt[0]}:{nxt[1]}"
            if count:
                held.append(batch)
                rows += count
                if rows >= FILL_ROWS:
                    yield _combine(held)
                    held, rows = [], 0
            if nxt_text == cur and not count:
                stuck += 1  # nothing readable yet up to end: cannot happen unless files vanish
                if stuck > 50:
                    raise NSQLogError(f"nsq log: partition {rng.partition} makes no progress at {cur} (end {end})")
                time.sleep(0.1)
            cur = nxt_text
        if held:
            yield _combine(held)
    finally:
        client.close()


def _combine(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def ranges(start: dict, end: dict) -> list[InputPartition]:
    """One Spark partition per stream that has records between start and end."""
    out = []
    for part, stop in sorted(end.items(), key=lambda kv: int(kv[0])):
        begin = start.get(part, START)
        if _pos(begin) < _pos(stop):
            out.append(InputPartition(LogRange(int(part), begin, stop)))
    return out


# -- streaming -----------------------------------------------------------------------------------
class NSQLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """readStream in log mode: the driver side asks for positions only (module docstring)."""

    def __init__(self, opts: LogOptions) -> None:
        self.opts = opts
        self.client = LogClient(opts)
        self.until: dict[str, str] | None = None  # availableNow: the end when it was asked

    def initialOffset(self) -> dict:
        return resolve(self.client, self.opts.starting)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_per_trigger is not None:
            return ReadMaxRows(self.opts.max_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.until = self.client.offsets("latest")

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self.until if self.until is not None else self.client.offsets("latest")
        end = dict(start)
        ahead = {p: pos for p, pos in latest.items() if _pos(start.get(p, START)) < _pos(pos)}
        if isinstance(limit, ReadMaxRows) and ahead:
            share = max(1, limit.max_rows // len(ahead))
            for part, stop in ahead.items():
                got = self.client.json("/topic/log", {
                    "topic": self.opts.topic, "partition": part, "from": start.get(part, START), "to": stop,
                    "n": min(share, 100_000), "max_bytes": 64 << 20, "format": "next"})
                end[part] = got["next"]
        else:
            end.update(ahead)
        for part in latest:
            end.setdefault(part, START)  # a new stream with nothing yet
        return end

    def partitions(self, start: dict, end: dict):
        return ranges(start, end)

    def read(self, partition: InputPartition):
        yield from read_range(self.opts, partition.value)

    def commit(self, end: dict) -> None:
        pass  # nothing to acknowledge: the log stays as it is for every other reader

    def stop(self) -> None:
        self.client.close()


# -- batch ---------------------------------------------------------------------------------------
class NSQLogBatchReader(DataSourceReader):
    """spark.read in log mode: startingOffsets to endingOffsets, resolved when planned."""

    def __init__(self, opts: LogOptions) -> None:
        self.opts = opts

    def partitions(self):
        client = LogClient(self.opts)
        try:
            start = resolve(client, self.opts.starting)
            end = resolve(client, self.opts.ending)
        finally:
            client.close()
        return ranges(start, end)

    def read(self, partition: InputPartition):
        yield from read_range(self.opts, partition.value)

