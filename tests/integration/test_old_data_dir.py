"""A data directory written by the code before issue 19 is read by the code at hand.

tests/fixtures/olddata-f710367.tar.gz is a broker's data directory after a graceful stop,
made by tests/fixtures/make_olddata.py at e586a77 (the segment, ack log and meta.json
formats of f710367); olddata-f710367.json says what it holds. The broker under test starts
on a copy and must show every topic and channel with the same paused flags, depths,
deferred counts and /stats counters, deliver exactly the messages each channel had left
(bodies, ids, timestamps and attempts carried over, no duplicates), keep the messages
deferred for a century deferred, and append to the old files' topics.
"""
from __future__ import annotations

import hashlib
import json
import tarfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlencode

import pytest

from nsqmp.client import Connection, wire
from tests.harness import Broker, wait_for

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TAG = "f710367"
SOON_NS = 60 * 10**9  # a deferral due within this is waited out before the broker starts


@pytest.fixture
def old_state() -> dict:
    """The fixture's description (make_olddata.expected())."""
    return json.loads((FIXTURES / f"olddata-{TAG}.json").read_text())


def extract(dest: Path) -> Path:
    """The fixture's data directory, unpacked under dest."""
    with tarfile.open(FIXTURES / f"olddata-{TAG}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    return dest / "data"


def wait_out_due(state: dict) -> None:
    """Wait until no deferral of the fixture falls due in the next SOON_NS: each one is
    then either long past (ready) or surely still deferred while the test runs. Only the
    ~35-day REQ can be near, and only in one minute of its life."""
    dues = []
    for t in state["topics"].values():
        dues += [d["due_unix_ns"] for d in t["held"].values()]
        for c in t["channels"].values():
            dues += [d["due_unix_ns"] for d in c["deferred"].values()]
    near = [d for d in dues if 0 <= d - time.time_ns() < SOON_NS]
    if near:  # a wait for the wall clock to pass a time: there is no event to wait on
        time.sleep((max(near) - time.time_ns()) / 1e9 + 1)


def split(entries: dict, now: int) -> tuple[dict, dict]:
    """Deferred entries {label: {due_unix_ns, attempts}} as (due now: {label: attempts},
    still deferred: {label: attempts})."""
    ready = {k: v["attempts"] for k, v in entries.items() if v["due_unix_ns"] <= now}
    later = {k: v["attempts"] for k, v in entries.items() if v["due_unix_ns"] > now}
    return ready, later


TOPIC_KEYS = ("paused", "depth", "message_count", "message_bytes")
CHANNEL_KEYS = ("paused", "depth", "deferred_count", "in_flight_count", "client_count",
                "message_count", "requeue_count", "timeout_count")


def expected_stats(state: dict, now: int) -> dict:
    """What /stats must show before anything is consumed: {topic: {TOPIC_KEYS...,
    "channels": {channel: {CHANNEL_KEYS...}}}}. A topic's depth counts what it holds for
    its channels, deferred or not; a channel's depth does not count its deferred."""
    out = {}
    for name, t in state["topics"].items():
        chans = {}
        for cname, c in t["channels"].items():
            ready, later = split(c["deferred"], now)
            chans[cname] = {"paused": c["paused"], "depth": len(c["ready"]) + len(ready),
                            "deferred_count": len(later), "in_flight_count": 0, "client_count": 0,
                            **{k: c[k] for k in ("message_count", "requeue_count", "timeout_count")}}
        out[name] = {"paused": t["paused"], "depth": len(t["held"]), "message_count": t["message_count"],
                     "message_bytes": t["message_bytes"], "channels": chans}
    return out


def observed_stats(b: Broker) -> dict:
    """/stats in the shape of expected_stats."""
    return {t["topic_name"]: {**{k: t[k] for k in TOPIC_KEYS},
                              "channels": {c["channel_name"]: {k: c[k] for k in CHANNEL_KEYS}
                                           for c in t["channels"]}}
            for t in b.stats()["topics"]}


def channel(b: Broker, topic: str, name: str) -> dict:
    """A channel's /stats."""
    for t in b.stats()["topics"]:
        if t["topic_name"] == topic:
            for c in t["channels"]:
                if c["channel_name"] == name:
                    return c
    raise AssertionError(f"no channel {topic}/{name}")


def http_post(b: Broker, path: str, **params: str) -> None:
    """POST to the HTTP API; 200 expected."""
    status, text, _ = b.http("POST", f"{path}?{urlencode(params)}")
    assert status == 200, (path, params, status, text)


def receive(b: Broker, messages: dict, topic: str, name: str, want: dict, deferred: int) -> None:
    """SUB (creating the channel if it is new) and check that exactly `want` ({label:
    attempts}) arrives, each message with the body (sha256), id and timestamp that
    `messages` gives its label, then that the channel is empty with `deferred` messages
    still deferred."""
    by_sha = {m["sha256"]: label for label, m in messages.items()}
    with Connection.connect(b.tcp_address, timeout=20) as c:
        c.identify()
        c.sub(topic, name, rdy=2500)
        got: Counter = Counter()
        for _ in range(len(want)):
            m = c.read_message()
            label = by_sha.get(hashlib.sha256(m.body).hexdigest())
            assert label is not None, f"{topic}/{name}: a body never published: {m.body[:60]!r}"
            got[label] += 1
            assert m.attempts == want.get(label), f"{topic}/{name} {label}: attempts {m.attempts}"
            old = messages[label]
            if old["id"] is not None:
                assert (m.id.decode(), m.timestamp) == (old["id"], old["timestamp"]), label
            c.fin(m.id)
        expect = Counter(list(want))
        assert got == expect, f"{topic}/{name}: {got - expect} extra, {expect - got} missing"
        # a duplicate or anything more would be in flight to this connection or queued
        wait_for(lambda: counts(b, topic, name, "depth", "in_flight_count", "deferred_count")
                 == (0, 0, deferred), what=f"{topic}/{name} drained")


def topic_depth(b: Broker, topic: str) -> int:
    """A topic's /stats depth."""
    return next(t["depth"] for t in b.stats()["topics"] if t["topic_name"] == topic)


def counts(b: Broker, topic: str, name: str, *keys: str) -> tuple:
    """These /stats numbers of a channel."""
    c = channel(b, topic, name)
    return tuple(c[k] for k in keys)


def check_stats(b: Broker, want: dict) -> None:
    """/stats shows `want` (waited for: a router may still be recovering)."""
    try:
        wait_for(lambda: observed_stats(b) == want, timeout=20, what="the recovered /stats")
    except TimeoutError:
        got = observed_stats(b)
        assert sorted(got) == sorted(want)
        for name in sorted(want):
            assert got[name] == want[name], name


def check_deliveries(b: Broker, state: dict, now: int) -> dict[tuple[str, str], int]:
    """Drain every channel (unpausing what is paused, creating the first channel of a
    topic without one); returns what stays deferred per (topic, channel)."""
    messages = state["messages"]
    left = {}
    for name, t in sorted(state["topics"].items()):
        held_ready, held_later = split(t["held"], now)
        for cname, c in sorted(t["channels"].items()):
            ready, later = split(c["deferred"], now)
            if c["paused"]:
                with Connection.connect(b.tcp_address) as idle:
                    idle.identify()
                    idle.sub(name, cname, rdy=100)
                    wait_for(lambda: channel(b, name, cname)["client_count"] == 1, what="the subscription")
                    assert channel(b, name, cname)["in_flight_count"] == 0, f"paused {name}/{cname} delivered"
                http_post(b, "/channel/unpause", topic=name, channel=cname)
            receive(b, messages, name, cname, {**c["ready"], **ready}, len(later))
            left[name, cname] = len(later)
        if t["paused"]:  # what the topic held goes to its channels once it is unpaused
            assert topic_depth(b, name) == len(t["held"])
            http_post(b, "/topic/unpause", topic=name)
            for cname in sorted(t["channels"]):
                receive(b, messages, name, cname, held_ready, len(held_later) + left[name, cname])
                left[name, cname] += len(held_later)
        elif not t["channels"]:  # the first channel takes what the topic held
            receive(b, messages, name, "first", held_ready, len(held_later))
            left[name, "first"] = len(held_later)
    return left


def test_old_data_dir_is_read(tmp_path, old_state):
    """Every topic and channel comes back as it was and delivers what it had left; the
    broker appends to the old topics and reads its own writes over the old files."""
    wait_out_due(old_state)
    data = extract(tmp_path)
    b = Broker(data, *old_state["broker_args"]).start()
    try:
        now = time.time_ns()
        check_stats(b, expected_stats(old_state, now))
        left = check_deliveries(b, old_state, now)
        # new messages land beside the old files and reach the old channels
        new = {"new": {"sha256": hashlib.sha256(b"after the restart").hexdigest(), "id": None}}
        with Connection.connect(b.tcp_address) as p:
            for topic in ("t.twochan", "t.consumed", "t.nochan", ".."):
                p.pub(topic, b"after the restart")
        for topic, cname in (("t.twochan", "done"), ("t.twochan", "todo"), ("t.consumed", "c"),
                             ("t.nochan", "first"), ("..", "c")):
            receive(b, new, topic, cname, {"new": 1}, left[topic, cname])
    finally:
        code = b.stop()
    assert code == 0, b.log_text()[-4000:]
    # what the broker under test wrote over the old files reads back as well
    b = Broker(data, *old_state["broker_args"]).start()
    try:
        for (topic, cname), deferred in left.items():
            wait_for(lambda: counts(b, topic, cname, "depth", "deferred_count") == (0, deferred),
                     what=f"{topic}/{cname} after a second restart")
    finally:
        code = b.stop()
    assert code == 0, b.log_text()[-4000:]


def normalized(state: dict) -> dict:
    """The state without what differs from run to run: times, ids and the hash-placed
    files' details (which acceptor took a publish) never appear in it."""
    out = json.loads(json.dumps(state))
    del out["generated_unix_ns"]
    for m in out["messages"].values():
        m["id"] = m["id"] is not None
        m["timestamp"] = m["timestamp"] is not None
    for t in out["topics"].values():
        for entries in [t["held"], *(c["deferred"] for c in t["channels"].values())]:
            for d in entries.values():
                d["due_unix_ns"] = d["due_unix_ns"] > 0
    return out


def test_the_generator_still_runs(tmp_path, old_state):
    """make_olddata.py runs on the code at hand and describes the directory it makes as
    the committed fixture's description does (the script and the fixture agree)."""
    from tests.fixtures import make_olddata

    data, state = make_olddata.generate(tmp_path)
    assert normalized(state) == normalized(old_state)
    assert len(make_olddata.tarball(data)) < 1 << 20
