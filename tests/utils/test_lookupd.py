"""The utilities find their brokers through a real nsqlookupd: tail and to-file consume
from brokers they only know by the lookupd, stat sums a channel over them."""
from __future__ import annotations

from pathlib import Path

from tests.harness import wait_for
from tests.lookupd.brokers import start_broker, start_lookupd
from tests.utils.helpers import run


def _registered(lookupd, topic: str, n: int) -> bool:
    return topic in lookupd.get("/topics")["topics"] and len(lookupd.get(f"/lookup?topic={topic}")["producers"]) == n


def test_tail_stat_and_to_file_through_lookupd(make_lookupd, make_broker, utils, tmp_path: Path):
    lookupd = start_lookupd(make_lookupd)
    brokers = [start_broker(make_broker, lookupd) for _ in range(2)]
    for i, b in enumerate(brokers):
        bodies = b"\n".join(b"b%d-%d" % (i, j) for j in range(5))
        for topic in ("found", "fourth"):
            assert b.http("POST", f"/mpub?topic={topic}", bodies)[0] == 200
    for topic in ("found", "fourth"):
        wait_for(lambda: _registered(lookupd, topic, 2), what=f"both brokers registered for {topic}")

    r = run("tail", "--topic", "found", "--channel", "seen", "-n", "10", "--lookupd-http-address",
            lookupd.http_address)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.decode().split()) == sorted(f"b{i}-{j}" for i in range(2) for j in range(5))

    # stat: the channel's counters summed over both brokers, as /stats says them
    r = run("stat", "--topic", "found", "--channel", "seen", "--lookupd-http-address", lookupd.http_address,
            "--interval", "0.2s", "--count", "1")
    assert r.returncode == 0, r.stderr
    header1, header2, row = r.stdout.decode().splitlines()
    assert header1.startswith("------rate------+")
    assert header2.split() == ["ingress", "egress", "|", "total", "mem", "disk", "inflt", "def", "|", "req",
                               "t-o", "msgs", "clients"]
    fields = row.replace("|", " ").split()
    assert [int(f) for f in fields] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0]

    # to-file with no --topic: every topic the lookupds know that matches --topic-pattern (its
    # channel on "found" comes after "seen" took the messages; "fourth" kept them for it)
    out = tmp_path / "out"
    tool = utils("to-file", "--topic-pattern", "^fou", "--topic-refresh", "0.2s", "--lookupd-http-address",
                 lookupd.http_address, "--output-dir", str(out), "--sync-interval", "0.2s")
    wait_for(lambda: sum(len(f.read_bytes().splitlines()) for f in out.glob("fourth.*.log")) == 10 if out.exists()
             else False, what=lambda: f"to-file to write both brokers' messages: {tool.stderr()}")
    assert tool.stop() == 0, tool.stderr()
