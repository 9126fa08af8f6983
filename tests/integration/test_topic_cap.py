"""max-topic-bytes with both policies."""
from __future__ import annotations

import os
import time

import pytest

from nsqmp.client import Connection, NSQError
from tests.harness import Broker, wait_for


def topic_files(b: Broker, topic: str) -> int:
    """Bytes of the topic's segment files; a file the router deletes while they are
    counted (it deletes on a thread of its own) counts 0."""
    total = 0
    with os.scandir(b.data_path / "topics" / topic) as entries:
        for entry in entries:
            if entry.name.endswith(".seg"):
                try:
                    total += entry.stat().st_size
                except FileNotFoundError:
                    pass
    return total


def test_refuse_policy_refuses_then_recovers(tmp_path):
    b = Broker(tmp_path / "data", "--max-topic-bytes", str(256 * 1024),
               "--max-bytes-per-file", str(64 * 1024)).start()
    try:
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("capped", "ch")
        accepted, refused = 0, None
        conn = Connection.connect(b.tcp_address)
        for i in range(400):
            try:
                conn.mpub("capped", [b"%05d-%d" % (i, k) + b"x" * 1000 for k in range(10)])
                accepted += 10
            except NSQError as exc:
                refused = str(exc)
                break
            time.sleep(0.002)  # pacing: the router's verdict reaches the acceptors within the bound below
        conn.close()
        assert refused == "E_MPUB_FAILED MPUB failed topic full", refused
        assert 200 <= accepted <= 320  # the cap, plus what was in flight when it was reached
        status, body, _ = b.http("POST", "/pub?topic=capped", b"x")
        assert (status, body) == (503, b'{"message":"TOPIC_FULL"}')
        assert b.http("GET", "/ping")[0] == 200  # a full topic is not an unhealthy disk
        # consumers catch up: files go, the topic takes messages again
        got = 0
        with Connection.connect(b.tcp_address, timeout=20) as c:
            c.identify()
            c.sub("capped", "ch", rdy=500)
            while got < accepted:
                c.fin(c.read_message().id)
                got += 1

        def publish_works() -> bool:
            try:
                with Connection.connect(b.tcp_address) as p:
                    p.pub("capped", b"again")
                return True
            except NSQError:
                return False

        wait_for(publish_works, what="publishing allowed again")
    finally:
        assert b.stop() == 0


# mem-queue-size 100: most of the queue is file ranges, not objects (router/filequeue.py)
@pytest.mark.parametrize("extra", [(), ("--mem-queue-size", "100")], ids=["objects", "file-ranges"])
def test_drop_oldest_policy_keeps_the_newest(tmp_path, extra):
    b = Broker(tmp_path / "data", "--max-topic-bytes", str(256 * 1024), *extra,
               "--max-bytes-per-file", str(64 * 1024), "--topic-full-policy", "drop-oldest").start()
    try:
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("ring", "ch")
        sent = []
        with Connection.connect(b.tcp_address) as p:
            for i in range(100):  # ~1 MiB through a 256 KiB cap
                batch = [b"%05d-%d-" % (i, k) + b"x" * 1000 for k in range(10)]
                p.mpub("ring", batch)
                sent += batch

        def stats() -> dict:
            return b.stats(topic="ring")["topics"][0]

        wait_for(lambda: stats()["nsqmp_dropped_count"] > 0, what="drops counted")
        # the router deletes a dropped file on its background thread, after the count
        wait_for(lambda: topic_files(b, "ring") <= 256 * 1024 + 3 * 64 * 1024,
                 what="the dropped files deleted")
        depth = stats()["channels"][0]["depth"]
        dropped = stats()["nsqmp_dropped_count"]
        assert depth + dropped == len(sent)
        # what was dropped stays dropped across a restart
        assert b.stop() == 0
        b = Broker(b.data_path, "--max-topic-bytes", str(256 * 1024), *extra, "--max-bytes-per-file",
                   str(64 * 1024), "--topic-full-policy", "drop-oldest").start()
        assert stats()["channels"][0]["depth"] == depth
        got = []
        with Connection.connect(b.tcp_address, timeout=20) as c:
            c.identify()
            c.sub("ring", "ch", rdy=500)
            while len(got) < depth:
                m = c.read_message()
                got.append(m.body)
                c.fin(m.id)
        assert got and set(got) <= set(sent)
        assert sent[-1] in got  # the newest survive
        print(f"\ndrop-oldest: {dropped} of {len(sent)} dropped, {depth} delivered")
    finally:
        assert b.stop() == 0
