"""Busy polling (nsqmp/busypoll.py): the window's rule on a clock the test moves, then on a
real uvloop answering a real client process over loopback."""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import socket

import uvloop

from nsqmp.busypoll import _SPIN_NS, _START_NS, BusyPoll, CpuPressure
from tests.harness import await_for

US = 1_000


class Loop:
    """Just enough of a loop for the rule: callbacks queued by call_soon run in turn, and
    each turn of the loop takes `step` ns of the clock."""

    def __init__(self) -> None:
        self.now = 1_000_000_000
        self.ready: list = []
        self.last_work = self.now

    def clock(self) -> int:
        return self.now

    def call_soon(self, cb) -> None:
        self.ready.append(cb)

    def turn(self, step: int) -> None:
        batch, self.ready = self.ready, []
        for cb in batch:
            cb()
        self.now += step

    def run_until_idle(self, step: int) -> int:
        """Turn until no callback is queued (the loop would sleep): turns taken."""
        turns = 0
        while self.ready:
            self.turn(step)
            turns += 1
        return turns


def work(loop: Loop, poll: BusyPoll, after: int) -> None:
    """Work comes `after` ns after the previous work: until then the loop polls (1 us a
    turn) or sleeps. The work takes no time; its turn runs the callbacks queued by then."""
    due = loop.last_work + after
    while loop.ready and loop.now < due:
        loop.turn(1 * US)
    loop.now = max(loop.now, due)
    loop.last_work = loop.now
    poll.touch()
    loop.turn(1 * US)


def test_work_that_comes_soon_after_sleep_doubles_the_window_up_to_the_maximum():
    loop = Loop()
    poll = BusyPoll(loop.call_soon, 100 * US, loop.clock)
    work(loop, poll, after=10**9)  # the first work after a long sleep: no reason to poll
    assert poll.window_ns == 0
    seen = []
    for _ in range(6):
        work(loop, poll, after=300 * US)  # too far for any window: decays
    assert poll.window_ns == 0
    for _ in range(7):
        work(loop, poll, after=90 * US)  # within the maximum, past the window: it doubles
        seen.append(poll.window_ns)
    # until it reaches the maximum, which catches the next work: the loop no longer sleeps
    assert seen == [_START_NS, 2 * _START_NS, 4 * _START_NS, 8 * _START_NS, 100 * US, 100 * US, 100 * US]
    assert poll.polls == 5


def test_the_loop_polls_for_the_window_after_the_last_work_then_may_sleep():
    loop = Loop()
    poll = BusyPoll(loop.call_soon, 50 * US, loop.clock)
    for _ in range(5):
        work(loop, poll, after=45 * US)
    assert poll.window_ns == 50 * US
    started = poll.polls
    # work the polling finds restarts the window from itself, and leaves its size alone
    for after in (45, 30, 49, 5):
        work(loop, poll, after=after * US)
    assert poll.polls == started and poll.window_ns == 50 * US
    # after the last work, 50 turns of 1 us, then no callback is left: the loop may sleep
    assert loop.run_until_idle(1 * US) == 50
    assert loop.now == loop.last_work + 51 * US


def test_work_further_apart_than_the_maximum_halves_the_window_down_to_none():
    loop = Loop()
    poll = BusyPoll(loop.call_soon, 80 * US, loop.clock)
    for _ in range(8):
        work(loop, poll, after=70 * US)
    assert poll.window_ns == 80 * US
    windows = []
    for _ in range(5):
        work(loop, poll, after=5_000 * US)
        windows.append(poll.window_ns)
    assert windows == [40 * US, 20 * US, _START_NS, 0, 0]
    loop.run_until_idle(1 * US)
    # with no window, work queues one callback after it and the loop sleeps at once
    loop.now += 5_000 * US
    poll.touch()
    assert loop.run_until_idle(step=1 * US) == 1


def test_a_poller_descheduled_mid_window_stops_and_starts_none_for_a_millisecond():
    loop = Loop()
    poll = BusyPoll(loop.call_soon, 50 * US, loop.clock)
    for _ in range(6):
        work(loop, poll, after=45 * US)
    assert poll.window_ns == 50 * US and loop.ready
    loop.turn(1 * US)
    loop.now += 200 * US  # another process had the CPU: the next tick comes late
    loop.turn(1 * US)
    assert not loop.ready and poll.window_ns == 0 and poll.holds == 1
    # work meanwhile is done, but no window follows it
    work(loop, poll, after=300 * US)
    assert poll.window_ns == 0 and loop.run_until_idle(1 * US) == 0
    # past the millisecond, close work makes the window grow again
    work(loop, poll, after=1_000 * US)
    work(loop, poll, after=5 * US)
    assert poll.window_ns == _START_NS and loop.ready


def test_a_polling_tick_spins_for_the_windows_time_left_up_to_the_spins_maximum():
    loop = Loop()
    poll = BusyPoll(loop.call_soon, 160 * US, loop.clock)
    spins: list[int] = []

    def spin(ns: int) -> None:  # finds nothing: its time passes
        spins.append(ns)
        loop.now += ns

    poll.spin = spin
    for _ in range(6):
        work(loop, poll, after=150 * US)
    assert poll.window_ns == 160 * US
    spins.clear()
    loop.run_until_idle(1 * US)
    # the window in spins of at most _SPIN_NS, the last one what was left of it; a
    # spin's time is no descheduling: the poll went on to the window's end
    assert max(spins) == _SPIN_NS and min(spins) < _SPIN_NS and sum(spins) < 160 * US
    assert loop.now - loop.last_work >= 160 * US and poll.holds == 0


def _polling_at_low_pressure(path) -> tuple[Loop, CpuPressure, BusyPoll]:
    """A loop polling in its full 50 us window, its pressure read from path (none yet)."""
    _psi(path, 0)
    loop = Loop()
    pressure = CpuPressure(str(path))
    poll = BusyPoll(loop.call_soon, 50 * US, loop.clock, pressure)
    for _ in range(6):
        work(loop, poll, after=45 * US)
    return loop, pressure, poll


def test_a_poller_descheduled_while_the_pressure_is_low_polls_on(tmp_path):
    path = tmp_path / "cpu"
    loop, pressure, poll = _polling_at_low_pressure(path)
    assert poll.window_ns == 50 * US and loop.ready
    loop.turn(1 * US)
    loop.now += 200 * US  # descheduled, but no task waited for a CPU since the last reading
    loop.now += 10 * MS
    loop.turn(1 * US)
    assert poll.holds == 0 and poll.window_ns == 50 * US
    # with the pressure high, the same descheduling stops it
    work(loop, poll, after=5 * US)
    _psi(path, 10 * MS // 1000)
    loop.turn(1 * US)
    loop.now += 10 * MS
    loop.turn(1 * US)
    assert poll.holds == 1 and poll.window_ns == 0 and not loop.ready
    pressure.close()


def test_a_maximum_of_zero_turns_polling_off():
    loop = Loop()
    poll = BusyPoll(loop.call_soon, 0, loop.clock)
    for _ in range(10):
        loop.now += 10 * US
        poll.touch()
        assert loop.ready == []
    assert poll.window_ns == 0 and poll.polls == 0


# -- the kernel's CPU pressure --------------------------------------------------------------

MS = 1_000_000


def _psi(path, total_us: int) -> None:
    path.write_text(f"some avg10=1.00 avg60=2.00 avg300=3.00 total={total_us}\n"
                    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def test_pressure_is_high_when_tasks_waited_for_a_cpu_two_fifths_of_the_time_or_more(tmp_path):
    path = tmp_path / "cpu"
    _psi(path, 1_000_000)
    pressure = CpuPressure(str(path))
    assert pressure.check(100 * MS) is False  # a first reading has nothing to compare with
    _psi(path, 1_000_000 + 1_000)  # 1 ms of waiting in 10 ms
    assert pressure.check(110 * MS) is False
    _psi(path, 1_000_000 + 1_000 + 3_500)  # 3.5 ms in the next 10: a publisher's own
    assert pressure.check(120 * MS) is False  # round trips on a VM count this much
    _psi(path, 1_000_000 + 1_000 + 3_500 + 4_500)  # 4.5 ms in the next 10
    assert pressure.check(125 * MS) is False  # not read again within 10 ms
    assert pressure.check(130 * MS) is True
    _psi(path, 1_000_000 + 1_000 + 3_500 + 4_500 + 100)
    assert pressure.check(135 * MS) is True  # the last reading holds until the next
    assert pressure.check(140 * MS) is False
    pressure.close()


def test_pressure_without_the_file_or_with_an_unreadable_one_is_never_high(tmp_path):
    assert CpuPressure(str(tmp_path / "absent")).check(10**9) is False
    path = tmp_path / "cpu"
    path.write_text("something else\n")
    pressure = CpuPressure(str(path))
    assert pressure.check(10**9) is False
    _psi(path, 10**12)
    assert pressure.check(2 * 10**9) is False  # it gave up on the file after the bad read


def test_the_kernels_pressure_file_reads_where_there_is_one():
    pressure = CpuPressure()
    pressure.check(10**9)
    if os.path.exists("/proc/pressure/cpu"):  # Linux 4.20+ with PSI, as on this machine kind
        assert pressure._fd >= 0 and pressure._total_us > 0
    else:
        assert pressure._fd < 0 and not pressure.high
    pressure.close()


def test_no_window_starts_while_the_pressure_is_high(tmp_path):
    path = tmp_path / "cpu"
    loop, pressure, poll = _polling_at_low_pressure(path)
    assert poll.window_ns == 50 * US
    _psi(path, 10 * MS // 1000)  # waited the whole time since the first reading
    loop.run_until_idle(1 * US)
    work(loop, poll, after=20 * MS)
    work(loop, poll, after=10 * US)
    assert poll.window_ns == 0 and pressure.high
    # and work then queues no tick: a busy loop pays no callback per turn for a window
    # that cannot start
    loop.now += 10 * US
    poll.touch()
    poll.touch()
    assert loop.ready == []
    pressure.close()


# -- on a real loop, with a client in another process ---------------------------------------

def _ping(port: int, rounds: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(rounds):
            s.sendall(b"p")
            assert s.recv(1) == b"o"


def test_a_real_loop_polls_through_a_conversation_and_sleeps_after_it():
    rounds = 300
    max_ns = 5_000_000  # generous: a loaded machine still answers within it

    async def main() -> tuple[int, int, bool]:
        loop = asyncio.get_running_loop()
        queued = 0  # ticks BusyPoll queued through our call_soon and the loop has not run

        def call_soon(tick) -> None:
            nonlocal queued
            queued += 1

            def run() -> None:
                nonlocal queued
                queued -= 1
                tick()
            loop.call_soon(run)

        # a queued tick is the loop polling (or about to decide whether to), as BusyPoll sees it
        poll = BusyPoll(call_soon, max_ns)
        done = loop.create_future()
        answered = 0

        class Pong(asyncio.Protocol):
            def connection_made(self, transport) -> None:  # type: ignore[override]
                self.transport = transport

            def data_received(self, data: bytes) -> None:
                nonlocal answered
                poll.touch()
                self.transport.write(b"o" * len(data))
                answered += len(data)

            def connection_lost(self, exc) -> None:
                done.set_result(None)

        server = await loop.create_server(Pong, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = mp.get_context("fork").Process(target=_ping, args=(port, rounds))
        client.start()
        await asyncio.wait_for(done, 60)
        # no tick left queued within ten times the maximum window (False if one still is)
        try:
            asleep = await await_for(lambda: queued == 0, timeout=0.05, interval=0.001)
        except TimeoutError:
            asleep = False
        server.close()
        client.join(30)
        assert client.exitcode == 0
        return answered, poll.polls, asleep

    answered, polls, asleep = uvloop.run(main())
    assert answered == rounds
    # each answer's client replies within the maximum: the loop sleeps at most a few
    # times while the window grows, and polls through the rest of the conversation
    assert 1 <= polls < rounds // 2
    assert asleep  # a finished conversation leaves no polling behind
