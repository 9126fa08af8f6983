"""Options of the "nsq" Spark data source: parsed and checked once, without Spark.

Spark hands the options over with their keys lowercased, so every lookup here is
case-insensitive. A wrong or missing option raises NSQOptionError whose text names the
option and what is expected; the data source raises it when the reader or writer is
created, so it surfaces from ``load()``/``start()``/``save()`` or from the query.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from nsqmp.protocol.names import is_valid_name

DEFAULT_MAX_RDY = 2500          # nsqd's --max-rdy-count default
DEFAULT_MSG_TIMEOUT_MS = 300_000
MAX_MSG_TIMEOUT_MS = 900_000    # nsqd's --max-msg-timeout default (15m)
DEFAULT_MAX_MSG_SIZE = 1_048_576  # nsqd's --max-msg-size default
DEFAULT_MAX_BODY_SIZE = 5_242_880  # nsqd's --max-body-size default
DEFAULT_STREAM_IN_FLIGHT = 100_000
DEFAULT_ROWS_PER_PARTITION = 50_000
DEFAULT_BATCH_MAX_MESSAGES = 10_000
MAX_CONNECTIONS_PER_NSQD = 100


class NSQOptionError(ValueError):
    """A missing or invalid option of the nsq data source."""


def _get(options: Mapping[str, str], key: str) -> str | None:
    low = key.lower()
    for k, v in options.items():
        if k.lower() == low:
            return v
    return None


def _int(options: Mapping[str, str], key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    raw = _get(options, key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise NSQOptionError(f"nsq: option {key} must be an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        span = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise NSQOptionError(f"nsq: option {key} must be {span}, got {value}")
    return value


def parse_addresses(raw: str | None) -> tuple[str, ...]:
    """'host:port[,host:port...]' -> ('host:port', ...), each checked."""
    if raw is None or not str(raw).strip():
        raise NSQOptionError(
            "nsq: option nsqd is required: the nsqd TCP address(es), comma-separated, e.g. "
            ".option(\"nsqd\", \"127.0.0.1:4150\")")
    out = []
    for part in str(raw).split(","):
        addr = part.strip()
        if not addr:
            continue
        host, sep, port = addr.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise NSQOptionError(
                f"nsq: option nsqd: bad address {addr!r}; expected host:port (e.g. 127.0.0.1:4150), "
                "several separated by commas")
        out.append(f"{host}:{int(port)}")
    if not out:
        raise NSQOptionError(f"nsq: option nsqd: no address in {raw!r}")
    return tuple(dict.fromkeys(out))


def _name(options: Mapping[str, str], key: str, usage: str) -> str:
    raw = _get(options, key)
    if raw is None or not str(raw).strip():
        raise NSQOptionError(f"nsq: option {key} is required ({usage})")
    name = str(raw).strip()
    if not is_valid_name(name.encode()):
        raise NSQOptionError(
            f"nsq: option {key}: {name!r} is not a valid NSQ {key} name "
            "(1-64 characters of [.a-zA-Z0-9_-], optionally ending in #ephemeral)")
    return name


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


@dataclass(frozen=True)
class ReadOptions:
    addresses: tuple[str, ...]
    topic: str
    channel: str
    msg_timeout_ms: int = DEFAULT_MSG_TIMEOUT_MS
    connect_timeout_ms: int = 5000
    client_id: str = "nsqmp-spark"
    # streaming
    max_messages_per_batch: int | None = None
    max_in_flight: int = DEFAULT_STREAM_IN_FLIGHT     # per nsqd address
    max_rdy: int = DEFAULT_MAX_RDY
    rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION
    poll_timeout_ms: int = 100
    fill_ms: int = 200
    idle_timeout_ms: int = 1000
    # batch
    max_messages: int = DEFAULT_BATCH_MAX_MESSAGES
    partitions_per_nsqd: int = 1
    ack: str = "fin"

    @property
    def connections_per_nsqd(self) -> int:
        return max(1, math.ceil(self.max_in_flight / self.max_rdy))

    @property
    def batch_cap(self) -> int:
        """Most rows one micro-batch takes: the limit, or half the in-flight window of all
        addresses so the next batch can fill while this one is processed."""
        if self.max_messages_per_batch is not None:
            return self.max_messages_per_batch
        return max(1, self.max_in_flight * len(self.addresses) // 2)


def read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    addresses = parse_addresses(_get(options, "nsqd"))
    topic = _name(options, "topic", "the topic to read from")
    channel = _name(options, "channel", "the NSQ channel to consume on; each channel gets every message")
    msg_timeout = _int(options, "msgTimeoutMs", DEFAULT_MSG_TIMEOUT_MS, 1000, MAX_MSG_TIMEOUT_MS)
    max_rdy = _int(options, "maxRdyPerConnection", DEFAULT_MAX_RDY, 1, 1_000_000)
    per_batch = _int(options, "maxMessagesPerBatch", None, 1)
    # the default window is for the whole query, spread over the addresses
    default_in_flight = max(DEFAULT_MAX_RDY, math.ceil(DEFAULT_STREAM_IN_FLIGHT / len(addresses)))
    if per_batch is not None:
        # twice the batch, spread over the addresses: one batch held until Spark commits it,
        # the next one filling meanwhile
        default_in_flight = max(1, math.ceil(2 * per_batch / len(addresses)))
    max_in_flight = _int(options, "maxInFlight", default_in_flight, 1)
    if streaming and math.ceil(max_in_flight / max_rdy) > MAX_CONNECTIONS_PER_NSQD:
        raise NSQOptionError(
            f"nsq: {max_in_flight} messages in flight per nsqd need more than {MAX_CONNECTIONS_PER_NSQD} "
            f"connections of RDY {max_rdy}; lower maxMessagesPerBatch or maxInFlight")
    if streaming and per_batch is not None and per_batch > max_in_flight * len(addresses):
        raise NSQOptionError(
            f"nsq: maxMessagesPerBatch ({per_batch}) is larger than what can be in flight "
            f"(maxInFlight {max_in_flight} x {len(addresses)} nsqd): a batch holds its messages "
            "unacknowledged until Spark commits it")
    max_messages = _int(options, "maxMessages", DEFAULT_BATCH_MAX_MESSAGES, 1)
    partitions_per_nsqd = _int(options, "partitionsPerNsqd", 1, 1, 64)
    share = math.ceil(max_messages / (len(addresses) * partitions_per_nsqd))
    if not streaming and share > MAX_CONNECTIONS_PER_NSQD * max_rdy:
        raise NSQOptionError(
            f"nsq: maxMessages {max_messages} means {share} messages in flight per partition, more than "
            f"{MAX_CONNECTIONS_PER_NSQD} connections of RDY {max_rdy} hold; raise partitionsPerNsqd")
    ack = (_get(options, "ack") or "fin").strip().lower()
    if ack not in ("fin", "requeue"):
        raise NSQOptionError(f"nsq: option ack must be 'fin' or 'requeue', got {ack!r}")
    return ReadOptions(
        addresses=addresses, topic=topic, channel=channel,
        msg_timeout_ms=msg_timeout,
        connect_timeout_ms=_int(options, "connectTimeoutMs", 5000, 1),
        client_id=(_get(options, "clientId") or "nsqmp-spark").strip(),
        max_messages_per_batch=per_batch,
        max_in_flight=max_in_flight,
        max_rdy=max_rdy,
        rows_per_partition=_int(options, "rowsPerPartition", DEFAULT_ROWS_PER_PARTITION, 1),
        poll_timeout_ms=_int(options, "pollTimeoutMs", 100, 0, 60_000),
        fill_ms=_int(options, "batchFillMs", 200, 0, 60_000),
        idle_timeout_ms=_int(options, "idleTimeoutMs", 1000, 1),
        max_messages=max_messages,
        partitions_per_nsqd=partitions_per_nsqd,
        ack=ack,
    )


@dataclass(frozen=True)
class WriteOptions:
    addresses: tuple[str, ...]
    topic: str
    column: str | None
    max_message_size: int = DEFAULT_MAX_MSG_SIZE
    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    batch_size: int = 500
    connect_timeout_ms: int = 5000


def write_options(options: Mapping[str, str]) -> WriteOptions:
    addresses = parse_addresses(_get(options, "nsqd"))
    topic = _name(options, "topic", "the topic to publish to")
    column = _get(options, "column")
    max_size = _int(options, "maxMessageSize", DEFAULT_MAX_MSG_SIZE, 1)
    max_body = _int(options, "maxBodySize", DEFAULT_MAX_BODY_SIZE, 9)
    return WriteOptions(
        addresses=addresses, topic=topic,
        column=column.strip() if column and column.strip() else None,
        max_message_size=max_size, max_body_size=max_body,
        batch_size=_int(options, "batchSize", 500, 1, 100_000),
        connect_timeout_ms=_int(options, "connectTimeoutMs", 5000, 1),
    )


# -- log mode: option("mode", "log") -------------------------------------------------------------
# The topic read as a log over the broker's HTTP API (nsqmp only; nsqmp/spark/log.py), like
# Spark's Kafka source: no channel, no FIN, offsets in the checkpoint. Options:
#   nsqdHttp              the broker's HTTP address (several: alternatives, tried in turn)
#   topic                 the topic
#   startingOffsets       earliest | latest (default) | RFC 3339 time | unix ns |
#                         JSON {"0": "SEQ:OFFSET" | "earliest" | "latest", ...}; a partition
#                         the JSON leaves out, or one that appears later, starts at its earliest
#   endingOffsets         batch reads only: latest (default) | a time | JSON as above
#   maxOffsetsPerTrigger  most records per micro-batch (default: all there are)
#   failOnDataLoss        true (default): fail when records between two offsets are gone
#                         (expired or finished); false: go on from what is retained
#   requestRecords        records per HTTP request of an executor (default 10000)
#   requestBytes          bytes per HTTP request (default 8 MiB)
#   httpTimeoutMs         one request's timeout (default 30000)
#   retryTimeoutMs        how long an executor or the driver retries a broker that does not
#                         answer (an acceptor restarting) before failing (default 60000)
DEFAULT_LOG_REQUEST_RECORDS = 10_000
DEFAULT_LOG_REQUEST_BYTES = 8 << 20


def read_mode(options: Mapping[str, str]) -> str:
    """"channel" (the default: consume through an NSQ channel) or "log"."""
    mode = (_get(options, "mode") or "channel").strip().lower()
    if mode not in ("channel", "log"):
        raise NSQOptionError(f"nsq: option mode must be 'channel' or 'log', got {mode!r}")
    return mode


@dataclass(frozen=True)
class LogOptions:
    http_addresses: tuple[str, ...]
    topic: str
    starting: str = "latest"
    ending: str = "latest"
    max_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    request_records: int = DEFAULT_LOG_REQUEST_RECORDS
    request_bytes: int = DEFAULT_LOG_REQUEST_BYTES
    http_timeout_ms: int = 30_000
    retry_timeout_ms: int = 60_000


def log_options(options: Mapping[str, str], streaming: bool) -> LogOptions:
    raw = _get(options, "nsqdHttp")
    if raw is None or not str(raw).strip():
        raise NSQOptionError(
            "nsq: option nsqdHttp is required in log mode: the broker's HTTP address, e.g. "
            ".option(\"nsqdHttp\", \"127.0.0.1:4151\")")
    addresses = parse_addresses(raw)
    topic = _name(options, "topic", "the topic to read")
    starting = (_get(options, "startingOffsets") or ("latest" if streaming else "earliest")).strip()
    ending = (_get(options, "endingOffsets") or "latest").strip()
    if streaming and _get(options, "endingOffsets") is not None:
        raise NSQOptionError("nsq: option endingOffsets is for batch reads only")
    if starting.lower() == "latest" and not streaming:
        raise NSQOptionError("nsq: startingOffsets latest reads nothing in a batch query")
    fail = (_get(options, "failOnDataLoss") or "true").strip().lower()
    if fail not in ("true", "false"):
        raise NSQOptionError(f"nsq: option failOnDataLoss must be true or false, got {fail!r}")
    return LogOptions(
        http_addresses=addresses, topic=topic, starting=starting, ending=ending,
        max_per_trigger=_int(options, "maxOffsetsPerTrigger", None, 1),
        fail_on_data_loss=fail == "true",
        request_records=_int(options, "requestRecords", DEFAULT_LOG_REQUEST_RECORDS, 1, 100_000),
        request_bytes=_int(options, "requestBytes", DEFAULT_LOG_REQUEST_BYTES, 1024, 64 << 20),
        http_timeout_ms=_int(options, "httpTimeoutMs", 30_000, 100),
        retry_timeout_ms=_int(options, "retryTimeoutMs", 60_000, 0),
    )
