"""Discovery with a real client: a pynsq Reader given only the lookupd's HTTP address finds
a real nsqmp broker through /lookup and consumes from it.

The broker is registered by hand over protocol V1 (IDENTIFY + REGISTER, as nsqd would do),
pointing at the broker's real TCP and HTTP ports.
"""
from __future__ import annotations

import asyncio

import nsq

from tests.harness import await_for, wait_for
from tests.lookupd.helpers import broker

TOPIC = "discovered"


def test_pynsq_reader_finds_the_broker_through_lookupd(make_lookupd, make_broker):
    lookupd = make_lookupd("-log-level=debug")
    b = make_broker()
    bodies = [f"message {i}".encode() for i in range(200)]
    status, body, _ = b.http("POST", f"/mpub?topic={TOPIC}", b"\n".join(bodies))
    assert (status, body) == (200, b"OK")

    with broker(lookupd.tcp_port, tcp_port=b.tcp_port, http_port=b.http_port, address="127.0.0.1",
                registrations=(TOPIC,)):
        (producer,) = lookupd.get(f"/lookup?topic={TOPIC}")["producers"]
        assert (producer["broadcast_address"], producer["tcp_port"]) == ("127.0.0.1", b.tcp_port)

        async def consume() -> list[bytes]:
            got: list[bytes] = []
            done = asyncio.Event()

            def handler(message: nsq.Message) -> bool:
                got.append(message.body)
                if len(got) >= len(bodies):
                    done.set()
                return True

            reader = nsq.Reader(TOPIC, "via-lookupd", handler, max_in_flight=50,
                                lookupd_http_addresses=[f"http://{lookupd.http_address}"],
                                lookupd_poll_interval=1)
            try:
                await asyncio.wait_for(done.wait(), 60)
                assert reader.conns, "the reader has no connection to the broker"
            finally:
                reader.connect_to_nsqd = lambda *a, **k: None  # no reconnect after close
                reader.close()
                await await_for(lambda: not reader.conns, what="pynsq to see its connections closed")
            return got

        got = asyncio.run(consume())
    assert sorted(got) == sorted(bodies)
    # it was /lookup, with pynsq's V1 Accept header, that told the reader where to go
    assert f"200 GET /lookup?topic={TOPIC}" in lookupd.log_text()
    # the fake broker's connection is gone: so is its registration
    wait_for(lambda: lookupd.get(f"/lookup?topic={TOPIC}")["producers"] == [])
