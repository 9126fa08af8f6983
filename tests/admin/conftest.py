"""A real cluster for the admin's tests: one lookupd, two nsqmp brokers registered with it
(one acceptor and one router each, to stay light), and the admin as a subprocess."""
from __future__ import annotations

import pytest

from nsqmp.lookupd.launcher import Lookupd
from tests.admin.adminproc import Admin


class Cluster:
    """The lookupd and brokers of one test."""

    def __init__(self, lookupd: Lookupd, brokers: list) -> None:
        self.lookupd = lookupd
        self.brokers = brokers

    @property
    def lookupd_http(self) -> str:
        return f"127.0.0.1:{self.lookupd.http_port}"

    def nsqd_http(self, i: int) -> str:
        return f"127.0.0.1:{self.brokers[i].http_port}"


@pytest.fixture
def cluster(tmp_path, make_broker):
    lookupd = Lookupd("-broadcast-address=127.0.0.1", log_path=tmp_path / "lookupd.log").start()
    brokers = [make_broker("--broadcast-address", "127.0.0.1", "--acceptors", "1", "--routers", "1",
                           "--lookupd-tcp-address", lookupd.tcp_address) for _ in range(2)]
    yield Cluster(lookupd, brokers)
    for b in brokers:  # brokers first: their lookupd connections end cleanly
        if b.proc is not None and b.proc.poll() is None:
            assert b.stop() == 0, b.log_text()
    assert lookupd.stop() == 0, lookupd.log_text()


@pytest.fixture
def make_admin(tmp_path):
    """make_admin(*flags, go=False) -> a started Admin; all are stopped (exit 0) after the test."""
    started: list[Admin] = []

    def start(*args: str, go: bool = False) -> Admin:
        a = Admin(tmp_path / f"admin{len(started)}.log", *args, go=go).start()
        started.append(a)
        return a

    yield start
    for a in started:
        if a.proc is not None and a.proc.poll() is None:
            assert a.stop() == 0, a.log_text()
        assert "Traceback" not in a.log_text(), a.log_text()
