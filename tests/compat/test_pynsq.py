"""pynsq 0.9.1 (tornado) against nsqmp: every feature pynsq has."""
from __future__ import annotations

import pytest

from tests.compat.driving import check_heartbeat_disconnect, check_redelivery, check_roundtrip

LIB = "pynsq"


@pytest.mark.parametrize("feature", [None, "tls", "snappy", "deflate"], ids=["plain", "tls", "snappy", "deflate"])
def test_roundtrip_10000(compat_broker, feature):
    check_roundtrip(compat_broker, LIB, f"pynsq-rt-{feature or 'plain'}", feature)


def test_requeue_comes_back_with_attempts_2(compat_broker):
    check_redelivery(compat_broker, LIB, "pynsq-req", "requeue")


def test_timeout_redelivery(compat_broker):
    check_redelivery(compat_broker, LIB, "pynsq-timeout", "timeout", msg_timeout_ms=1000)


def test_heartbeat_silence_disconnects(compat_broker):
    gone_after = check_heartbeat_disconnect(compat_broker, LIB, "pynsq-hb")
    print(f"pynsq: silent consumer dropped {gone_after:.2f}s after SIGSTOP (heartbeat 1 s)")
