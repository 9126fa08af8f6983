"""Ring high-water marks as each end of a real ring sees them (nsqmp.ipc.mesh.Endpoint)."""
from __future__ import annotations

import pytest

from nsqmp.ipc import pyring
from tests.harness import endpoint_pair


@pytest.fixture
def pair():
    with endpoint_pair() as ends:
        yield ends


def test_both_ends_see_the_peak_and_it_stays_after_the_drain(pair):
    acceptor, router, plan = pair
    assert router.high_water() == {"a0r0": 0, "r0a0": 0, "r0t": 0, "tr0": 0}
    for _ in range(3):  # two flushes: the ring's peak is after the second
        acceptor.send(plan.router_slot(0), b"x" * 100)
    acceptor.flush()
    acceptor.send(plan.router_slot(0), b"y" * 50)
    acceptor.flush()
    peak = 3 * pyring.record_size(100) + pyring.record_size(50)
    assert acceptor.high_water()["a0r0"] == peak  # producer: right after its push
    assert router.drain(lambda src, rec: None) == 4
    assert router.high_water()["a0r0"] == peak  # consumer: right before its pop
    acceptor.send(plan.router_slot(0), b"z")
    acceptor.flush()
    router.drain(lambda src, rec: None)
    assert router.high_water()["a0r0"] == acceptor.high_water()["a0r0"] == peak  # a mark, not the level
