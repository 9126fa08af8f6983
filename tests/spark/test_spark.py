"""format("nsq") in a real local[2] Spark session against the real broker.

One SparkSession for the whole module (conftest.spark); brokers are real nsqmp
processes (nsqmp.launcher.Broker) on 127.0.0.1, port 0 unless a test needs a fixed one.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.harness import Broker, wait_for
from tests.spark.conftest import SKIP_REASON
from tests.spark.helpers import channel_stats, make_channel, publish

pytestmark = [
    pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or ""),
]

HERE = Path(__file__).parent


def _bodies(n: int, prefix: str = "m", size: int = 200) -> list[bytes]:
    return [(f"{prefix}{i:09d}-".encode() + b"x" * size)[:size] for i in range(n)]


def _read_stream(spark, address: str, topic: str, channel: str = "spark", **options):
    reader = (spark.readStream.format("nsq").option("nsqd", address)
              .option("topic", topic).option("channel", channel))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _run_available_now(df, tmp_path: Path, fmt: str = "parquet", name: str = "out", timeout: float = 240):
    out, ckpt = tmp_path / name, tmp_path / f"{name}-checkpoint"
    q = (df.writeStream.format(fmt).option("path", str(out)).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(timeout), "availableNow query did not finish"
    assert q.exception() is None, q.exception()
    return q, out


def _query_error(df, tmp_path: Path, timeout: float = 120) -> str:
    """Start a streaming query that must fail; return the error text, wherever it surfaced."""
    from pyspark.errors import PySparkException

    try:
        q = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "err-ckpt"))
             .trigger(availableNow=True).start())
        q.awaitTermination(timeout)
    except PySparkException as exc:  # StreamingQueryException, AnalysisException, ...
        return str(exc)
    raise AssertionError("the query did not fail")


# -- wrong options ---------------------------------------------------------------------------
def test_wrong_options_fail_with_a_clear_message(spark, broker, tmp_path):
    missing_topic = (spark.readStream.format("nsq").option("nsqd", broker.tcp_address)
                     .option("channel", "c").load())
    assert "nsq: option topic is required" in _query_error(missing_topic, tmp_path / "a")

    bad_address = _read_stream(spark, "localhost-4150", "t")
    assert "nsq: option nsqd: bad address 'localhost-4150'; expected host:port" in _query_error(
        bad_address, tmp_path / "b")

    unreachable = _read_stream(spark, "127.0.0.1:1", "t", connectTimeoutMs=2000)
    assert "nsq: cannot connect to nsqd 127.0.0.1:1" in _query_error(unreachable, tmp_path / "c")

    with pytest.raises(Exception, match="nsq: option channel is required"):
        spark.read.format("nsq").option("nsqd", broker.tcp_address).option("topic", "t").load().collect()

    df = spark.createDataFrame([(1, "a")], "n int, s string")
    with pytest.raises(Exception, match=r"nsq: which column holds the message body\?"):
        df.write.format("nsq").mode("append").option("nsqd", broker.tcp_address).option("topic", "t").save()
    with pytest.raises(Exception, match=r"nsq: a topic cannot be overwritten, only appended to"):
        df.write.format("nsq").mode("overwrite").option("nsqd", broker.tcp_address).option("topic", "t").save()
    with pytest.raises(Exception, match=r"nsq: column 'n' is int; the message body must be binary or string"):
        (df.write.format("nsq").mode("append").option("nsqd", broker.tcp_address).option("topic", "t")
         .option("column", "n").save())


# -- streaming read ------------------------------------------------------------------------------
def test_empty_topic_available_now_finishes_with_no_rows(spark, broker, tmp_path):
    make_channel(broker.tcp_address, "empty", "spark")
    started = time.monotonic()
    q, out = _run_available_now(_read_stream(spark, broker.tcp_address, "empty", idleTimeoutMs=500), tmp_path)
    took = time.monotonic() - started
    assert sum(p["numInputRows"] for p in q.recentProgress) == 0
    assert spark.read.schema("id string").parquet(str(out)).count() == 0
    print(f"empty topic: availableNow finished in {took:.1f}s")


def test_100k_messages_to_parquet_exactly_once_without_failures(spark, broker, tmp_path):
    n = 100_000
    bodies = _bodies(n)
    make_channel(broker.tcp_address, "hundredk", "spark")
    publish(broker.tcp_address, "hundredk", bodies)
    df = _read_stream(spark, broker.tcp_address, "hundredk", maxMessagesPerBatch=30000)
    started = time.monotonic()
    q, out = _run_available_now(df, tmp_path)
    took = time.monotonic() - started
    per_batch = [p["numInputRows"] for p in q.recentProgress]
    assert max(per_batch) <= 30000, per_batch
    assert sum(per_batch) == n
    result = spark.read.parquet(str(out))
    assert result.schema.simpleString() == (
        "struct<id:string,body:binary,timestamp:timestamp,attempts:int,topic:string>")
    rows = result.select("body").collect()
    got = [bytes(r.body) for r in rows]
    assert len(got) == n, f"{len(got) - len(set(got))} duplicates"
    assert set(got) == set(bodies)
    assert result.where("attempts != 1 or topic != 'hundredk'").count() == 0
    # everything was acknowledged: nothing queued, nothing in flight
    wait_for(lambda: (channel_stats(broker, "hundredk", "spark") or {}).get("in_flight_count") == 0,
             timeout=20, what="all FIN'd")
    assert channel_stats(broker, "hundredk", "spark")["depth"] == 0
    print(f"100k to Parquet: {took:.1f}s wall including query start, batches {per_batch}")


def test_several_nsqd_addresses(spark, make_broker, tmp_path):
    a, b = make_broker(), make_broker()
    for broker, prefix in ((a, "a"), (b, "b")):
        make_channel(broker.tcp_address, "multi", "spark")
        publish(broker.tcp_address, "multi", _bodies(1500, prefix, 40))
    both = f"{a.tcp_address}, {b.tcp_address}"
    q, out = _run_available_now(_read_stream(spark, both, "multi", idleTimeoutMs=500, maxMessagesPerBatch=1000),
                                tmp_path)
    got = [bytes(r.body) for r in spark.read.parquet(str(out)).select("body").collect()]
    want = _bodies(1500, "a", 40) + _bodies(1500, "b", 40)
    assert sorted(got) == sorted(want)
    assert max(p["numInputRows"] for p in q.recentProgress) <= 1000


# -- batch read and write ------------------------------------------------------------------------
def test_batch_read_drains_up_to_n_then_stops_when_idle(spark, broker):
    make_channel(broker.tcp_address, "batchr", "spark")
    publish(broker.tcp_address, "batchr", _bodies(700, "r"))

    def read(max_messages: int):
        return (spark.read.format("nsq").option("nsqd", broker.tcp_address).option("topic", "batchr")
                .option("channel", "spark").option("maxMessages", max_messages)
                .option("idleTimeoutMs", 500).load().collect())

    first = read(500)
    assert len(first) == 500
    rest = read(1000)          # only 200 left: stops once the topic is idle
    assert len(rest) == 200
    assert {bytes(r.body) for r in first + rest} == set(_bodies(700, "r"))
    wait_for(lambda: channel_stats(broker, "batchr", "spark")["in_flight_count"] == 0, what="FIN'd")
    assert channel_stats(broker, "batchr", "spark")["depth"] == 0


def test_batch_write_publishes_a_column_and_refuses_oversized_rows(spark, broker):
    make_channel(broker.tcp_address, "batchw", "c")
    df = spark.createDataFrame([(i, f"v{i}") for i in range(2000)], "n int, value string").repartition(2)
    df.write.format("nsq").mode("append").option("nsqd", broker.tcp_address).option("topic", "batchw").save()
    wait_for(lambda: channel_stats(broker, "batchw", "c")["depth"] == 2000, what="2000 published")

    big = spark.createDataFrame([("ok",), ("x" * 5000,)], "body string")
    with pytest.raises(Exception, match=r"nsq: row \d+ \(column 'body'\) is 5000 bytes, larger than the max "
                                        r"message size 4096 bytes"):
        (big.write.format("nsq").mode("append").option("nsqd", broker.tcp_address).option("topic", "batchw")
         .option("maxMessageSize", 4096).save())


def test_stream_write_topic_to_topic(spark, broker, tmp_path):
    make_channel(broker.tcp_address, "src", "spark")
    make_channel(broker.tcp_address, "dst", "c")
    publish(broker.tcp_address, "src", _bodies(3000, "s", 50))
    df = _read_stream(spark, broker.tcp_address, "src", idleTimeoutMs=500).selectExpr("upper(cast(body as string)) as value")
    q = (df.writeStream.format("nsq").option("nsqd", broker.tcp_address).option("topic", "dst")
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert q.exception() is None
    wait_for(lambda: channel_stats(broker, "dst", "c")["depth"] == 3000, what="3000 republished")


# -- the broker restarts under a running query -----------------------------------------------------
def test_broker_restart_during_a_query(spark, tmp_path):
    data = tmp_path / "data"
    first = Broker(data).start()
    port, http_port = first.tcp_port, first.http_port
    address = first.tcp_address
    make_channel(address, "restart", "spark")
    before = _bodies(500, "before")
    publish(address, "restart", before)
    df = _read_stream(spark, address, "restart")
    q = (df.writeStream.format("memory").queryName("restart_rows")
         .trigger(processingTime="200 milliseconds").start())
    second = None
    try:
        def seen() -> set[bytes]:
            return {bytes(r.body) for r in spark.sql("select body from restart_rows").collect()}

        wait_for(lambda: set(before) <= seen(), timeout=90, interval=0.5, what="the first 500 messages")
        assert first.stop() == 0
        time.sleep(1.0)                       # the query runs on without a broker
        assert q.isActive and q.exception() is None
        second = Broker(data, "--tcp-address", f"127.0.0.1:{port}",
                        "--http-address", f"127.0.0.1:{http_port}").start()
        make_channel(address, "restart", "spark")
        after = _bodies(500, "after")
        publish(address, "restart", after)
        # reconnects (backoff up to 5 s) and consumes what was published after the restart;
        # what the first run still had queued may or may not come back (durability work)
        wait_for(lambda: set(after) <= seen(), timeout=90, interval=0.5, what="messages published after the restart")
        assert q.isActive and q.exception() is None
        assert set(before) <= seen()
    finally:
        q.stop()
        for b in (first, second):
            if b is not None and b.proc is not None and b.proc.poll() is None:
                assert b.stop() == 0, b.log_text()[-3000:]


# -- kill -9 of the driver, restart from the checkpoint --------------------------------------------
def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _kill_driver(proc: subprocess.Popen) -> set[int]:
    """SIGKILL the driver's process group (it was started in its own session) and every
    process it spawned (the JVM, and pyspark's daemon, which moves to its own group), then
    wait until all of them are gone."""
    victims = _descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)
    # processes SIGKILLed get reaped by init once their parent is gone
    wait_for(lambda: not any(_alive(p) for p in victims), timeout=30, what="the driver's processes to exit")
    return victims


def _driver(args: list[str], log: Path, scratch: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, str(HERE / "driver_stream.py"), *args, "--scratch", str(scratch)],
                                stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=str(HERE.parent.parent), start_new_session=True)


@pytest.mark.slow
def test_kill_driver_mid_batch_then_restart_from_checkpoint(spark, broker, tmp_path):
    n = 60_000
    bodies = _bodies(n, "k", 100)
    make_channel(broker.tcp_address, "killme", "spark")
    publish(broker.tcp_address, "killme", bodies)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    common = ["--nsqd", broker.tcp_address, "--topic", "killme", "--checkpoint", str(ckpt),
              "--output", str(out), "--max-per-batch", "4000"]
    log = tmp_path / "driver.log"

    proc = _driver(common, log, tmp_path / "scratch1")
    try:
        def mid_batch() -> bool:
            # at least two batches committed, and the next one planned but not committed
            offsets = {p.name for p in (ckpt / "offsets").glob("[0-9]*")} if (ckpt / "offsets").exists() else set()
            commits = {p.name for p in (ckpt / "commits").glob("[0-9]*")} if (ckpt / "commits").exists() else set()
            return len(commits) >= 2 and bool(offsets - commits)

        wait_for(lambda: mid_batch() or proc.poll() is not None, timeout=120, interval=0.02,
                 what="a batch in progress")
        assert proc.poll() is None, log.read_text()[-4000:]
    finally:
        victims = _kill_driver(proc)
    committed = len(list((ckpt / "commits").glob("[0-9]*")))
    planned = len(list((ckpt / "offsets").glob("[0-9]*")))
    print(f"killed the driver (pid {proc.pid}, {len(victims)} processes) with {committed} batches "
          f"committed and {planned} planned")
    assert planned > committed

    proc = _driver(common + ["--available-now"], log, tmp_path / "scratch2")
    try:
        assert proc.wait(200) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            _kill_driver(proc)
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(e["event"] == "done" for e in events)

    rows = spark.read.parquet(str(out)).select("body", "id", "attempts").collect()
    counts = Counter(bytes(r.body) for r in rows)
    missing = set(bodies) - set(counts)
    assert not missing, f"{len(missing)} messages lost, e.g. {sorted(missing)[:3]}"
    assert set(counts) == set(bodies)
    duplicates = {b: c for b, c in counts.items() if c > 1}
    redelivered = sum(1 for r in rows if r.attempts > 1)
    print(f"after kill -9 and restart: {len(rows)} rows for {n} messages, {len(duplicates)} duplicated "
          f"({sum(duplicates.values()) - len(duplicates)} extra rows), {redelivered} rows with attempts > 1")
    for body, count in sorted(duplicates.items())[:10]:
        print(f"  duplicate x{count}: {body[:12].decode()}...")
    # a duplicate can only be a redelivery: same NSQ message id, attempts > 1 on the extra copy
    by_body_ids = {}
    for r in rows:
        by_body_ids.setdefault(bytes(r.body), set()).add(r.id)
    assert all(len(ids) == 1 for ids in by_body_ids.values())
