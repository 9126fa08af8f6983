"""Rows/s through the nsq streaming source, into the noop sink and into Parquet.

    .venv/bin/python -m nsqmp.bench.spark                      # own broker, 1,000,000 x 200 B, both sinks
    .venv/bin/python -m nsqmp.bench.spark --nsqd 127.0.0.1:4150 --messages 500000 --sink noop
    .venv/bin/python -m nsqmp.bench.spark --source both --sink noop   # mode=log against the channel

--source: "channel" (the default: consume on channel "spark"), "log" (mode=log: the topic
read as a log over HTTP, no channel; maxOffsetsPerTrigger = --max-per-batch) or "both": the
log read first, then the channel read, of the same published topic.

For each sink: publish N messages to a fresh topic (one connection, MPUB of --batch-size,
as `nsqmp bench writer` does), then drain them with a streaming query
(trigger availableNow, maxMessagesPerBatch) and report:

* wall: N / (start() to termination), including query start-up and the final idle wait;
* steady: rows / triggerExecution time summed over the batches after the first (the
  first batch pays for planning and the workers' start).

A small warm-up query runs first so the JVM's first-query cost is not in the figures.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson

from nsqmp.bench.commands import ShowDefaults
from nsqmp.client import wire
from nsqmp.client.sync import Connection

_EXTRA: dict[str, str] = {}


def _publish(address: str, topic: str, n: int, size: int, batch: int) -> float:
    with Connection.connect(address, timeout=60) as c:
        c.identify()
        c.sub(topic, "spark")            # create the channel first: it gets every message
    started = time.monotonic()
    with Connection.connect(address, timeout=60) as c:
        pad = b"x" * size
        sent = 0
        while sent < n:
            k = min(batch, n - sent)
            bodies = [(b"%012d" % (sent + i) + pad)[:size] for i in range(k)]
            c.send(wire.mpub(topic, bodies))
            c.expect_ok()
            sent += k
    return n / (time.monotonic() - started)


def _drain(spark, address: str, topic: str, sink: str, out: Path, max_per_batch: int,
           source: str = "channel", http_address: str = "") -> dict:
    if source == "log":
        df = (spark.readStream.format("nsq").option("mode", "log").option("nsqdHttp", http_address)
              .option("topic", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", max_per_batch).options(**_EXTRA).load())
    else:
        df = (spark.readStream.format("nsq").option("nsqd", address).option("topic", topic)
              .option("channel", "spark").option("maxMessagesPerBatch", max_per_batch)
              .option("idleTimeoutMs", 1000).options(**_EXTRA).load())
    name = f"{topic}-{source}"
    writer = df.writeStream.format(sink).option("checkpointLocation", str(out / f"{name}-ckpt"))
    if sink == "parquet":
        writer = writer.option("path", str(out / name))
    started = time.monotonic()
    q = writer.trigger(availableNow=True).start()
    q.awaitTermination()
    wall = time.monotonic() - started
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    later = progress[1:]
    steady_rows = sum(p["numInputRows"] for p in later)
    steady_ms = sum(p["durationMs"]["triggerExecution"] for p in later)
    return {
        "source": source, "sink": sink, "rows": rows, "batches": len(progress), "wall_s": round(wall, 2),
        "wall_rows_per_s": round(rows / wall),
        "steady_rows_per_s": round(steady_rows / (steady_ms / 1000)) if steady_ms else None,
        "batch_rows": [p["numInputRows"] for p in progress],
        "batch_ms": [p["durationMs"]["triggerExecution"] for p in progress],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nsqmp bench spark", formatter_class=ShowDefaults,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--nsqd", help="nsqd TCP address; default: start a private broker on 127.0.0.1")
    p.add_argument("--nsqd-http", help="the broker's HTTP address (--source log/both with --nsqd)")
    p.add_argument("--source", choices=("channel", "log", "both"), default="channel",
                   help="read through a channel, as a log (mode=log), or both on the same topic")
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=200, help="message size in bytes")
    p.add_argument("--batch-size", type=int, default=200, help="messages per MPUB")
    p.add_argument("--sink", choices=("noop", "parquet", "both"), default="both")
    p.add_argument("--max-per-batch", type=int, default=100_000, help="maxMessagesPerBatch")
    p.add_argument("--warmup", type=int, default=20_000, help="messages of the warm-up query (0: none)")
    p.add_argument("--json", action="store_true", help="print one JSON line per result too")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="extra option of the nsq source (repeatable)")
    args = p.parse_args(argv)
    _EXTRA.update(kv.split("=", 1) for kv in args.option)

    from nsqmp.spark.local import local_session

    work = Path(tempfile.mkdtemp(prefix="nsqmp-spark-bench-"))
    broker = None
    try:
        address, http_address = args.nsqd, args.nsqd_http or ""
        if address is None:
            from nsqmp.launcher import Broker

            broker = Broker(work / "broker-data").start()
            address, http_address = broker.tcp_address, broker.http_address
        sources = ("log", "channel") if args.source == "both" else (args.source,)
        if "log" in sources and not http_address:
            raise SystemExit("--source log needs --nsqd-http with --nsqd")
        spark = local_session("nsqmp-spark-bench", scratch=work / "scratch")
        stamp = int(time.time())
        if args.warmup:
            _publish(address, f"spark_bench_warmup_{stamp}", args.warmup, args.size, args.batch_size)
            for source in sources:
                _drain(spark, address, f"spark_bench_warmup_{stamp}", "noop", work, args.max_per_batch,
                       source, http_address)
        sinks = ("noop", "parquet") if args.sink == "both" else (args.sink,)
        for sink in sinks:
            topic = f"spark_bench_{sink}_{stamp}"
            pub_rate = _publish(address, topic, args.messages, args.size, args.batch_size)
            for source in sources:  # the log first: it leaves the channel's messages where they are
                result = _drain(spark, address, topic, sink, work, args.max_per_batch, source, http_address)
                result.update(messages=args.messages, size=args.size, publish_msgs_per_s=round(pub_rate))
                print(f"[spark_bench] source={source} sink={sink} messages={args.messages} size={args.size}B "
                      f"batches={result['batches']} wall={result['wall_s']}s "
                      f"wall_rate={result['wall_rows_per_s']} rows/s steady_rate={result['steady_rows_per_s']} rows/s "
                      f"(published at {result['publish_msgs_per_s']} msgs/s)", flush=True)
                if args.json:
                    sys.stdout.write(orjson.dumps(result).decode() + "\n")
        spark.stop()
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
