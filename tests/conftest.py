from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

from tests.harness import Broker


def pytest_addoption(parser):
    parser.addoption("--soak-seconds", type=float, default=15.0,
                     help="publishing time of tests/integration/test_soak.py (default 15, short "
                          "for CI; the full soak: --soak-seconds 60)")
    parser.addoption("--soak-kill-routers", action="store_true",
                     help="the soak also kills the routers (every other kill): only the no-loss "
                          "checks apply, since a killed router's counters start again")


def _free_disk_line() -> tuple[str, bool]:
    where = tempfile.gettempdir()
    free = shutil.disk_usage(where).free
    low = free < 2 * 2**30
    line = f"free disk under {where}: {free / 2**30:.1f} GiB"
    if low:
        line += " (LOW: the suite writes up to about 1 GB of broker data and Spark scratch)"
    return line, low


def pytest_report_header(config):
    return _free_disk_line()[0]


def pytest_sessionstart(session):
    """A run short of disk says so even under -q: its failures will be ENOSPC, not bugs."""
    line, low = _free_disk_line()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if low and reporter is not None and session.config.get_verbosity() < 0:
        reporter.write_line(line, yellow=True)


@pytest.fixture
def broker(tmp_path):
    """A running broker with the default process graph, stopped (or killed) after the test."""
    b = Broker(tmp_path / "data").start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        code = b.stop()
        assert code == 0, b.log_text()


@pytest.fixture
def small_fs(tmp_path):
    """mount(size) -> a tmpfs of that size the test mounts itself (the tests run as root),
    unmounted afterwards: a real small filesystem for the full-disk tests."""
    mounts = []

    def mount(size: str):
        mnt = tmp_path / f"small{len(mounts)}"
        mnt.mkdir()
        if os.geteuid() != 0:
            pytest.fail("the full-disk tests mount a tmpfs and need root")
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
        mounts.append(mnt)
        return mnt

    yield mount
    for mnt in mounts:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


@pytest.fixture
def make_broker(tmp_path):
    """Start brokers with extra flags: ``make_broker("--acceptors", "2")``; ``data=`` names
    the data dir. Every broker started here is stopped after the test (SIGTERM, must exit
    0) unless the test already stopped or killed it."""
    started: list[Broker] = []

    def start(*args: str, data: str | None = None) -> Broker:
        b = Broker(tmp_path / (data or f"data{len(started)}"), *args).start()
        started.append(b)
        return b

    yield start
    failures = []
    for b in started:
        if b.proc is not None and b.proc.poll() is None:
            code = b.stop()
            if code != 0:
                failures.append(f"broker {b.proc.pid} exited {code}:\n{b.log_text()[-4000:]}")
    assert not failures, "\n".join(failures)
