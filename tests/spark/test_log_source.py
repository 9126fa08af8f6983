"""format("nsq") with mode=log: a topic read as a log (nsqmp/spark/log.py) in a real local[2]
Spark session against a real broker with two acceptors (two partitions) and small segment
files (the reads cross files). Offsets, checkpoints, two queries, a kill -9 under a read.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.harness import Broker, wait_for
from tests.spark.conftest import SKIP_REASON
from tests.spark.helpers import channel_stats, make_channel, publish

pytestmark = [
    pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or ""),
]


@pytest.fixture
def logbroker(tmp_path):
    # spread: publishers on both acceptors, so the log has two partitions to read
    b = Broker(tmp_path / "data", "--acceptors", "2", "--max-bytes-per-file", "16384",
               "--acceptor-steering", "spread").start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        assert b.stop() == 0, b.log_text()


def _spread(broker: Broker, topic: str, bodies: list[bytes], conns: int = 6) -> None:
    """Publish from several connections (SO_REUSEPORT spreads them over the acceptors), in
    small MPUBs (several segment files per stream)."""
    for i in range(conns):
        publish(broker.tcp_address, topic, bodies[i::conns], batch=40)


def _bodies(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i:06d}".encode() + b"." * 60 for i in range(n)]


def _log_df(spark, broker: Broker, topic: str, streaming: bool, **options):
    reader = spark.readStream if streaming else spark.read
    reader = reader.format("nsq").option("mode", "log").option("nsqdHttp", broker.http_address).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _run(df, out: Path, ckpt: Path, timeout: float = 180) -> list:
    q = (df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(timeout), "availableNow query did not finish"
    assert q.exception() is None, q.exception()
    return q.recentProgress


def _rows(spark, out: Path) -> list:
    if not out.exists() or not any(out.glob("*.parquet")):
        return []
    return spark.read.parquet(str(out)).select("body", "partition", "offset").collect()


@pytest.mark.slow
def test_offsets_two_queries_and_channels_untouched(spark, logbroker, tmp_path):
    make_channel(logbroker.tcp_address, "lg", "keep")  # a channel nobody reads: its depth must not move
    first = _bodies("a", 1200)
    _spread(logbroker, "lg", first)
    time.sleep(0.05)
    between = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    time.sleep(0.05)
    second = _bodies("b", 300)
    _spread(logbroker, "lg", second)
    depth = channel_stats(logbroker, "lg", "keep")["depth"]
    assert depth == 1500

    whole = _log_df(spark, logbroker, "lg", False).collect()
    assert sorted(r.body for r in whole) == sorted(first + second)
    assert len({(r.partition, r.offset) for r in whole}) == 1500
    assert {r.topic for r in whole} == {"lg"} and all(r.deferred_until is None for r in whole)

    since = _log_df(spark, logbroker, "lg", False, startingOffsets=between).collect()
    assert sorted(r.body for r in since) == sorted(second)

    # two streaming queries, each with its own checkpoint, small batches: the same rows
    got = []
    for name in ("q1", "q2"):
        df = _log_df(spark, logbroker, "lg", True, startingOffsets="earliest", maxOffsetsPerTrigger=400)
        progress = _run(df, tmp_path / name, tmp_path / f"{name}-ckpt")
        assert len([p for p in progress if p["numInputRows"]]) >= 4
        got.append(sorted(r.body for r in _rows(spark, tmp_path / name)))
    assert got[0] == got[1] == sorted(first + second)

    # latest: nothing that was there before the query started
    df = _log_df(spark, logbroker, "lg", True, startingOffsets="latest")
    _run(df, tmp_path / "late", tmp_path / "late-ckpt")
    assert _rows(spark, tmp_path / "late") == []
    publish(logbroker.tcp_address, "lg", [b"after"])
    _run(_log_df(spark, logbroker, "lg", True, startingOffsets="latest"), tmp_path / "late", tmp_path / "late-ckpt")
    assert [r.body for r in _rows(spark, tmp_path / "late")] == [b"after"]

    ch = channel_stats(logbroker, "lg", "keep")
    assert ch["depth"] == 1501 and ch["in_flight_count"] == 0 and ch["message_count"] == 1501
    assert [c["channel_name"] for t in logbroker.stats()["topics"] if t["topic_name"] == "lg"
            for c in t["channels"]] == ["keep"]


@pytest.mark.slow
def test_restart_from_checkpoint_continues_exactly(spark, logbroker, tmp_path):
    _spread(logbroker, "rs", _bodies("a", 900))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    _run(_log_df(spark, logbroker, "rs", True, startingOffsets="earliest", maxOffsetsPerTrigger=250), out, ckpt)
    assert len(_rows(spark, out)) == 900
    _spread(logbroker, "rs", _bodies("b", 500))
    # the same checkpoint: a new reader object, the query resumes from the stored offsets
    _run(_log_df(spark, logbroker, "rs", True, startingOffsets="earliest", maxOffsetsPerTrigger=250), out, ckpt)
    rows = _rows(spark, out)
    assert sorted(r.body for r in rows) == sorted(_bodies("a", 900) + _bodies("b", 500))


@pytest.mark.slow
def test_kill_an_acceptor_while_reading(spark, logbroker, tmp_path):
    bodies = _bodies("k", 12000)
    _spread(logbroker, "kl", bodies, conns=8)
    stop = threading.Event()
    kills = []

    def killer() -> None:
        while not stop.is_set() and len(kills) < 4:
            time.sleep(0.3)  # pacing: let the readers get going between kills
            for title in ("nsqmp acceptor 0", "nsqmp acceptor 1"):
                if stop.is_set():
                    return
                pid = logbroker.children().get(title)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    kills.append(title)
                    wait_for(lambda: logbroker.children().get(title) not in (None, pid), timeout=10)
                time.sleep(0.3)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    try:
        # many small requests, so the kills land in the middle of the reads
        df = _log_df(spark, logbroker, "kl", True, startingOffsets="earliest", maxOffsetsPerTrigger=2000,
                     requestRecords=20)
        _run(df, tmp_path / "out", tmp_path / "ckpt")
    finally:
        stop.set()
        th.join(20)
    assert len(kills) >= 2, kills  # both acceptors died at least once while the query read
    rows = _rows(spark, tmp_path / "out")
    assert len(rows) == len(bodies)
    assert sorted(r.body for r in rows) == sorted(bodies)


def test_options_of_log_mode():
    from nsqmp.spark.options import NSQOptionError, log_options, read_mode

    assert read_mode({}) == "channel" and read_mode({"MODE": "Log"}) == "log"
    with pytest.raises(NSQOptionError, match="mode must be 'channel' or 'log'"):
        read_mode({"mode": "tail"})
    with pytest.raises(NSQOptionError, match="nsqdHttp is required in log mode"):
        log_options({"topic": "t"}, streaming=True)
    with pytest.raises(NSQOptionError, match="endingOffsets is for batch reads only"):
        log_options({"nsqdhttp": "127.0.0.1:4151", "topic": "t", "endingoffsets": "latest"}, streaming=True)
    with pytest.raises(NSQOptionError, match="failOnDataLoss must be true or false"):
        log_options({"nsqdhttp": "127.0.0.1:4151", "topic": "t", "failondataloss": "maybe"}, streaming=True)
    o = log_options({"nsqdhttp": "127.0.0.1:4151", "topic": "t"}, streaming=False)
    assert (o.starting, o.ending, o.fail_on_data_loss, o.max_per_trigger) == ("earliest", "latest", True, None)
    assert log_options({"nsqdhttp": "127.0.0.1:4151", "topic": "t"}, streaming=True).starting == "latest"


def test_json_offsets_and_data_loss(spark, logbroker, tmp_path):
    bodies = _bodies("j", 400)
    publish(logbroker.tcp_address, "dl", bodies, batch=40)  # one connection: one stream
    (part, end), = logbroker.get("/topic/offsets?topic=dl")["partitions"].items()
    rows = _log_df(spark, logbroker, "dl", False, startingOffsets=f'{{"{part}": "1:64"}}').collect()
    files = sorted((logbroker.data_path / "topics" / "dl").glob(f"{int(part):02d}.*.seg"))
    assert 0 < len(rows) < 400 and all(not r.offset.startswith("0:") for r in rows)
    assert sorted(r.body for r in rows) == sorted(bodies)[400 - len(rows):]
    ending = _log_df(spark, logbroker, "dl", False, endingOffsets=f'{{"{part}": "1:64"}}').collect()
    assert len(ending) + len(rows) == 400
    os.unlink(files[0])  # expired: a query that had to start there lost data
    earlier = f'{{"{part}": "0:64"}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        _log_df(spark, logbroker, "dl", False, startingOffsets=earlier).collect()
    kept = _log_df(spark, logbroker, "dl", False, startingOffsets=earlier, failOnDataLoss="false").collect()
    assert len(kept) == len(rows)
