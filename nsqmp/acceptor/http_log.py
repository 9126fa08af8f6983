"""nsqmp's own HTTP API to read a topic as a log, without a channel: /topic/offsets, /topic/log.

Every acceptor answers (any of them can read any acceptor's segment files, read-only, by
path: see nsqmp.diskqueue.logread for what is visible when). A topic's log has one
partition per acceptor stream; a position is "SEQ:OFFSET" (segment sequence, byte offset
of a record). The file work runs on the loop's executor, never on the event loop.

    GET /topic/offsets?topic=T[&at=earliest|latest|<RFC 3339 time>|<unix ns>]
        {"topic": T, "partitions": {"0": "SEQ:OFFSET", ...}}: per stream, the first record
        at or after the point (latest, the default: the end, where the next record goes)

    GET /topic/log?topic=T&partition=P[&from=SEQ:OFFSET][&to=SEQ:OFFSET][&n=N][&max_bytes=B]
                  [&format=json|binary|next]
        the records of stream P from `from` (default "0:0": the earliest retained) and
        before `to` (default: the end), at most N (default 1000, capped at 100,000) and
        about B bytes (default 4 MiB, capped at 64 MiB; at least one record)

JSON (the default)::

    {"topic": T, "partition": P, "next": "SEQ:OFFSET", "earliest": "SEQ:OFFSET", "skipped": false,
     "records": [{"offset": "SEQ:OFFSET", "id": "...", "timestamp": ns, "deferred_until": ns | null,
                  "body": "<base64>"}, ...]}

`next` is the position after the last record returned (where to read on); `earliest` the
stream's first retained record; `skipped` is true when records between `from` and the
first one returned are gone (expired or finished by every channel: the reader decides
whether that is a failure, like Kafka's failOnDataLoss). A DPUB's record is in the log at
its publish position with its due time in `deferred_until` (null for others).

format=next answers only {"next", "earliest", "skipped", "count"}: where a read of N records
would end (the Spark driver bounds a micro-batch with it without moving any body).

format=binary (application/octet-stream, what the Spark source reads: the records exactly
as in the segment files, no per-record encoding on the broker): drawn in
nsqmp.diskqueue.logread (LOG_HEAD, LOG_CHUNK).
"""
from __future__ import annotations

import base64
import re
from datetime import datetime

import orjson

from nsqmp.acceptor.http_admin import topic_arg
from nsqmp.acceptor.http_request import JSON, HttpError, Request
from nsqmp.diskqueue.layout import topic_dir
from nsqmp.diskqueue.logread import (LOG_CHUNK, LOG_HEAD, LOG_MAGIC, LOG_VERSION, SKIPPED, LogReader, Position,
                                     format_position, iter_records, parse_position, streams)
from nsqmp.protocol.names import is_ephemeral

BINARY = b"application/octet-stream"

DEFAULT_N = 1000
MAX_N = 100_000
DEFAULT_MAX_BYTES = 4 << 20
MAX_MAX_BYTES = 64 << 20

_READER = LogReader()  # per process: caches only (how far each file was found valid)
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)", re.ASCII)


def _topic(req: Request, data_path: str) -> tuple[str, str]:
    """(topic, its directory); nsqd's checks, and 404 for a topic with no files."""
    topic = topic_arg(req)
    if is_ephemeral(topic.encode()):
        raise HttpError(404, "TOPIC_NOT_FOUND")  # never on disk: it has no log
    return topic, topic_dir(data_path, topic)


def parse_time(text: str) -> int:
    """RFC 3339 (nanoseconds kept) or unix nanoseconds -> unix ns; ValueError."""
    if text.isdigit():
        return int(text)
    m = _RFC3339.fullmatch(text.strip())
    if m is None:
        raise ValueError(text)
    tz = "+00:00" if m.group(3) in ("Z", "z") else m.group(3)
    whole = datetime.fromisoformat(m.group(1).replace("t", "T").replace(" ", "T") + tz)
    frac = int((m.group(2) or "0").ljust(9, "0"))
    return int(whole.timestamp()) * 1_000_000_000 + frac


def _int_arg(req: Request, key: str, default: int, cap: int) -> int:
    raw = req.query.get(key)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise HttpError(400, f"INVALID_{key.upper()}")
    return min(int(raw), cap)


def _position_arg(req: Request, key: str) -> Position | None:
    raw = req.query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return parse_position(raw)
    except ValueError:
        raise HttpError(400, "INVALID_OFFSET") from None


# -- /topic/offsets ----------------------------------------------------------------------------
def _offsets(tdir: str, at: str) -> dict[str, str] | None:
    try:
        found = streams(tdir)
    except FileNotFoundError:
        return None
    out = {}
    for acceptor, seqs in sorted(found.items()):
        if at == "earliest":
            pos = _READER.earliest(seqs)
        elif at == "latest":
            pos = _READER.latest(tdir, acceptor, seqs)
        else:
            pos = _READER.at_time(tdir, acceptor, seqs, int(at))
        out[str(acceptor)] = format_position(pos)
    return out


async def h_offsets(server, req: Request):
    """GET /topic/offsets?topic=T&at=earliest|latest|<time>."""
    topic, tdir = _topic(req, server.opts.data_path)
    at = req.query.get("at") or "latest"
    if at not in ("earliest", "latest"):
        try:
            at = str(parse_time(at))
        except ValueError:
            raise HttpError(400, "INVALID_AT") from None
    partitions = await server.loop.run_in_executor(None, _offsets, tdir, at)
    if partitions is None:
        raise HttpError(404, "TOPIC_NOT_FOUND")
    return 200, orjson.dumps({"topic": topic, "partitions": partitions}), JSON


# -- /topic/log --------------------------------------------------------------------------------
def _read(tdir: str, partition: int, start: Position, stop: Position | None, n: int, max_bytes: int,
          with_data: bool):
    try:
        seqs = streams(tdir).get(partition, [])
    except FileNotFoundError:
        return None
    return _READER.read(tdir, partition, seqs, start, n, max_bytes, stop, with_data)


def _binary(answer) -> bytes:
    parts = [LOG_HEAD.pack(LOG_MAGIC, LOG_VERSION, SKIPPED if answer.skipped else 0, 0, answer.next[0],
                           answer.next[1], answer.earliest[0], answer.earliest[1], len(answer.chunks))]
    for chunk in answer.chunks:
        parts.append(LOG_CHUNK.pack(chunk.seq, chunk.offset, len(chunk.data)))
        parts.append(chunk.data)
    return b"".join(parts)


def _json(topic: str, partition: int, answer) -> bytes:
    b64 = base64.b64encode
    records = [{"offset": f"{chunk.seq}:{offset}", "id": msg_id.decode("latin-1"), "timestamp": ts,
                "deferred_until": due or None, "body": b64(body).decode()}
               for chunk in answer.chunks for offset, due, ts, msg_id, body in iter_records(chunk)]
    return orjson.dumps({"topic": topic, "partition": partition, "next": format_position(answer.next),
                         "earliest": format_position(answer.earliest), "skipped": answer.skipped,
                         "records": records})


async def h_log(server, req: Request):
    """GET /topic/log?topic=T&partition=P&from=SEQ:OFFSET&n=N&max_bytes=B."""
    topic, tdir = _topic(req, server.opts.data_path)
    raw = req.query.get("partition")
    if raw is None:
        raise HttpError(400, "MISSING_ARG_PARTITION")
    if not raw.isdigit() or int(raw) > 0xFFFF:
        raise HttpError(400, "INVALID_PARTITION")
    start = _position_arg(req, "from") or (0, 0)
    stop = _position_arg(req, "to")
    n = _int_arg(req, "n", DEFAULT_N, MAX_N)
    max_bytes = _int_arg(req, "max_bytes", DEFAULT_MAX_BYTES, MAX_MAX_BYTES)
    fmt = req.query.get("format") or "json"
    if fmt not in ("json", "binary", "next"):
        raise HttpError(400, "INVALID_FORMAT")
    answer = await server.loop.run_in_executor(None, _read, tdir, int(raw), start, stop, n, max_bytes,
                                               fmt != "next")
    if answer is None:
        raise HttpError(404, "TOPIC_NOT_FOUND")
    if fmt == "binary":
        return 200, _binary(answer), BINARY
    if fmt == "next":
        return 200, orjson.dumps({"next": format_position(answer.next), "earliest": format_position(answer.earliest),
                                  "skipped": answer.skipped, "count": answer.count}), JSON
    return 200, await server.loop.run_in_executor(None, _json, topic, int(raw), answer), JSON


LOG_ROUTES = {
    "/topic/offsets": (("GET",), h_offsets),
    "/topic/log": (("GET",), h_log),
}
