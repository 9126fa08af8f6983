"""`nsqmp bench death` runs (two tries; not a timed test) and finds no orphan."""
from __future__ import annotations

import json
import os

import pytest

from nsqmp.bench import death

NSQD = "/work/nsq/bin/nsqd"  # a built nsqd, where the machine has one


def test_bench_death_two_tries(capsys):
    assert death.main(["--tries", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["target"], r["tries"], r["orphans"]) == ("nsqmp", 2, 0)
    for key in ("tcp", "http", "lookupd", "tcp_ended", "supervisor_gone", "all_gone"):
        assert r[key]["count"] == 2 and 0 <= r[key]["p50"] <= r[key]["max"], key
    # each probe's success began before it ended
    assert r["tcp"]["max"] <= r["tcp_ended"]["max"]


def test_bench_death_table(capsys):
    assert death.main(["--tries", "1"]) == 0
    out = capsys.readouterr().out
    assert "orphans: 0" in out and "last TCP handshake" in out and "every process gone" in out


@pytest.mark.skipif(not os.access(NSQD, os.X_OK), reason="no built nsqd on this machine")
def test_bench_death_against_nsqd(capsys):
    assert death.main(["--tries", "1", "--nsqd", NSQD, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["target"], r["orphans"]) == (NSQD, 0)
