"""Past mem-queue-size, a channel's messages wait in the segment files, not in the router's
memory (nsqmp/router/filequeue.py): every one still arrives, counted right in /stats, and
none is lost when the router is killed with ranges queued."""
from __future__ import annotations

import os
import signal

from nsqmp.client import Connection
from nsqmp.diskqueue.layout import topic_dir as topic_dir_of
from tests.harness import channel_stats, wait_for

BOUND = ("--mem-queue-size", "100")  # the router's smallest in-memory share


def adopted(broker, topic: str) -> int:
    """Messages the topic's router has taken (in memory or as file ranges)."""
    return sum(t["message_count"] for t in broker.stats(topic=topic)["topics"])


def publish(broker, topic: str, n: int, batch: int = 50, share: int = int(BOUND[1])) -> set[bytes]:
    """n messages in MPUBs of batch, and a PUB. Once `share` (the in-memory share) are
    sent, it waits until the router has taken them: a router joins the publishes that
    came while it slept into one batch, and a batch that finds room is taken whole, so
    without the wait the whole backlog could arrive as one batch and stay in memory."""
    bodies = [b"m%06d" % i for i in range(n)]
    with Connection.connect(broker.tcp_address) as p:
        for i in range(0, n, batch):
            if i == share:
                wait_for(lambda: adopted(broker, topic) >= share, what="the in-memory share taken")
            p.mpub(topic, bodies[i:i + batch])
        p.pub(topic, b"single")
    return set(bodies) | {b"single"}


def drain(broker, topic: str, channel: str, expected: int, rdy: int = 37) -> list[bytes]:
    got = []
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub(topic, channel, rdy=rdy)
        for _ in range(expected):
            m = c.read_message()
            got.append(m.body)
            c.fin(m.id)
    # closed: what was in flight beyond `expected` goes back to the queue
    wait_for(lambda: channel_stats(broker, topic, channel)["in_flight_count"] == 0, what="all FINs taken")
    return got


def test_channel_past_its_memory_share_gets_everything(make_broker):
    broker = make_broker(*BOUND)
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub("deep", "a")
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub("deep", "b")
    sent = publish(broker, "deep", 3000)
    for name in ("a", "b"):
        # OK comes once the batch is in the file; the router adopts it just after
        wait_for(lambda: channel_stats(broker, "deep", name)["depth"] == len(sent), what="adopted")
        st = channel_stats(broker, "deep", name)
        assert st["depth"] == len(sent) and st["message_count"] == len(sent)
        assert 0 < st["backend_depth"] < len(sent)  # most of it is still in the files
    got = drain(broker, "deep", "a", len(sent))
    assert set(got) == sent and len(got) == len(sent)
    st = channel_stats(broker, "deep", "a")
    assert (st["depth"], st["backend_depth"], st["in_flight_count"]) == (0, 0, 0)
    # the other channel still holds its own copy of every message
    assert channel_stats(broker, "deep", "b")["depth"] == len(sent)
    assert set(drain(broker, "deep", "b", len(sent), rdy=1000)) == sent
    assert broker.stats(topic="deep")["topics"][0]["message_count"] == len(sent)


def test_backlog_before_any_channel_goes_to_the_first(make_broker):
    broker = make_broker(*BOUND)
    sent = publish(broker, "early", 2000)
    wait_for(lambda: broker.stats(topic="early")["topics"][0]["depth"] == len(sent), what="adopted")
    t = broker.stats(topic="early")["topics"][0]
    assert t["depth"] == len(sent) and t["backend_depth"] > 0
    got = drain(broker, "early", "first", len(sent))
    assert sorted(got) == sorted(sent)
    assert broker.stats(topic="early")["topics"][0]["depth"] == 0


def test_finished_files_are_deleted_after_a_deep_queue(make_broker):
    broker = make_broker(*BOUND, "--max-bytes-per-file", "65536")
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub("roll", "ch")
    sent = publish(broker, "roll", 4000)
    topic_dir = topic_dir_of(str(broker.data_path), "roll")
    assert len([f for f in os.listdir(topic_dir) if f.endswith(".seg")]) > 2
    drain(broker, "roll", "ch", len(sent), rdy=500)
    # only each acceptor's newest file may stay
    wait_for(lambda: len([f for f in os.listdir(topic_dir) if f.endswith(".seg")]) <= 2,
             what="finished segments deleted")


def test_router_killed_with_ranges_queued_loses_nothing(make_broker):
    broker = make_broker(*BOUND)
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub("kill", "ch")
    sent = publish(broker, "kill", 3000)
    half = drain(broker, "kill", "ch", 1000, rdy=100)
    for title, pid in broker.children().items():
        if title.startswith("nsqmp router"):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: channel_stats(broker, "kill", "ch")["depth"] >= len(sent) - len(half),
             what="recovered depth", timeout=20)
    rest = drain(broker, "kill", "ch", channel_stats(broker, "kill", "ch")["depth"], rdy=200)
    assert set(half) | set(rest) == sent  # at least once: FINs not yet logged may come back


def test_backlog_bench_runs(capsys):
    """`nsqmp bench backlog` with tiny parameters (figures are not checked, counts are)."""
    import json

    from nsqmp.bench import backlog

    assert backlog.main(["--messages", "3000", "--size", "50", "--flag=--mem-queue-size=100"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["channel"] for r in lines] == [True, False]
    for r in lines:
        assert (r["depth"], r["recovered_depth"]) == (3000, 3000)
        assert r["pss_idle_kib"] > 0 and r["pss_queued_kib"] > 0
        assert len(r["router_pss_kib"]) == 2


def test_idle_channel_goes_to_the_files_while_another_keeps_up(make_broker):
    """A channel nobody reads is not held in memory because another channel is drained."""
    broker = make_broker(*BOUND)
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub("two", "idle")
    with Connection.connect(broker.tcp_address) as reader:
        reader.identify()
        reader.sub("two", "busy", rdy=1000)
        got = []
        with Connection.connect(broker.tcp_address) as p:
            for i in range(40):
                bodies = [b"%02d-%03d" % (i, k) for k in range(50)]
                p.mpub("two", bodies)
                for _ in bodies:  # the busy channel keeps up: its queue stays short
                    m = reader.read_message()
                    got.append(m.body)
                    reader.fin(m.id)
    assert len(set(got)) == 2000
    idle = channel_stats(broker, "two", "idle")
    assert idle["depth"] == 2000 and idle["backend_depth"] >= 2000 - 200, idle
    assert set(drain(broker, "two", "idle", 2000, rdy=300)) == set(got)
