"""A cluster on loopback: three real brokers registered with two real lookupds, and real
clients (pynsq, gnsq) that are given nothing but the lookupds' HTTP addresses.
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import nsq
import orjson
import pytest

from tests.harness import await_for, wait_for
from tests.lookupd.brokers import node, post

ROOT = Path(__file__).resolve().parents[2]
PER_BROKER = 150


@pytest.fixture
def cluster(make_lookupd, make_broker):
    """start(*lookupd_flags) -> ([lookupd, lookupd], [broker, broker, broker])."""

    def start(*lookupd_flags: str):
        lookupds = [make_lookupd("-broadcast-address=127.0.0.1", *lookupd_flags) for _ in range(2)]
        brokers = []
        for n in range(3):
            args = ["--broadcast-address", "127.0.0.1", "--acceptors", "2", "--routers", "1",
                    "--node-id", str(10 * (n + 1))]  # message ids stay unique across the cluster
            for lookupd in lookupds:
                args += ["--lookupd-tcp-address", lookupd.tcp_address]
            brokers.append(make_broker(*args))
        return lookupds, brokers

    return start


def producers(lookupd, topic: str) -> list[int]:
    """tcp ports of the producers /lookup gives a consumer, sorted."""
    return sorted(p["tcp_port"] for p in lookupd.get(f"/lookup?topic={topic}")["producers"])


def ports(brokers) -> list[int]:
    return sorted(b.tcp_port for b in brokers)


def create_everywhere(lookupds, brokers, topic: str, channel: str | None = None) -> None:
    for b in brokers:
        post(b, f"/topic/create?topic={topic}")
        if channel:
            post(b, f"/channel/create?topic={topic}&channel={channel}")
    for lookupd in lookupds:
        wait_for(lambda lookupd=lookupd: producers(lookupd, topic) == ports(brokers),
                 what=f"{topic} on every broker, as {lookupd.http_address} sees it")


def clients_on(broker, topic: str, channel: str) -> int:
    topics = broker.stats(topic=topic, channel=channel)["topics"]
    chans = topics[0]["channels"] if topics else []
    return chans[0]["client_count"] if chans else 0


def test_pynsq_and_gnsq_find_every_broker_and_consume_every_message(cluster):
    lookupds, brokers = cluster()
    create_everywhere(lookupds, brokers, "events")
    lookupd_http = [f"http://{lookupd.http_address}" for lookupd in lookupds]
    bodies = {k: [f"broker{k}-message{i}".encode() for i in range(PER_BROKER)] for k in range(3)}
    everything = sorted(b for batch in bodies.values() for b in batch)

    gnsq = subprocess.Popen(
        [sys.executable, "-m", "tests.lookupd.gnsq_consume", "events", "gnsq", str(len(everything)), "90",
         *lookupd_http],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        async def scenario() -> list[bytes]:
            loop = asyncio.get_running_loop()
            got: list[bytes] = []
            done = asyncio.Event()

            def handler(message: nsq.Message) -> bool:
                got.append(message.body)
                if len(got) >= len(everything):
                    done.set()
                return True

            reader = nsq.Reader("events", "pynsq", handler, lookupd_http_addresses=lookupd_http,
                                max_in_flight=100, lookupd_poll_interval=1)
            try:
                def everyone_connected() -> bool:
                    return all(clients_on(b, "events", ch) == 1 for b in brokers for ch in ("pynsq", "gnsq"))

                for _ in range(600):  # both clients on all three brokers, found through the lookupds
                    if await loop.run_in_executor(None, everyone_connected):
                        break
                    await asyncio.sleep(0.1)  # polling: /stats is read off the loop, in the executor
                else:
                    raise TimeoutError("the clients did not connect to every broker")
                for k, b in enumerate(brokers):
                    status, text, _ = await loop.run_in_executor(
                        None, b.http, "POST", "/mpub?topic=events", b"\n".join(bodies[k]))
                    assert (status, text) == (200, b"OK")
                await asyncio.wait_for(done.wait(), 60)
                await asyncio.sleep(0.5)  # a duplicate would arrive now: the time is what is tested
                assert len(reader.conns) == 3
            finally:
                reader.connect_to_nsqd = lambda *a, **k: None  # no reconnect after close
                reader.close()
                await await_for(lambda: not reader.conns, what="pynsq to see its connections closed")
            return got

        got_pynsq = asyncio.run(scenario())
        out, err = gnsq.communicate(timeout=120)
    finally:
        if gnsq.poll() is None:
            os.killpg(gnsq.pid, signal.SIGKILL)
            gnsq.wait(10)
    assert sorted(got_pynsq) == everything
    assert gnsq.returncode == 0, err.decode()[-3000:]
    got_gnsq = [s.encode("latin-1") for s in orjson.loads(out.decode().splitlines()[-1])]
    assert sorted(got_gnsq) == everything


def test_a_broker_killed_with_kill_9_disappears_from_lookup(cluster):
    """kill -9 of a whole broker (its process group) closes its lookupd connections: each
    lookupd drops it, well before any inactive timeout; the others stay."""
    lookupds, brokers = cluster("-inactive-producer-timeout=60s")
    create_everywhere(lookupds, brokers, "orders", "billing")
    victim, survivors = brokers[2], brokers[:2]
    victim.kill()
    for lookupd in lookupds:
        wait_for(lambda lookupd=lookupd: producers(lookupd, "orders") == ports(survivors), what="victim gone")
        assert node(lookupd, victim) is None
        assert all(node(lookupd, b) is not None for b in survivors)


def test_a_tombstoned_producer_is_hidden_for_the_tombstone_lifetime(cluster):
    lookupds, brokers = cluster("-tombstone-lifetime=3s")
    create_everywhere(lookupds, brokers, "audit")
    target, others = brokers[1], [brokers[0], brokers[2]]
    for lookupd in lookupds:
        status, text, _ = lookupd.http("POST", f"/topic/tombstone?topic=audit&node=127.0.0.1:{target.http_port}")
        assert status == 200, text
    for lookupd in lookupds:
        # hidden from consumers, still a node (nsqadmin shows the tombstone)
        assert producers(lookupd, "audit") == ports(others)
        tombstoned = node(lookupd, target)
        assert dict(zip(tombstoned["topics"], tombstoned["tombstones"]))["audit"] is True
    # the broker is still connected and registered: once the tombstone expires it is back
    for lookupd in lookupds:
        wait_for(lambda lookupd=lookupd: producers(lookupd, "audit") == ports(brokers), timeout=15,
                 what="the producer back after the tombstone lifetime")


def test_a_topic_deleted_on_lookupds_and_brokers_does_not_come_back(cluster):
    """nsqadmin's delete: on every lookupd, then on every broker. Nothing registers it
    again, not even registrars that reconnect and send their whole list."""
    lookupds, brokers = cluster()
    create_everywhere(lookupds, brokers, "doomed", "c")
    create_everywhere(lookupds, brokers, "kept")
    for lookupd in lookupds:
        assert lookupd.http("POST", "/topic/delete?topic=doomed")[0] == 200
    for b in brokers:
        post(b, "/topic/delete?topic=doomed")
    for lookupd in lookupds:
        assert lookupd.http("GET", "/lookup?topic=doomed")[:2] == (404, b'{"message":"TOPIC_NOT_FOUND"}')

    # every broker's acceptor 0 starts again: new connections, full lists
    old = {(lookupd.http_port, b.tcp_port): node(lookupd, b)["remote_address"] for lookupd in lookupds for b in brokers}
    for b in brokers:
        os.kill(b.children()["nsqmp acceptor 0"], signal.SIGKILL)
    for lookupd in lookupds:
        for b in brokers:
            wait_for(lambda lookupd=lookupd, b=b: (node(lookupd, b) or {}).get("remote_address")
                     not in (None, old[(lookupd.http_port, b.tcp_port)]), what="reconnected")
        wait_for(lambda lookupd=lookupd: producers(lookupd, "kept") == ports(brokers), what="kept re-registered")
        assert "doomed" not in lookupd.get("/topics")["topics"]
        assert lookupd.http("GET", "/lookup?topic=doomed")[0] == 404
    for b in brokers:
        assert [t["topic_name"] for t in b.stats()["topics"]] == ["kept"]
