"""The lifeline (nsqmp/supervisor/lifeline.py, native/lifeline/lifeline.c) without a
broker: a holder process and a watcher it forks; SIGKILL the holder and the watcher's
listener stops accepting and the watcher dies, with no parent-death signal set."""
from __future__ import annotations

import os
import select
import signal
import socket
import time

import pytest

from nsqmp.supervisor import lifeline as lifeline_mod
from nsqmp.supervisor.lifeline import Lifeline

pytestmark = pytest.mark.skipif(lifeline_mod._lifeline is None, reason="the _lifeline extension is not built")


def _holder(out: int, slots: int, watched: int) -> None:
    """Hold the lifeline, fork `watched` watchers (each with a listener of its own), report
    (pid, port) of each, then sleep until killed."""
    line = Lifeline(slots)
    line.hold()
    for slot in range(watched):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            line.watch(slot, [listener.fileno()])
            os.write(w, b"1")
            while True:
                time.sleep(60)
        os.read(r, 1)
        os.write(out, f"{pid} {listener.getsockname()[1]}\n".encode())
        listener.close()
    while True:
        time.sleep(60)


def _start(slots: int, watched: int) -> tuple[int, list[tuple[int, int]]]:
    r, w = os.pipe()
    holder = os.fork()
    if holder == 0:
        os.close(r)
        try:
            _holder(w, slots, watched)
        finally:
            os._exit(1)
    os.close(w)
    data = b""
    with os.fdopen(r, "rb") as f:
        while data.count(b"\n") < watched:
            chunk = f.read1(4096)
            assert chunk, "the holder died"
            data += chunk
    return holder, [tuple(map(int, line.split())) for line in data.decode().splitlines()]


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.parametrize("watched", [1, 4])
def test_holder_killed_watchers_shut_listeners_and_die(watched):
    holder, watchers = _start(slots=watched + 1, watched=watched)
    for _pid, port in watchers:
        assert not _refused(port)  # listening while the holder lives
    fds = {os.pidfd_open(pid): pid for pid, _port in watchers}
    t = time.monotonic()
    os.kill(holder, signal.SIGKILL)
    os.waitpid(holder, 0)
    try:
        pending = set(fds)
        while pending:
            ready, _, _ = select.select(list(pending), [], [], max(0.0, t + 5 - time.monotonic()))
            assert ready, f"watchers {[fds[f] for f in pending]} outlived their holder by 5 s"
            pending -= set(ready)
    finally:
        for fd in fds:
            os.close(fd)
        for pid, _port in watchers:  # on failure: end what this test started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for _pid, port in watchers:
        assert _refused(port)


def test_watcher_whose_holder_is_already_dead_dies_at_once():
    """A child that starts watching after its supervisor died (killed during the fork)
    finds the mutex marked OWNER_DIED and goes at once."""
    line = Lifeline(1)
    report_r, report_w = os.pipe()  # holder -> test: the watcher's pid
    gate_r, gate_w = os.pipe()  # EOF for the watcher once the holder is dead
    holder = os.fork()
    if holder == 0:
        os.close(report_r)
        line.hold()
        pid = os.fork()
        if pid == 0:
            os.close(gate_w)
            os.close(report_w)
            os.read(gate_r, 1)
            line.watch(0, [])
            while True:
                time.sleep(60)
        os.write(report_w, f"{pid}\n".encode())
        while True:
            time.sleep(60)
    os.close(report_w)
    os.close(gate_r)
    with os.fdopen(report_r, "rb") as f:
        pid = int(f.readline())
    fd = os.pidfd_open(pid)
    os.kill(holder, signal.SIGKILL)
    os.waitpid(holder, 0)
    os.close(gate_w)  # the holder's copy died with it: the watcher starts watching now
    ready, _, _ = select.select([fd], [], [], 5)
    os.close(fd)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    assert ready, "a watcher of a dead holder did not die"
