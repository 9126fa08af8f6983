"""A real cluster for the admin's browser tests: one lookupd, two nsqmp brokers (or NSQ's
nsqd and nsqlookupd 1.3.0) registered with it, real publishers and consumers (nsqmp.client), and the admin started
as `nsqmp admin` behind a base path. Also run by hand to look at the UI:
``python -m tests.admin.browser.cluster`` prints the admin's URL and waits.
"""
from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nsqmp.client import Connection, wire
from nsqmp.launcher import Broker
from nsqmp.lookupd.launcher import Lookupd
from tests.admin.adminproc import Admin as AdminProcess
from tests.admin.browser.godaemons import GoLookupd, GoNsqd

BASE_PATH = "/ops/nsq"  # the UI must work behind a prefix
XSS_AGENT = "<img src=x onerror=alert(1)>"
CSRF_TOKEN = "browser-test-token"


class Admin(AdminProcess):
    """`nsqmp admin` (tests/admin/adminproc.py) behind BASE_PATH: its pages' URL, its API below it."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{BASE_PATH}"

    def api(self, path: str) -> dict:
        """GET BASE_PATH + path (200 required) as JSON."""
        return self.get(BASE_PATH + path)


class Consumer:
    """A subscribed client that takes `take` messages, finishes `finish` of them and keeps
    the rest in flight (its RDY then equals its in-flight count, so nothing more comes); a
    thread answers the heartbeats so it stays connected for the whole module."""

    def __init__(self, broker: Broker, topic: str, channel: str, *, client_id: str, user_agent: str,
                 take: int, finish: int) -> None:
        self.conn = Connection.connect(broker.tcp_address)
        self.conn.identify(client_id=client_id, hostname=f"{client_id}.example", user_agent=user_agent,
                           msg_timeout=600_000)
        self.conn.sub(topic, channel, rdy=take)
        self.held = []
        for _ in range(take):
            msg = self.conn.read_message()
            if len(self.held) < take - finish:
                self.held.append(msg)
            else:
                self.conn.fin(msg.id)
        self.conn.send(wire.rdy(take - finish))
        self.conn.sock.settimeout(None)
        self.thread = threading.Thread(target=self._heartbeats, daemon=True)
        self.thread.start()

    def _heartbeats(self) -> None:
        try:
            while True:
                self.conn.read_frame()  # answers _heartbeat_ with NOP
        except (OSError, EOFError, ValueError):
            return

    def close(self) -> None:
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()
        self.thread.join(5)


class FlaggedReaders:
    """pynsq Readers on broker:topic/channel with snappy, deflate and a sample rate, on an
    event loop of their own: clients whose attributes the channel page must show."""

    KINDS = {"snappy": {"snappy": True}, "deflate": {"deflate": True}, "sampled": {"sample_rate": 50}}

    def __init__(self, broker: Broker, topic: str, channel: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.readers: list = []
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(broker.tcp_address, topic, channel, started),
                                       daemon=True)
        self.thread.start()
        started.wait(10)

    def _run(self, address: str, topic: str, channel: str, started: threading.Event) -> None:
        import nsq

        from tests.pynsq_shim import patch_compressed_reads

        patch_compressed_reads()  # pynsq #258: a read ending inside a compressed frame drops it

        async def create() -> None:
            for kind, opts in self.KINDS.items():
                self.readers.append(nsq.Reader(topic, channel, lambda m: True, nsqd_tcp_addresses=[address],
                                               max_in_flight=1, user_agent=f"pynsq-{kind}", **opts))

        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(create())
        started.set()
        self.loop.run_forever()
        self.loop.close()

    def close(self) -> None:
        def stop() -> None:
            for r in self.readers:
                r.connect_to_nsqd = lambda *a, **k: None  # no reconnect after close
                r.close()
            self.loop.call_later(0.3, self.loop.stop)

        self.loop.call_soon_threadsafe(stop)
        self.thread.join(5)


@dataclass
class Cluster:
    lookupd: Lookupd
    brokers: list[Broker]
    admin: Admin
    consumers: list[Consumer]
    flagged: FlaggedReaders

    def stop(self) -> list[str]:
        """Stop everything started; the failures (non-zero exits) as text."""
        failures = []
        self.flagged.close()
        for c in self.consumers:
            c.close()
        for name, proc in [("admin", self.admin)] + [(f"broker {b.http_address}", b) for b in self.brokers] \
                + [("lookupd", self.lookupd)]:
            if proc.proc is not None and proc.proc.poll() is None:
                code = proc.stop()
                if code != 0:
                    failures.append(f"{name} exited {code}")
        if "Traceback" in self.admin.log_text():  # a bug caught somewhere is still a bug
            failures.append(f"the admin logged a traceback:\n{self.admin.log_text()[-4000:]}")
        return failures


def http_post(broker: Broker, path: str) -> None:
    status, body, _ = broker.http("POST", path)
    assert status == 200, (path, status, body)


def start_cluster(root: Path, *admin_args: str, nsq: str = "nsqmp") -> Cluster:
    """The cluster of the browser tests, in a known state:
    - topic "orders" on both brokers, channel "billing" on both, 30 + 20 messages; on each
      broker one consumer of billing has taken 10 and finished 6 (4 in flight);
    - on broker 0, channel "audit" of orders with the XSS user agent's consumer;
    - topic "events" on broker 1 only (channel "archive");
    - topic "flagged" on broker 0, channel "flags": pynsq readers with snappy, deflate and a
      sample rate (FlaggedReaders);
    - the brokers report e2e processing latency p99 and p50.
    nsq="nsqd": the same with NSQ's nsqd and nsqlookupd 1.3.0 (tests/admin/browser/godaemons.py).
    If any step fails, what was started is stopped before the error goes up.
    """
    root.mkdir(parents=True, exist_ok=True)
    daemons: list = []
    clients: list = []
    try:
        lookupd = new_lookupd(nsq, root)
        daemons.append(lookupd)
        brokers = []
        for n in range(2):
            brokers.append(new_broker(nsq, root, n, lookupd))
            daemons.insert(0, brokers[-1])  # stopped before the lookupd
        populate(brokers)
        for n, b in enumerate(brokers):
            clients.append(Consumer(b, "orders", "billing", client_id=f"billing-{n}", user_agent="nsqmp-test/1.0",
                                    take=10, finish=6))
        clients.append(Consumer(brokers[0], "orders", "audit", client_id="audit-0", user_agent=XSS_AGENT,
                                take=2, finish=1))
        flagged = FlaggedReaders(brokers[0], "flagged", "flags")
        wait_clients(brokers[0], "flagged", "flags", len(FlaggedReaders.KINDS))
        wait_registered(lookupd, {"orders": 2, "events": 1, "flagged": 1})
        admin = Admin(root / "admin.log", "--base-path", BASE_PATH, "--csrf-token", CSRF_TOKEN,
                      "--lookupd-http-address", lookupd.http_address, *admin_args).start()
    except BaseException:
        for c in clients:
            c.close()
        for d in daemons:
            if d.proc is not None and d.proc.poll() is None:
                d.stop()
        raise
    return Cluster(lookupd, brokers, admin, clients, flagged)


def new_lookupd(nsq: str, root: Path):
    """A started lookupd: nsqmp's, or nsqlookupd 1.3.0 for nsq="nsqd"."""
    if nsq == "nsqd":
        return GoLookupd(log_path=root / "lookupd.log").start()
    return Lookupd("-broadcast-address=127.0.0.1", log_path=root / "lookupd.log").start()


def new_broker(nsq: str, root: Path, n: int, lookupd):
    """Started broker n (node id n + 1, e2e p99 and p50) registered with lookupd."""
    if nsq == "nsqd":
        return GoNsqd(root / f"data{n}", f"-node-id={n + 1}", "-e2e-processing-latency-percentile=0.99,0.5",
                      f"-lookupd-tcp-address={lookupd.tcp_address}", log_path=root / f"data{n}.log").start()
    return Broker(root / f"data{n}", "--broadcast-address", "127.0.0.1", "--node-id", str(n + 1),
                  "--acceptors", "1", "--routers", "1",
                  "--e2e-processing-latency-percentile", "0.99", "--e2e-processing-latency-percentile", "0.5",
                  "--lookupd-tcp-address", lookupd.tcp_address).start()


def populate(brokers: list[Broker]) -> None:
    """The topics, channels and messages start_cluster describes."""
    for b in brokers:
        http_post(b, "/topic/create?topic=orders")
        http_post(b, "/channel/create?topic=orders&channel=billing")
    http_post(brokers[0], "/channel/create?topic=orders&channel=audit")
    http_post(brokers[1], "/topic/create?topic=events")
    http_post(brokers[1], "/channel/create?topic=events&channel=archive")
    http_post(brokers[0], "/topic/create?topic=flagged")
    http_post(brokers[0], "/channel/create?topic=flagged&channel=flags")
    for b, count in zip(brokers, (30, 20)):
        with Connection.connect(b.tcp_address) as pub:
            pub.identify(client_id="publisher")
            pub.mpub("orders", [f"order {i}".encode() for i in range(count)])
            if b is brokers[1]:
                pub.mpub("events", [b"e"] * 5)


def wait_clients(broker, topic: str, channel: str, count: int, timeout: float = 20.0) -> None:
    """Until `count` clients are subscribed to topic/channel on broker."""
    def subscribed() -> int:
        return sum(len(c["clients"]) for t in broker.stats(topic=topic)["topics"] for c in t["channels"]
                   if c["channel_name"] == channel)

    deadline = time.monotonic() + timeout
    while subscribed() != count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{subscribed()} clients on {topic}/{channel}, want {count}")
        time.sleep(0.05)


def wait_registered(lookupd: Lookupd, want: dict[str, int], timeout: float = 10.0) -> None:
    """Until the lookupd lists `want[topic]` producers for each topic."""
    deadline = time.monotonic() + timeout
    while True:
        got = {t: len(lookupd.get(f"/lookup?topic={t}")["producers"]) for t in want}
        if got == want:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"lookupd registrations: {got}, want {want}")
        time.sleep(0.05)


if __name__ == "__main__":
    import signal
    import tempfile

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop what we started on SIGTERM too

    cluster = start_cluster(Path(tempfile.mkdtemp(prefix="nsqmp-admin-")), "--history-interval", "2",
                            *sys.argv[1:])
    print(cluster.admin.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("\n".join(cluster.stop()))
    os._exit(0)
