from __future__ import annotations

import pytest

from nsqmp.lookupd.launcher import Lookupd


@pytest.fixture
def make_lookupd(tmp_path):
    """Start our nsqlookupd with extra flags (Go syntax): ``make_lookupd("-tombstone-lifetime=1s")``.
    Every daemon started here must still be running after the test and exit 0 on SIGTERM."""
    started: list[Lookupd] = []

    def start(*args: str) -> Lookupd:
        d = Lookupd(*args, log_path=tmp_path / f"lookupd{len(started)}.log").start()
        started.append(d)
        return d

    yield start
    failures = []
    for d in started:
        if d.proc is None or d.proc.returncode is not None:
            continue  # the test stopped it itself
        if not d.alive():
            failures.append(f"lookupd {d.proc.pid} died with {d.proc.returncode}:\n{d.log_text()[-4000:]}")
            continue
        code = d.stop()
        if code != 0:
            failures.append(f"lookupd {d.proc.pid} exited {code}:\n{d.log_text()[-4000:]}")
        elif "Traceback" in d.log_text():  # a bug was caught somewhere: still a bug
            failures.append(f"lookupd {d.proc.pid} logged a traceback:\n{d.log_text()[-4000:]}")
    assert not failures, "\n".join(failures)


@pytest.fixture
def lookupd(make_lookupd):
    return make_lookupd()
