"""Topic -> Spark -> Parquet: a streaming query that lands NSQ messages in Parquet files.

    make run                                                  # broker on 127.0.0.1:4150 (other terminal)
    .venv/bin/nsqmp bench writer --topic events --runfor 2    # something to read
    .venv/bin/python examples/topic_to_parquet.py --available-now

Without --available-now the query runs until Ctrl-C, a micro-batch every --trigger
seconds. Each message is FIN'd only after Spark committed the batch that carried it, so
stopping or killing this script loses nothing: the next run (same --checkpoint) gets
what was not yet committed again. Rows: id, body (binary), timestamp, attempts, topic;
the files are partitioned by the hour of the NSQ timestamp.
"""
from __future__ import annotations

import argparse
import sys

from nsqmp.spark.local import local_session


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nsqd", default="127.0.0.1:4150", help="nsqd TCP address(es), comma-separated")
    p.add_argument("--topic", default="events")
    p.add_argument("--channel", default="parquet")
    p.add_argument("--output", default="nsq-parquet")
    p.add_argument("--checkpoint", default="nsq-parquet-checkpoint")
    p.add_argument("--max-per-batch", type=int, default=50_000, help="maxMessagesPerBatch")
    p.add_argument("--trigger", type=float, default=5.0, help="seconds between micro-batches")
    p.add_argument("--available-now", action="store_true", help="drain what is in the topic, then stop")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args(argv)

    spark = local_session("topic-to-parquet", master=args.master, log_level="WARN")
    messages = (spark.readStream.format("nsq")
                .option("nsqd", args.nsqd)
                .option("topic", args.topic)
                .option("channel", args.channel)
                .option("maxMessagesPerBatch", args.max_per_batch)
                .load())
    rows = messages.selectExpr("*", "date_format(timestamp, 'yyyy-MM-dd-HH') as hour")
    writer = (rows.writeStream.format("parquet")
              .option("path", args.output)
              .option("checkpointLocation", args.checkpoint)
              .partitionBy("hour"))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger} seconds")
    query = writer.start()
    print(f"reading {args.topic}/{args.channel} from {args.nsqd} into {args.output}/ "
          f"({'until drained' if args.available_now else 'Ctrl-C to stop'})", flush=True)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    total = sum(p["numInputRows"] for p in query.recentProgress)
    print(f"{total} messages in the last {len(query.recentProgress)} micro-batches", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
