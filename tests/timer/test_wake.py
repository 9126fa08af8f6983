"""The timer's wake-up (timer/wake.py): timerfd and loop timer, on a real uvloop loop."""
from __future__ import annotations

import os
import time

import pytest
import uvloop

from nsqmp.timer import wake
from tests.harness import native_module

KINDS = ["timerfd", "loop"]


def make(kind, loop, callback):
    if kind == "timerfd":
        native_module("timerfd_open")
        return wake.TimerfdWake(loop, callback)
    return wake.LoopWake(loop, callback)


@pytest.mark.parametrize("kind", KINDS)
def test_calls_back_once_never_before_the_deadline_and_the_last_plan_wins(kind):
    loop = uvloop.new_event_loop()
    calls: list[int] = []
    w = make(kind, loop, lambda: calls.append(time.monotonic_ns()))
    try:
        now = time.monotonic_ns()
        w.at(now + 200_000_000)
        w.at(now + 20_000_000)  # an earlier deadline replaces the plan
        loop.call_later(0.5, loop.stop)
        loop.run_forever()
        assert len(calls) == 1 and calls[0] >= now + 20_000_000
        w.at(now)  # already past: at once
        loop.call_later(0.05, loop.stop)
        loop.run_forever()
        assert len(calls) == 2
    finally:
        w.close()
        loop.close()


def test_the_default_is_the_timerfd_unless_pure_python():
    native_module("timerfd_open")
    expected = wake.LoopWake if os.environ.get("NSQMP_PURE_PYTHON") == "1" else wake.TimerfdWake
    assert wake.Wake is expected


def test_timerfd_functions_check_their_arguments():
    native = native_module("timerfd_open")
    fd = native.timerfd_open()
    try:
        assert native.timerfd_clear(fd) == 0  # disarmed: nothing to read
        with pytest.raises(ValueError):
            native.timerfd_arm(fd, -1)
        with pytest.raises(ValueError):
            native.timerfd_arm(-3, 1)
        with pytest.raises(TypeError):
            native.timerfd_arm(fd)
        with pytest.raises(OSError):
            native.timerfd_clear(2**20)  # not an open descriptor
        native.timerfd_arm(fd, 1)  # long past
        deadline = time.monotonic() + 1
        while not native.timerfd_clear(fd):
            assert time.monotonic() < deadline
        native.timerfd_arm(fd, 0)  # disarm
    finally:
        os.close(fd)
