"""Parquet -> topic: back-fill an NSQ topic from Parquet files with a batch write.

    make run                                                  # broker on 127.0.0.1:4150 (other terminal)
    .venv/bin/python examples/parquet_to_topic.py             # nsq-parquet/ -> topic events_backfill

Reads --input (default: what examples/topic_to_parquet.py wrote; with --demo N, or when
--input does not exist, it first writes N sample rows there) and publishes the --column
of every row as one message, from the executors, in MPUBs. A row larger than the broker's
max message size (1 MiB by default) fails the job with the row's size and the limit.
"""
from __future__ import annotations

import argparse
import os
import sys

from nsqmp.spark.local import local_session


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nsqd", default="127.0.0.1:4150", help="nsqd TCP address(es), comma-separated")
    p.add_argument("--topic", default="events_backfill")
    p.add_argument("--input", default="nsq-parquet")
    p.add_argument("--column", default="body", help="binary or string column that becomes the message body")
    p.add_argument("--demo", type=int, default=0, help="first write this many sample rows to --input")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args(argv)

    spark = local_session("parquet-to-topic", master=args.master, log_level="WARN")
    demo = args.demo or (0 if os.path.exists(args.input) else 1000)
    if demo:
        print(f"writing {demo} sample rows to {args.input}/", flush=True)
        (spark.range(demo)
         .selectExpr("cast(to_json(named_struct('n', id, 'kind', 'demo')) as binary) as body")
         .write.mode("append").parquet(args.input))
    df = spark.read.parquet(args.input)
    count = df.count()
    (df.select(args.column).write.format("nsq")
     .mode("append")
     .option("nsqd", args.nsqd)
     .option("topic", args.topic)
     .save())
    print(f"published {count} rows of {args.input}/ ({args.column}) to topic {args.topic} on {args.nsqd}",
          flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
