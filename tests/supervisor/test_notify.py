"""systemd's notify protocol, spoken to a real unix datagram socket the test binds as
NOTIFY_SOCKET (this machine has no systemd as PID 1, so no systemd-run: the datagrams
are what systemd would read)."""
from __future__ import annotations

import os
import signal
import socket
import time
import urllib.request

import pytest

from nsqmp.launcher import Broker
from nsqmp.supervisor.notify import Notifier


@pytest.fixture
def notify_socket(tmp_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    s.bind(path)
    s.settimeout(20)
    yield s, path
    s.close()


def _messages(sock: socket.socket) -> dict[str, str]:
    return dict(line.split("=", 1) for line in sock.recv(4096).decode().splitlines())


def test_without_notify_socket_nothing_is_sent():
    n = Notifier({})
    assert n.sock is None and n.interval == 0
    n.ready("x")
    n.stopping()
    n.beat()
    assert n.wait_limit(0.25) == 0.25


def test_ready_stopping_and_the_watchdog_reach_the_socket(notify_socket):
    sock, path = notify_socket
    n = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": str(os.getpid())})
    assert n.interval == pytest.approx(0.05)
    n.ready("serving")
    got = _messages(sock)
    assert got["READY"] == "1" and got["STATUS"] == "serving" and got["MAINPID"] == str(os.getpid())
    assert _messages(sock) == {"WATCHDOG": "1"}  # the first beat goes with READY
    n.beat()  # not due yet: nothing
    assert 0 < n.wait_limit(1.0) <= 0.05
    time.sleep(0.06)
    n.beat()
    assert _messages(sock) == {"WATCHDOG": "1"}
    n.stopping()
    assert _messages(sock)["STOPPING"] == "1"
    n.close()


def test_abstract_socket_and_a_watchdog_meant_for_another_process(tmp_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"nsqmp-notify-test-{os.getpid()}"
    s.bind("\0" + name)
    s.settimeout(5)
    try:
        n = Notifier({"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"})
        assert n.interval == 0  # WATCHDOG_PID names another process
        n.ready("up")
        assert _messages(s)["READY"] == "1"
        n.close()
    finally:
        s.close()


def test_broker_notifies_ready_once_every_acceptor_serves_then_stopping(tmp_path, notify_socket, monkeypatch):
    sock, path = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "200000")  # a beat every 0.1 s
    b = Broker(tmp_path / "data", "--acceptors", "2", "--acceptor-steering", "spread")  # both acceptors answer
    b._log = open(b.log_path, "ab")
    b._log_start = b._log.tell()
    import subprocess

    b.proc = subprocess.Popen(b.command(), stdout=b._log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while (got := _messages(sock)) == {"WATCHDOG": "1"}:  # fed while it boots too
            pass
        assert got["READY"] == "1" and got["MAINPID"] == str(b.proc.pid), got
        # at READY every acceptor serves: the ports answer now, not later
        b._ready = lambda text: True  # type: ignore[method-assign]
        text = b.log_text()
        assert "nsqmp ready" in text
        from nsqmp.launcher import _LISTEN

        ports = {kind: int(port) for kind, _h, port in _LISTEN.findall(text)}
        for _ in range(20):  # both acceptors (SO_REUSEPORT spreads the connections)
            socket.create_connection(("127.0.0.1", ports["TCP"]), timeout=2).close()
            with urllib.request.urlopen(f"http://127.0.0.1:{ports['HTTP']}/ping", timeout=2) as r:
                assert r.status == 200
        beats = [_messages(sock) for _ in range(3)]
        assert all(m == {"WATCHDOG": "1"} for m in beats), beats
        b.proc.send_signal(signal.SIGTERM)
        while (m := _messages(sock)).get("WATCHDOG"):
            pass
        assert m["STOPPING"] == "1", m
        assert b.proc.wait(30) == 0
    finally:
        if b.proc.poll() is None:
            b.kill()
        b._log.close()
