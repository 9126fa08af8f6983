"""The acceptance scenario with a real client library: pynsq 0.9.1 from PyPI on tornado.

A pynsq Writer publishes 100,000 unique messages (half PUB, pipelined; half MPUB) to a
topic with two channels; each channel has two pynsq Readers, and the two readers of a
channel are on different acceptors (checked in /stats through `nsqmp_acceptor`). Every
channel must see every message exactly once, both readers of a channel must take a real
share, and nothing may fail.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time

import nsq
import pytest

from tests.harness import await_for

TOPIC = "acceptance"
CHANNELS = ("billing", "audit")
N_PUB = 50_000
N_MPUB = 50_000
MPUB_BATCH = 100
WINDOW = 2_000  # PUBs in flight on the writer's connection (pipelined, not one by one)
MAX_IN_FLIGHT = 200
DEADLINE = 120.0
PLACEMENT_TRIES = 20


class Tally:
    """What every reader received: bodies per channel, counts per reader, attempts."""

    def __init__(self) -> None:
        self.bodies: dict[str, collections.Counter] = {ch: collections.Counter() for ch in CHANNELS}
        self.per_reader: collections.Counter = collections.Counter()
        self.redelivered = 0
        self.complete = asyncio.Event()
        self.target = N_PUB + N_MPUB

    def handler(self, channel: str, reader_no: int):
        def on_message(message: nsq.Message) -> bool:
            self.bodies[channel][message.body] += 1
            self.per_reader[(channel, reader_no)] += 1
            if message.attempts != 1:
                self.redelivered += 1
            if all(len(c) >= self.target for c in self.bodies.values()):
                self.complete.set()
            return True
        return on_message


def _local_port(reader: nsq.Reader) -> int | None:
    for conn in reader.conns.values():
        if conn.connected() and conn.socket is not None:
            return conn.socket.getsockname()[1]
    return None


def _acceptor_of(broker, channel: str, port: int) -> int | None:
    stats = broker.stats(topic=TOPIC, include_clients="true")
    for topic in stats["topics"]:
        for ch in topic["channels"]:
            if ch["channel_name"] != channel:
                continue
            for client in ch["clients"]:
                if client["remote_address"] == f"127.0.0.1:{port}":
                    return client["nsqmp_acceptor"]
    return None


async def _placed_reader(broker, tally: Tally, channel: str, reader_no: int) -> tuple[nsq.Reader, int]:
    """A connected, subscribed Reader and the acceptor it landed on."""
    reader = nsq.Reader(TOPIC, channel, tally.handler(channel, reader_no),
                        nsqd_tcp_addresses=[broker.tcp_address], max_in_flight=MAX_IN_FLIGHT)
    def placed() -> tuple[nsq.Reader, int] | None:
        port = _local_port(reader)
        acceptor = None if port is None else _acceptor_of(broker, channel, port)
        return None if acceptor is None else (reader, acceptor)

    return await await_for(placed, what=f"reader {reader_no} of {channel} in /stats")


def _discard(reader: nsq.Reader) -> None:
    # pynsq reconnects a closed nsqd connection after 15 s; a discarded reader must not
    reader.connect_to_nsqd = lambda *args, **kwargs: None
    reader.close()


async def _scenario(broker, caplog) -> tuple[Tally, list, dict]:
    tally = Tally()
    readers: dict[str, list[nsq.Reader]] = {}
    placement: dict[str, list[int]] = {}
    discarded: list[nsq.Reader] = []
    for channel in CHANNELS:
        first, acc_first = await _placed_reader(broker, tally, channel, 0)
        for _ in range(PLACEMENT_TRIES):
            second, acc_second = await _placed_reader(broker, tally, channel, 1)
            if acc_second != acc_first:
                break
            _discard(second)
            discarded.append(second)
        else:
            raise AssertionError(f"could not get the readers of {channel} onto two acceptors")
        readers[channel] = [first, second]
        placement[channel] = [acc_first, acc_second]

    # the discarded readers are gone from the channels before anything is published
    def settled() -> bool:
        chans = broker.stats(topic=TOPIC)["topics"][0]["channels"]
        return sorted(c["channel_name"] for c in chans) == sorted(CHANNELS) and \
            all(c["client_count"] == 2 for c in chans)
    await await_for(settled, what=lambda: f"the discarded readers gone: {broker.stats(topic=TOPIC)}")
    # pynsq logs the close of a discarded reader's connection as it forgets it
    await await_for(lambda: not any(r.conns for r in discarded), what="pynsq to see the discarded readers closed")
    quiet_from = len(caplog.records)

    writer = nsq.Writer([broker.tcp_address])
    await await_for(lambda: writer.conns, what="the pynsq Writer's connection")

    failures: list = []
    acked = 0
    room = asyncio.Event()

    def on_ack(conn, data) -> None:
        nonlocal acked
        if isinstance(data, nsq.Error) or data != b"OK":
            failures.append(data)
        acked += 1
        room.set()

    sent = 0
    for i in range(N_PUB):
        while sent - acked >= WINDOW:
            room.clear()
            await room.wait()
        writer.pub(TOPIC, b"pub-%06d" % i, callback=on_ack)
        sent += 1
    for start in range(0, N_MPUB, MPUB_BATCH):
        while sent - acked >= WINDOW // MPUB_BATCH:
            room.clear()
            await room.wait()
        writer.mpub(TOPIC, [b"mpub-%06d" % i for i in range(start, start + MPUB_BATCH)], callback=on_ack)
        sent += 1
    while acked < sent:
        room.clear()
        await room.wait()

    await tally.complete.wait()
    # give a late duplicate the chance to show up before judging: the time is what is tested
    await asyncio.sleep(1.0)
    problems = [r for r in caplog.records[quiet_from:] if r.name.startswith("nsq") and r.levelno >= logging.WARNING]
    for channel in CHANNELS:
        for reader in readers[channel]:
            _discard(reader)
    for conn in list(writer.conns.values()):
        conn.close()
    everyone = [writer] + [r for channel in CHANNELS for r in readers[channel]]
    await await_for(lambda: not any(c.conns for c in everyone), what="pynsq to see its connections closed")
    assert not failures, failures[:5]
    return tally, problems, placement


@pytest.mark.slow
def test_pynsq_writer_and_readers_on_two_acceptors(make_broker, caplog):
    broker = make_broker("--acceptors", "2", "--acceptor-steering", "spread")  # readers on both acceptors
    caplog.set_level(logging.WARNING, logger="nsq")
    started = time.monotonic()
    tally, problems, placement = asyncio.run(asyncio.wait_for(_scenario(broker, caplog), DEADLINE))
    elapsed = time.monotonic() - started
    total = N_PUB + N_MPUB
    print(f"\n{total} messages x {len(CHANNELS)} channels in {elapsed:.1f}s; placement {placement}; "
          f"per reader {dict(tally.per_reader)}")

    for channel, (a, b) in placement.items():
        assert a != b, f"both readers of {channel} on acceptor {a}"
    expected = {b"pub-%06d" % i for i in range(N_PUB)} | {b"mpub-%06d" % i for i in range(N_MPUB)}
    for channel in CHANNELS:
        got = tally.bodies[channel]
        missing = expected - got.keys()
        dupes = [body for body, n in got.items() if n > 1]
        assert not missing, f"{channel}: {len(missing)} missing, e.g. {sorted(missing)[:3]}"
        assert not dupes, f"{channel}: {len(dupes)} duplicated, e.g. {dupes[:3]}"
        assert got.keys() == expected
        for reader_no in (0, 1):
            share = tally.per_reader[(channel, reader_no)] / total
            assert share >= 0.10, f"reader {reader_no} of {channel} got only {share:.1%}"
    assert tally.redelivered == 0
    assert not problems, [r.getMessage() for r in problems[:5]]

    # the broker agrees: everything delivered once and finished, nothing requeued or timed out
    chans = {c["channel_name"]: c for c in broker.stats(topic=TOPIC)["topics"][0]["channels"]}
    for channel in CHANNELS:
        c = chans[channel]
        assert (c["message_count"], c["depth"], c["in_flight_count"]) == (total, 0, 0), c
        assert (c["requeue_count"], c["timeout_count"]) == (0, 0), c
    assert broker.stats(topic=TOPIC)["topics"][0]["message_count"] == total
