"""gnsq 1.0.2 (gevent) against nsqmp: every feature gnsq has.

gnsq's IDENTIFY has no msg_timeout field, so the timeout case uses a broker started
with a short default --msg-timeout instead.
"""
from __future__ import annotations

import pytest

from tests.compat.driving import check_heartbeat_disconnect, check_redelivery, check_roundtrip

LIB = "gnsq"


@pytest.mark.parametrize("feature", [None, "tls", "snappy", "deflate"], ids=["plain", "tls", "snappy", "deflate"])
def test_roundtrip_10000(compat_broker, feature):
    check_roundtrip(compat_broker, LIB, f"gnsq-rt-{feature or 'plain'}", feature)


def test_requeue_comes_back_with_attempts_2(compat_broker):
    check_redelivery(compat_broker, LIB, "gnsq-req", "requeue")


def test_timeout_redelivery(make_broker):
    broker = make_broker("--msg-timeout", "1s")
    check_redelivery(broker, LIB, "gnsq-timeout", "timeout", msg_timeout_ms=1000)


def test_heartbeat_silence_disconnects(compat_broker):
    gone_after = check_heartbeat_disconnect(compat_broker, LIB, "gnsq-hb")
    print(f"gnsq: silent consumer dropped {gone_after:.2f}s after SIGSTOP (heartbeat 1 s)")
