"""ansq 0.3.0 (asyncio) against nsqmp: plain TCP, requeue, timeout, heartbeats.

ansq implements no TLS, snappy or deflate upgrade; the last test shows it: the broker
offers the upgrade and ansq itself raises NotImplementedError.
"""
from __future__ import annotations

import asyncio

import pytest
from ansq import ConnectionFeatures, ConnectionOptions
from ansq.tcp.connection import NSQConnection

from tests.compat.driving import check_heartbeat_disconnect, check_redelivery, check_roundtrip

LIB = "ansq"


def test_roundtrip_10000(compat_broker):
    check_roundtrip(compat_broker, LIB, "ansq-rt-plain")


def test_requeue_comes_back_with_attempts_2(compat_broker):
    check_redelivery(compat_broker, LIB, "ansq-req", "requeue")


def test_timeout_redelivery(compat_broker):
    check_redelivery(compat_broker, LIB, "ansq-timeout", "timeout", msg_timeout_ms=1000)


def test_heartbeat_silence_disconnects(compat_broker):
    gone_after = check_heartbeat_disconnect(compat_broker, LIB, "ansq-hb")
    print(f"ansq: silent consumer dropped {gone_after:.2f}s after SIGSTOP (heartbeat 1 s)")


@pytest.mark.parametrize("feature", ["tls_v1", "snappy", "deflate"])
def test_upgrades_are_not_implemented_by_ansq(compat_broker, feature):
    """The broker grants the upgrade; ansq 0.3.0 cannot perform it (unsupported-by-client)."""
    async def attempt() -> None:
        options = ConnectionOptions(features=ConnectionFeatures(**{feature: True}), auto_reconnect=False)
        conn = NSQConnection("127.0.0.1", compat_broker.tcp_port, connection_options=options)
        await conn.connect()
        try:
            with pytest.raises(NotImplementedError, match="not implemented yet"):
                await conn.identify()  # what ansq's open_connection() does after connect()
        finally:
            await conn.close()

    asyncio.run(attempt())
