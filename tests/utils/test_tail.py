"""nsqmp tail against a running broker: -n, --print-topic, the ephemeral channel, a
clean stop on SIGTERM."""
from __future__ import annotations

import re
import subprocess

from tests.harness import wait_for
from tests.utils.helpers import run


def _channels(broker, topic: str) -> list[str]:
    return [c["channel_name"] for t in broker.stats()["topics"] if t["topic_name"] == topic for c in t["channels"]]


def test_tail_prints_n_messages_with_their_topic_and_exits(broker):
    assert broker.http("POST", "/mpub?topic=t1", b"one\ntwo\nthree\nfour")[0] == 200
    r = run("tail", "--topic", "t1", "--topic", "t2", "--print-topic", "-n", "3", "--nsqd-tcp-address",
            broker.tcp_address)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 3 and all(line.startswith("t1 | ") for line in lines), lines
    assert set(lines) <= {"t1 | one", "t1 | two", "t1 | three", "t1 | four"}
    # nsq_tail's channel: ephemeral, gone with its last client; the topic keeps its messages for others
    wait_for(lambda: not _channels(broker, "t1"), what="the tail's ephemeral channel to go")


def test_tail_runs_until_sigterm_on_an_ephemeral_channel(broker, utils):
    tail = utils("tail", "--topic", "live", "--nsqd-tcp-address", broker.tcp_address, stdout=subprocess.PIPE)
    channel = wait_for(lambda: _channels(broker, "live"), what="the tail's channel")[0]
    assert re.fullmatch(r"tail\d{6}#ephemeral", channel)
    broker.http("POST", "/pub?topic=live", b"hello")
    assert tail.proc.stdout.readline() == b"hello\n"
    assert tail.stop() == 0, tail.stderr()
    wait_for(lambda: not _channels(broker, "live"), what="the channel to go with the tail")
