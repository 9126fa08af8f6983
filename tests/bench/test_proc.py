"""What the benchmarks read of a server's processes from /proc (nsqmp/bench/proc.py): the
CPU per message and what held a run back, measured on real processes that spin."""
from __future__ import annotations

import subprocess
import sys
import time

from nsqmp.bench.proc import with_cpu

# a process whose main thread spins for SPIN seconds, then sleeps
_MAIN_SPINS = """
import time
end = time.monotonic() + {spin}
while time.monotonic() < end:
    pass
time.sleep(60)
"""
# a process whose main thread sleeps while a named thread spins, then ends, before the run does
_THREAD_SPINS = """
import ctypes, threading, time
def spin():
    ctypes.CDLL(None).prctl(15, b"spinner")  # PR_SET_NAME: the thread's name in /proc
    end = time.monotonic() + {spin}
    while time.monotonic() < end:
        pass
threading.Thread(target=spin, name="spinner").start()
time.sleep(60)
"""


def _spinner(code: str, spin: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code.format(spin=spin)])


def _run(seconds: float) -> dict:
    time.sleep(seconds)
    return {"messages": 1000}


def test_the_busiest_thread_is_named_with_the_share_of_the_run_it_ran():
    proc = _spinner(_MAIN_SPINS, 30)
    try:
        time.sleep(0.3)  # started
        result = with_cpu({"spinner": proc.pid}, lambda: _run(1.0))
    finally:
        proc.kill()
        proc.wait()
    sched = result["sched"]
    assert sched["thread"] == "spinner"
    # it ran most of the run, and waited for a CPU the rest of it at most
    assert 0.5 < sched["ran"] <= 1.05 and 0 <= sched["waited"] < 0.5, sched
    assert 0 <= sched["idle"] < 1
    assert result["cpu_us_per_msg"]["broker"] > 300  # about 1 s of CPU over 1000 messages


def test_a_thread_that_ends_before_the_run_still_counts():
    """A server's thread per connection may end before the run's last look at /proc: the
    looks taken during the run keep its figures."""
    proc = _spinner(_THREAD_SPINS, 0.8)
    try:
        time.sleep(0.1)
        result = with_cpu({"server": proc.pid}, lambda: _run(1.6))
    finally:
        proc.kill()
        proc.wait()
    sched = result["sched"]
    assert sched["thread"] == "server / spinner", sched
    assert sched["ran"] > 0.25, sched  # 0.7 s or so of 1.6


def test_without_processes_the_result_is_the_runs_own():
    assert with_cpu({}, lambda: {"messages": 3}) == {"messages": 3}
