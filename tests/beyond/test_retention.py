"""Retention (issue 23, replay): finished segment files kept by time and by bytes, deleted
as today when off, known again after a restart, and shown in /stats."""
from __future__ import annotations

import os
import time

from nsqmp.client import Connection
from tests.harness import Broker, wait_for

FILE = 64 * 1024
BODY = b"x" * 500


def seg_files(b: Broker, topic: str) -> list[str]:
    d = b.data_path / "topics" / topic
    return sorted(f for f in os.listdir(d) if f.endswith(".seg"))


def publish_and_consume(b: Broker, topic: str, n: int) -> None:
    """n messages through one connection (one acceptor stream), all finished on channel c."""
    with Connection.connect(b.tcp_address) as c:
        c.identify()
        c.sub(topic, "c", rdy=500)
        with Connection.connect(b.tcp_address) as p:
            for i in range(0, n, 100):
                p.mpub(topic, [b"%06d" % k + BODY for k in range(i, min(n, i + 100))])
        for _ in range(n):
            c.fin(c.read_message().id)
    wait_for(lambda: b.stats(topic=topic)["topics"][0]["channels"][0]["in_flight_count"] == 0,
             what="every message finished")


def topic_stats(b: Broker, topic: str) -> dict:
    return b.stats(topic=topic)["topics"][0]


def test_off_deletes_finished_files_as_today(tmp_path):
    b = Broker(tmp_path / "data", "--max-bytes-per-file", str(FILE), "--sync-timeout", "200ms").start()
    try:
        publish_and_consume(b, "plain", 1000)  # ~8 files
        # every finished file goes but each acceptor's newest
        wait_for(lambda: len(seg_files(b, "plain")) <= 2, what=f"files deleted: {seg_files(b, 'plain')}")
        assert not any(k.startswith("nsqmp_retained") for k in topic_stats(b, "plain"))
    finally:
        assert b.stop() == 0


def test_retention_bytes_keeps_the_newest_within_the_budget_and_survives_a_restart(tmp_path):
    budget = 3 * FILE
    args = ("--max-bytes-per-file", str(FILE), "--retention-bytes", str(budget), "--sync-timeout", "200ms")
    b = Broker(tmp_path / "data", *args).start()
    try:
        publish_and_consume(b, "kept", 1000)

        def settled() -> dict | None:
            # (files go on the syncing thread, just after /stats stops counting them)
            t = topic_stats(b, "kept")
            return t if (0 < t["nsqmp_retained_bytes"] <= budget and t["nsqmp_retained_files"] >= 2
                         and len(seg_files(b, "kept")) == t["nsqmp_retained_files"] + 1) else None

        # the kept files are the newest finished ones, plus the one still written to
        t = wait_for(settled, what="retained bytes within the budget")
        files = seg_files(b, "kept")
        seqs = [int(f.split(".")[1]) for f in files]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) and seqs[0] > 0
        assert t["nsqmp_retained_oldest_ts"] > 0
        assert b.stop() == 0
        b.start()  # graceful restart: the same files are known (kept) again
        t2 = topic_stats(b, "kept")
        assert (t2["nsqmp_retained_bytes"], t2["nsqmp_retained_files"]) == (
            t["nsqmp_retained_bytes"], t["nsqmp_retained_files"])
        assert t2["depth"] == 0 and t2["channels"][0]["depth"] == 0  # nothing delivered again
        assert seg_files(b, "kept") == files
    finally:
        assert b.stop() == 0


def test_retention_time_keeps_then_deletes(tmp_path):
    b = Broker(tmp_path / "data", "--max-bytes-per-file", str(FILE), "--retention-time", "3s",
               "--sync-timeout", "200ms").start()
    try:
        publish_and_consume(b, "aging", 1000)
        done = time.monotonic()
        t = topic_stats(b, "aging")
        assert t["nsqmp_retained_files"] >= 5, t  # every finished file is kept for now
        assert len(seg_files(b, "aging")) == t["nsqmp_retained_files"] + 1
        wait_for(lambda: topic_stats(b, "aging")["nsqmp_retained_files"] == 0
                 and len(seg_files(b, "aging")) == 1, timeout=15, what="kept files past retention-time deleted")
        assert time.monotonic() - done > 1.5  # kept for (about) retention-time first
    finally:
        assert b.stop() == 0


def test_per_topic_retention_set_at_run_time_persists_and_turns_off(tmp_path):
    b = Broker(tmp_path / "data", "--max-bytes-per-file", str(FILE), "--sync-timeout", "200ms").start()
    try:
        for path, status, body in [
            ("/topic/retention?topic=own&bytes=1MB", 404, b'{"message":"TOPIC_NOT_FOUND"}'),
            ("/topic/retention?bytes=1MB", 400, b'{"message":"MISSING_ARG_TOPIC"}'),
        ]:
            assert b.http("POST", path)[:2] == (status, body), path
        assert b.http("POST", "/topic/create?topic=own")[0] == 200
        assert b.http("POST", "/topic/retention?topic=own&time=soon")[:2] == (400, b'{"message":"INVALID_VALUE"}')
        assert b.http("GET", "/topic/retention?topic=own&time=1h")[0] == 405
        assert b.http("POST", "/topic/retention?topic=own&time=1h&bytes=1MB")[:2] == (200, b"")
        publish_and_consume(b, "own", 1000)
        publish_and_consume(b, "other", 1000)  # the flags' default (off) for every other topic
        t = topic_stats(b, "own")
        assert t["nsqmp_retained_files"] >= 5 and len(seg_files(b, "own")) == t["nsqmp_retained_files"] + 1
        wait_for(lambda: len(seg_files(b, "other")) <= 2, what="the other topic's files deleted")
        assert b.stop() == 0
        b.start()  # kept in meta.json: the files are kept again
        assert topic_stats(b, "own")["nsqmp_retained_files"] == t["nsqmp_retained_files"]
        assert b.http("POST", "/topic/retention?topic=own&time=0&bytes=0")[0] == 200  # off: they go now
        wait_for(lambda: len(seg_files(b, "own")) == 1, what="kept files deleted")
        assert "nsqmp_retained_files" not in topic_stats(b, "own")
    finally:
        assert b.stop() == 0
