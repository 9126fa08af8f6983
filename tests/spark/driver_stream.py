"""A Spark driver in its own process: topic -> streaming query -> Parquet, with a checkpoint.

The kill test starts it with sys.executable in a new session (process group), SIGKILLs
it mid-stream, then starts it again with --available-now on the same checkpoint so it
drains what is left and exits. Progress goes to stdout, one JSON line per micro-batch.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nsqd", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--channel", default="spark")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--scratch", required=True)
    p.add_argument("--max-per-batch", type=int, default=5000)
    p.add_argument("--available-now", action="store_true")
    args = p.parse_args(argv)

    from nsqmp.spark.local import local_session

    spark = local_session("nsqmp-driver-stream", scratch=args.scratch)
    df = (spark.readStream.format("nsq")
          .option("nsqd", args.nsqd).option("topic", args.topic).option("channel", args.channel)
          .option("maxMessagesPerBatch", args.max_per_batch)
          .option("idleTimeoutMs", 2000)
          .load())
    writer = (df.writeStream.format("parquet")
              .option("path", args.output).option("checkpointLocation", args.checkpoint))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="0 seconds")
    query = writer.start()
    print(json.dumps({"event": "started", "id": query.id, "t": time.time()}), flush=True)
    last = -1
    while query.isActive:
        query.awaitTermination(0.5)
        for prog in query.recentProgress:
            if prog["batchId"] > last:
                last = prog["batchId"]
                print(json.dumps({"event": "progress", "batch": last,
                                  "rows": prog["numInputRows"], "t": time.time()}), flush=True)
    if query.exception() is not None:
        print(json.dumps({"event": "failed", "error": str(query.exception())}), flush=True)
        return 1
    print(json.dumps({"event": "done", "t": time.time()}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
