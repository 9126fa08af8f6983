"""Crash suite: under continuous publishing and consuming, kill -9 each kind of broker
process in turn, then all of them at once, for several rounds. Every message a publisher
got OK for must be delivered afterwards: losses 0; duplicates are counted and reported.

CI runs a short version; `pytest tests/crash --crash-rounds 20` runs a long one.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from nsqmp.client import Connection, NSQError
from tests.harness import Broker, wait_for

TOPICS = ["crash-a", "crash-b", "crash-c"]
CHANNEL = "sink"


class Publisher(threading.Thread):
    """MPUBs numbered batches; remembers exactly which bodies got OK."""

    def __init__(self, index: int, addr_fn, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.index = index
        self.addr_fn = addr_fn
        self.stop = stop
        self.acked: set[bytes] = set()
        self.attempted = 0
        self.errors = 0

    def run(self) -> None:
        seq = 0
        conn = None
        while not self.stop.is_set():
            topic = TOPICS[seq % len(TOPICS)]
            batch = [b"p%d-%d-%d" % (self.index, seq, k) for k in range(20)]
            try:
                if conn is None:
                    conn = Connection.connect(self.addr_fn(), timeout=5)
                self.attempted += len(batch)
                if seq % 7 == 0:
                    for body in batch[:5]:  # some single PUBs too
                        conn.pub(topic, body)
                        self.acked.add(body)
                    conn.mpub(topic, batch[5:])
                    self.acked.update(batch[5:])
                else:
                    conn.mpub(topic, batch)
                    self.acked.update(batch)
                seq += 1
            except (OSError, EOFError, NSQError):
                self.errors += 1
                if conn is not None:
                    conn.close()
                conn = None
                seq += 1  # never reuse the bodies of a batch whose fate is unknown
                time.sleep(0.05)  # pacing: the client's back-off before it reconnects
        if conn is not None:
            conn.close()


class Consumer(threading.Thread):
    """Subscribes to one topic, FINs everything, reconnects after any failure."""

    def __init__(self, topic: str, addr_fn, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.addr_fn = addr_fn
        self.stop = stop
        self.received: list[bytes] = []
        self.reconnects = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with Connection.connect(self.addr_fn(), timeout=2) as c:
                    c.identify(msg_timeout=5000)
                    c.sub(self.topic, CHANNEL, rdy=200)
                    while not self.stop.is_set():
                        try:
                            m = c.read_message()
                        except TimeoutError:
                            continue
                        except NSQError as exc:
                            if "E_FIN_FAILED" in str(exc):
                                continue  # a FIN that reached a restarted router: harmless
                            raise
                        self.received.append(m.body)
                        c.fin(m.id)
            except (OSError, EOFError, NSQError):
                self.reconnects += 1
                time.sleep(0.05)  # pacing: the client's back-off before it reconnects


def _kill_child(broker: Broker, title: str) -> None:
    old = broker.children().get(title)
    if old is None:
        return
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: broker.children().get(title) not in (None, old), timeout=10, what=f"new {title}")


def run_suite(tmp_path, rounds: int, extra: tuple[str, ...] = ()) -> dict:
    b = Broker(tmp_path / "data", "--acceptors", "2", "--routers", "2", *extra,
               "--max-bytes-per-file", str(256 * 1024)).start()
    state = {"broker": b}

    def addr() -> str:
        return state["broker"].tcp_address

    # channels first, so every message has a channel to reach
    for t in TOPICS:
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub(t, CHANNEL)
    stop_pub = threading.Event()
    stop_sub = threading.Event()
    pubs = [Publisher(i, addr, stop_pub) for i in range(2)]
    subs = [Consumer(t, addr, stop_sub) for t in TOPICS]
    for th in pubs + subs:
        th.start()
    victims = ["nsqmp acceptor 0", "nsqmp router 0", "nsqmp timer", "nsqmp acceptor 1", "nsqmp router 1"]
    kills = 0
    try:
        for r in range(rounds):
            for title in victims:
                time.sleep(0.4)  # pacing: traffic between two kills
                _kill_child(state["broker"], title)
                kills += 1
            time.sleep(0.4)  # pacing: traffic before the whole group is killed
            # everything at once: the whole process group, then a restart on the same ports
            old = state["broker"]
            old.kill()
            kills += 1
            state["broker"] = Broker(old.data_path, "--acceptors", "2", "--routers", "2", *extra,
                                     "--max-bytes-per-file", str(256 * 1024),
                                     "--tcp-address", old.tcp_address,
                                     "--http-address", old.http_address).start()
        time.sleep(0.5)  # pacing: traffic on the last restarted broker
        stop_pub.set()
        for th in pubs:
            th.join(10)
        acked = set().union(*(p.acked for p in pubs))

        def delivered() -> set[bytes]:
            return set().union(*(set(s.received) for s in subs))

        # wait until every acknowledged message has been delivered (or give up and report)
        try:
            wait_for(lambda: acked <= delivered(), 60, interval=0.2, what="every acknowledged message")
        except TimeoutError:
            pass  # the result below says what never came
        stop_sub.set()
        for th in subs:
            th.join(10)
        got = [body for s in subs for body in s.received]
        got_set = set(got)
        return {
            "rounds": rounds,
            "kills": kills,
            "acked": len(acked),
            "attempted": sum(p.attempted for p in pubs),
            "lost": len(acked - got_set),
            "lost_sample": sorted(acked - got_set)[:10],
            "delivered": len(got),
            "duplicates": len(got) - len(got_set),
            "unacked_delivered": len(got_set - acked),
            "publish_errors": sum(p.errors for p in pubs),
            "consumer_reconnects": sum(s.reconnects for s in subs),
        }
    finally:
        stop_pub.set()
        stop_sub.set()
        if state["broker"].proc.poll() is None:
            state["broker"].stop()


@pytest.mark.slow
# mem-queue-size 100: queues are mostly file ranges read back from the segments
@pytest.mark.parametrize("extra", [(), ("--mem-queue-size", "100")], ids=["objects", "file-ranges"])
def test_nothing_acknowledged_is_lost_across_crashes(tmp_path, request, extra):
    rounds = request.config.getoption("--crash-rounds") or 3
    tally = run_suite(tmp_path, rounds, extra)
    print("\ncrash suite tally:", tally)
    assert tally["acked"] > 1000, tally
    assert tally["lost"] == 0, tally
