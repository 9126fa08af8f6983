"""`nsqmp bench rewind`: how long a rewind of a big retained topic takes to start delivering.

Starts a fresh broker with retention on (temporary data dir, default flags plus
--flag ...), publishes --messages messages of --size bytes by MPUB with the bench writer
(nsqmp.bench.tool), consumes and FINs them all on one channel with the bench reader, so
that every segment file is finished and kept. Then a consumer subscribes (RDY 1) and the
bench times, for each point (`earliest`, then the time of the middle message):

- answer: POST /channel/rewind until its 200;
- first: POST /channel/rewind until the consumer has the first replayed message.

Prints one JSON object per point. The issue's target: first < 1 s for 10,000,000 messages.

    nsqmp bench rewind [--messages 10000000] [--size 10] [--flag=--max-bytes-per-file=104857600]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import orjson

from nsqmp.bench import tool
from nsqmp.bench.commands import ShowDefaults
from nsqmp.client.sync import Connection
from nsqmp.launcher import Broker

TOPIC, CHANNEL = "rewind_bench", "ch"


def _publish(broker: Broker, messages: int, size: int) -> int:
    """At least `messages` messages through the bench writer, in runs of a few seconds."""
    sent = 0
    while sent < messages:
        args = SimpleNamespace(nsqd_tcp_address=broker.tcp_address, topic=TOPIC, runfor=3.0, size=size,
                               conns=2, batch_size=200)
        sent += tool.run("writer", args)["messages"]
    return sent


def _consume(broker: Broker, messages: int) -> float:
    """Every message FINed on the channel by the bench reader; seconds taken."""
    args = SimpleNamespace(nsqd_tcp_address=broker.tcp_address, topic=TOPIC, channel=CHANNEL, runfor=3600.0,
                           size=0, conns=1, rdy=2500, max_messages=messages)
    return tool.run("reader", args)["seconds"]


def _drained(broker: Broker) -> None:
    while True:
        ch = broker.stats(topic=TOPIC)["topics"][0]["channels"][0]
        if ch["depth"] == 0 and ch["in_flight_count"] == 0:
            return
        time.sleep(0.2)


def _rfc3339(ns: int) -> str:
    return (datetime.fromtimestamp(ns // 10**9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
            + ".%09dZ" % (ns % 10**9))


def _time_rewind(broker: Broker, to: str) -> dict:
    """A consumer with RDY 1, the rewind, the first message: the two times."""
    with Connection.connect(broker.tcp_address, timeout=60) as c:
        c.identify()
        c.sub(TOPIC, CHANNEL, rdy=1)
        started = time.monotonic()
        status, body, _ = broker.http("POST", f"/channel/rewind?topic={TOPIC}&channel={CHANNEL}&to={to}", timeout=60)
        answered = time.monotonic()
        if status != 200:
            raise SystemExit(f"rewind failed: {status} {body!r}")
        m = c.read_message()
        first = time.monotonic()
        c.fin(m.id)
        # the channel's own id changed with the rewind: empty it again for the next point
    broker.http("POST", f"/channel/empty?topic={TOPIC}&channel={CHANNEL}")
    answer = orjson.loads(body)
    return {"to": to, "replayed": answer["messages"], "answer_ms": round((answered - started) * 1000, 1),
            "first_message_ms": round((first - started) * 1000, 1)}


def one(messages: int, size: int, flags: list[str], workdir: Path) -> list[dict]:
    """The whole run on a fresh broker: one result per rewind point."""
    broker = Broker(workdir / "data", "--retention-bytes", "1TB", *flags, log_path=workdir / "broker.log").start()
    try:
        broker.http("POST", f"/topic/create?topic={TOPIC}")
        broker.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")
        t0 = time.monotonic()
        sent = _publish(broker, messages, size)
        published = time.monotonic() - t0
        middle = time.time_ns() - int(published / 2 * 1e9)  # about half of them after it
        consumed = _consume(broker, sent)
        _drained(broker)
        time.sleep(2.5)  # the last acks reach the log, the files are kept (sync-timeout)
        stats = broker.stats(topic=TOPIC)["topics"][0]
        base = {"messages": sent, "size": size, "flags": flags, "publish_s": round(published, 1),
                "consume_s": round(consumed, 1), "retained_files": stats.get("nsqmp_retained_files"),
                "retained_bytes": stats.get("nsqmp_retained_bytes")}
        return [{**base, **_time_rewind(broker, to)} for to in ("earliest", _rfc3339(middle))]
    finally:
        code = broker.stop(timeout=120)
        if code != 0:
            raise SystemExit(f"broker exited with {code}; log in {workdir / 'broker.log'}")


def main(argv: list[str] | None = None) -> int:
    """`nsqmp bench rewind`."""
    p = argparse.ArgumentParser(formatter_class=ShowDefaults, prog="nsqmp bench rewind")
    p.add_argument("--messages", type=int, default=10_000_000)
    p.add_argument("--size", type=int, default=10)
    p.add_argument("--flag", action="append", default=[], help="a broker flag (repeat)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nsqmp-rewind-") as tmp:
        for result in one(args.messages, args.size, args.flag, Path(tmp)):
            sys.stdout.write(orjson.dumps(result).decode() + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
