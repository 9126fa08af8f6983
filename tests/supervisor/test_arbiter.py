"""The supervisor's respawn backoff and its signals, on real brokers: children killed with
SIGKILL, respawn delays read from the new processes' start times in /proc."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from nsqmp.supervisor.arbiter import BACKOFF_CAP, QUICK_DEATH, restart_delay
from tests.harness import wait_for

BACKOFF = 0.4
TICKS = os.sysconf("SC_CLK_TCK")
SLACK = 0.4  # seconds a respawn may come later than due on a loaded machine


def test_restart_delay_doubles_for_quick_deaths_in_a_row_and_is_capped():
    assert [restart_delay(1.0, n) for n in range(8)] == [0.0, 0.0, 1.0, 2.0, 4.0, 8.0, 16.0, BACKOFF_CAP]
    assert restart_delay(60.0, 4) == 60.0  # a backoff above the cap is its own cap
    assert restart_delay(0.0, 4) == 0.0  # 0 means always at once


def _started(pid: int) -> float:
    """The process's start, in CLOCK_BOOTTIME seconds (field 22 of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[19]) / TICKS


def _kill(broker, title: str) -> tuple[int, float]:
    """SIGKILL the child with this title: (its pid, when, in CLOCK_BOOTTIME seconds)."""
    pid = broker.children()[title]
    at = time.clock_gettime(time.CLOCK_BOOTTIME)
    os.kill(pid, signal.SIGKILL)
    return pid, at


def _ran_long(pid: int) -> None:
    """Wait until the process has run longer than a quick death."""
    wait_for(lambda: time.clock_gettime(time.CLOCK_BOOTTIME) - _started(pid) > QUICK_DEATH + 0.1,
             what=f"pid {pid} running longer than a quick death")


def _replacement(broker, title: str, old: int) -> int:
    return wait_for(lambda: (p if (p := broker.children().get(title)) not in (None, old) else None),
                    timeout=10, interval=0.005, what=f"a replacement {title}")


def test_quick_deaths_wait_a_growing_backoff_and_a_long_run_restarts_at_once(make_broker):
    broker = make_broker("--acceptors", "1", "--routers", "1", "--restart-backoff", f"{BACKOFF}s")
    title = "nsqmp timer"
    _ran_long(broker.children()[title])
    gaps = []
    # ran long; then three quick deaths in a row: the first is a crash, repaired at once
    for expected in (0.0, 0.0, BACKOFF, 2 * BACKOFF):
        old, at = _kill(broker, title)
        pid = _replacement(broker, title, old)
        gaps.append(_started(pid) - at)
        assert expected - 0.02 <= gaps[-1] <= expected + SLACK, (expected, gaps)
    # this one runs long again: at once, and the count starts again
    _ran_long(pid)
    old, at = _kill(broker, title)
    gaps.append(_started(_replacement(broker, title, old)) - at)
    assert gaps[-1] <= SLACK, gaps
    log = broker.log_text()
    assert f"starting a replacement in {BACKOFF:g}s (2 in a row within 1s of starting)" in log
    assert f"starting a replacement in {2 * BACKOFF:g}s (3 in a row within 1s of starting)" in log
    assert log.count("died: killed by SIGKILL") == 5
    wait_for(lambda: broker.http("GET", "/ping")[:2] == (200, b"OK"), what="the broker serving")


def test_sigterm_during_a_backoff_stops_at_once_without_the_respawn(make_broker):
    broker = make_broker("--acceptors", "1", "--routers", "1", "--restart-backoff", "20s")
    title = "nsqmp acceptor 0"
    _ran_long(broker.children()[title])
    for _ in range(2):  # it ran long, then its replacement dies at once: both repaired at once
        old, _ = _kill(broker, title)
        _replacement(broker, title, old)
    _kill(broker, title)  # the second quick death in a row: the next one waits 20 s
    wait_for(lambda: "starting a replacement in 20s" in broker.log_text(), what="the backoff's log line")
    started = time.monotonic()
    assert broker.stop(timeout=10) == 0
    assert time.monotonic() - started < 5
    assert broker.log_text().count("spawned acceptor 0") == 3  # the first and two replacements


def test_sighup_is_logged_and_ignored(make_broker):
    broker = make_broker("--acceptors", "1", "--routers", "1")
    before = broker.children()
    os.kill(broker.proc.pid, signal.SIGHUP)
    wait_for(lambda: "SIGHUP ignored" in broker.log_text(), what="the SIGHUP line")
    assert broker.http("GET", "/ping")[:2] == (200, b"OK")
    assert broker.children() == before


def test_a_zero_backoff_restarts_quick_deaths_at_once(make_broker):
    broker = make_broker("--acceptors", "1", "--routers", "1", "--restart-backoff", "0s")
    title = "nsqmp router 0"
    for _ in range(3):  # quick deaths in a row
        old, at = _kill(broker, title)
        assert _started(_replacement(broker, title, old)) - at <= SLACK
    assert "starting a replacement in" not in broker.log_text()
