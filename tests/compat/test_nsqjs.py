"""nsqjs 0.13.0 (Node) against nsqmp: every feature nsqjs has.

The driver is js/driver.js, run with node; its dependencies are pinned in
js/package-lock.json and installed by `make test` (npm ci).
"""
from __future__ import annotations

import pytest

from tests.compat.driving import check_heartbeat_disconnect, check_redelivery, check_roundtrip

LIB = "nsqjs"


@pytest.mark.parametrize("feature", [None, "tls", "snappy", "deflate"], ids=["plain", "tls", "snappy", "deflate"])
def test_roundtrip_10000(compat_broker, feature):
    check_roundtrip(compat_broker, LIB, f"nsqjs-rt-{feature or 'plain'}", feature)


def test_requeue_comes_back_with_attempts_2(compat_broker):
    check_redelivery(compat_broker, LIB, "nsqjs-req", "requeue")


def test_timeout_redelivery(compat_broker):
    check_redelivery(compat_broker, LIB, "nsqjs-timeout", "timeout", msg_timeout_ms=1000)


def test_heartbeat_silence_disconnects(compat_broker):
    gone_after = check_heartbeat_disconnect(compat_broker, LIB, "nsqjs-hb")
    print(f"nsqjs: silent consumer dropped {gone_after:.2f}s after SIGSTOP (heartbeat 1 s)")
