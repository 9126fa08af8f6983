"""Rewind (issue 23, replay): /channel/rewind and /channel/create?from= with the project's
client and pynsq: exactly the right messages again, in order per acceptor stream, other
channels untouched, the exact errors, and a replay that survives a graceful restart and
kill -9 of the router, the acceptors and the supervisor."""
from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import datetime, timezone

import orjson
import pytest

from nsqmp.client import Connection
from tests.harness import Broker, channel_stats, nothing_within, wait_for

# spread: publishers on both acceptors, so a replay crosses two streams
ARGS = ("--max-bytes-per-file", str(32 * 1024), "--retention-bytes", "64MB", "--sync-timeout", "200ms",
        "--acceptor-steering", "spread")
BODY = b"." * 300


def start(tmp_path) -> Broker:
    return Broker(tmp_path / "data", *ARGS).start()


def stream_of(msg_id: bytes) -> int:
    """The snowflake node of a message id: one per acceptor stream."""
    return (int(msg_id, 16) >> 12) & 0x3FF


def publishers(b: Broker, n: int) -> list[Connection]:
    """n publisher connections, each on a different acceptor (told by a probe's id)."""
    found: dict[int, Connection] = {}
    with Connection.connect(b.tcp_address) as probe:
        probe.identify()
        probe.sub("probe", "p", rdy=1)
        for _ in range(40):
            p = Connection.connect(b.tcp_address)
            p.pub("probe", b"?")
            m = probe.read_message()
            probe.fin(m.id)
            node = stream_of(m.id)
            if node in found:
                p.close()
            else:
                found[node] = p
            if len(found) == n:
                return list(found.values())
    raise AssertionError("no publisher on every acceptor")


def consumer(b: Broker, topic: str, channel: str, rdy: int = 200) -> Connection:
    c = Connection.connect(b.tcp_address, timeout=20)
    c.identify()
    c.sub(topic, channel, rdy=rdy)
    return c


def take(c: Connection, n: int) -> list:
    """n messages, each finished."""
    out = []
    for _ in range(n):
        m = c.read_message()
        c.fin(m.id)
        out.append(m)
    return out


def settled(b: Broker, topic: str, channel: str) -> None:
    """The FINs just sent have reached the router: nothing of the channel is in flight. A
    consumer's acceptor may answer FINs with frames sent ahead before its router has seen
    them, and a rewind replays a message still in flight once more (two deliveries of one
    ID at once): a test of what a rewind replays waits for this first."""
    wait_for(lambda: channel_stats(b, topic, channel)["in_flight_count"] == 0,
             what=f"{topic}/{channel} with nothing in flight")


def post(b: Broker, path: str) -> tuple[int, dict]:
    status, body, _ = b.http("POST", path)
    return status, orjson.loads(body) if body else {}


def in_stream_order(msgs: list) -> bool:
    """Within each acceptor stream, ids (and so publish order) only grow."""
    last: dict[int, int] = {}
    for m in msgs:
        node, v = stream_of(m.id), int(m.id, 16)
        if v <= last.get(node, -1):
            return False
        last[node] = v
    return True


def rfc3339(ns: int) -> str:
    return datetime.fromtimestamp(ns // 10**9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + ".%09dZ" % (ns % 10**9)


def test_rewind_to_earliest_two_streams_other_channel_untouched(tmp_path):
    b = start(tmp_path)
    try:
        pubs = publishers(b, 2)
        a, other = consumer(b, "t", "a"), consumer(b, "t", "other")
        sent = []
        for i in range(20):  # 20 batches of 30, alternating streams: several files each
            batch = [b"%04d-%02d" % (i, k) + BODY for k in range(30)]
            pubs[i % 2].mpub("t", batch)
            sent += batch
        assert sorted(m.body for m in take(a, 600)) == sorted(sent)
        assert len(take(other, 600)) == 600
        settled(b, "t", "a")
        status, answer = post(b, "/channel/rewind?topic=t&channel=a&to=earliest")
        assert status == 200 and answer["messages"] == 600 and answer["earliest"] is True
        assert len(answer["from"]) == 2
        again = take(a, 600)
        assert sorted(m.body for m in again) == sorted(sent)  # each exactly once
        assert in_stream_order(again)
        assert all(m.attempts == 1 for m in again)
        nothing_within(a, 0.3)
        nothing_within(other, 0.3)  # the other channel is untouched
        ch = {c["channel_name"]: c for c in b.stats(topic="t")["topics"][0]["channels"]}
        assert ch["a"]["message_count"] == 1200 and ch["other"]["message_count"] == 600
        assert ch["a"]["depth"] == 0
        for c in (a, other, *pubs):
            c.close()
    finally:
        assert b.stop() == 0


def test_rewind_to_a_time_and_to_an_id(tmp_path):
    b = start(tmp_path)
    try:
        (p,) = publishers(b, 1)
        first = [b"first-%03d" % i + BODY for i in range(300)]
        second = [b"second-%03d" % i + BODY for i in range(300)]
        for i in range(0, 300, 50):
            p.mpub("t", first[i:i + 50])
        time.sleep(0.05)
        cut = time.time_ns()
        time.sleep(0.05)
        for i in range(0, 300, 50):
            p.mpub("t", second[i:i + 50])
        c = consumer(b, "t", "c")
        msgs = take(c, 600)
        assert [m.body for m in msgs] == first + second

        settled(b, "t", "c")
        status, answer = post(b, f"/channel/rewind?topic=t&channel=c&to={rfc3339(cut)}")
        assert (status, answer["messages"], answer["earliest"]) == (200, 300, False)
        assert [m.body for m in take(c, 300)] == second
        nothing_within(c, 0.3)

        pick = msgs[123]  # an id: from that message of its stream on
        status, answer = post(b, f"/channel/rewind?topic=t&channel=c&to={pick.id.decode()}")
        assert (status, answer["messages"]) == (200, 477)
        assert [m.body for m in take(c, 477)] == (first + second)[123:]

        settled(b, "t", "c")
        status, answer = post(b, "/channel/rewind?topic=t&channel=c&to=2001-01-01T00:00:00Z")
        assert (status, answer["messages"], answer["earliest"]) == (200, 600, True)  # before all: the earliest
        assert [m.body for m in take(c, 600)] == first + second
        nothing_within(c, 0.3)
        c.close()
        p.close()
    finally:
        assert b.stop() == 0


def test_create_from(tmp_path):
    b = start(tmp_path)
    try:
        (p,) = publishers(b, 1)
        old = [b"old-%03d" % i + BODY for i in range(200)]
        p.mpub("t", old[:100])
        p.mpub("t", old[100:])
        with consumer(b, "t", "first") as c:
            take(c, 200)
        # without from: as today, a new channel gets only what comes later
        assert b.http("POST", "/channel/create?topic=t&channel=plain")[:2] == (200, b"")
        status, answer = post(b, "/channel/create?topic=t&channel=past&from=earliest")
        assert (status, answer["created"], answer["messages"]) == (200, True, 200)
        p.pub("t", b"new")
        with consumer(b, "t", "past") as c:
            assert [m.body for m in take(c, 201)] == old + [b"new"]
            nothing_within(c, 0.3)
        with consumer(b, "t", "plain") as c:
            assert [m.body for m in take(c, 1)] == [b"new"]
            nothing_within(c, 0.3)
        p.close()
    finally:
        assert b.stop() == 0


def test_errors(tmp_path):
    b = start(tmp_path)
    try:
        assert b.http("POST", "/topic/create?topic=t")[0] == 200
        assert b.http("POST", "/channel/create?topic=t&channel=c")[0] == 200
        cases = [
            ("POST", "/channel/rewind?topic=nope&channel=c&to=earliest", 404, "TOPIC_NOT_FOUND"),
            ("POST", "/channel/rewind?topic=t&channel=nope&to=earliest", 404, "CHANNEL_NOT_FOUND"),
            ("POST", "/channel/rewind?topic=t&channel=c&to=00000000000000ff", 404, "MESSAGE_NOT_FOUND"),
            ("POST", "/channel/rewind?topic=t&channel=c", 400, "MISSING_ARG_TO"),
            ("POST", "/channel/rewind?topic=t&channel=c&to=yesterday", 400, "INVALID_TO"),
            ("POST", "/channel/rewind?topic=t&channel=c&to=2026-13-01T00:00:00Z", 400, "INVALID_TO"),
            ("POST", "/channel/rewind?topic=t&channel=c&to=2026-01-01T00:00:00", 400, "INVALID_TO"),
            ("POST", "/channel/rewind?channel=c&to=earliest", 400, "MISSING_ARG_TOPIC"),
            ("POST", "/channel/rewind?topic=t&to=earliest", 400, "MISSING_ARG_CHANNEL"),
            ("POST", "/channel/rewind?topic=t!&channel=c&to=earliest", 400, "INVALID_ARG_TOPIC"),
            ("GET", "/channel/rewind?topic=t&channel=c&to=earliest", 405, "METHOD_NOT_ALLOWED"),
            ("PUT", "/channel/rewind?topic=t&channel=c&to=earliest", 405, "METHOD_NOT_ALLOWED"),
            ("POST", "/channel/create?topic=t&channel=d&from=soon", 400, "INVALID_FROM"),
            ("POST", "/channel/create?topic=nope&channel=d&from=earliest", 404, "TOPIC_NOT_FOUND"),
            ("POST", "/channel/rewind?topic=e%23ephemeral&channel=c&to=earliest", 404, "TOPIC_NOT_FOUND"),
        ]
        for method, path, status, code in cases:
            got = b.http(method, path)
            assert (got[0], orjson.loads(got[1])) == (status, {"message": code}), path
        assert b.http("POST", "/topic/create?topic=e%23ephemeral")[0] == 200
        assert b.http("POST", "/channel/create?topic=e%23ephemeral&channel=c")[0] == 200
        got = b.http("POST", "/channel/rewind?topic=e%23ephemeral&channel=c&to=earliest")
        assert (got[0], orjson.loads(got[1])) == (400, {"message": "EPHEMERAL_TOPIC"})
        # nothing retained yet: a rewind of an empty topic is no error, and replays nothing
        assert post(b, "/channel/rewind?topic=t&channel=c&to=earliest") == (
            200, {"messages": 0, "earliest": True, "from": {}})
    finally:
        assert b.stop() == 0


def test_rewind_with_pynsq(tmp_path):
    nsq = pytest.importorskip("nsq")
    b = start(tmp_path)
    try:
        (p,) = publishers(b, 1)
        sent = [b"py-%03d" % i for i in range(300)]
        p.mpub("t", sent[:150])
        p.mpub("t", sent[150:])
        p.close()
        got: list[bytes] = []

        def handler(message) -> bool:
            got.append(bytes(message.body))
            return True

        async def scenario() -> None:
            reader = nsq.Reader("t", "py", handler, nsqd_tcp_addresses=[b.tcp_address], max_in_flight=50)
            try:
                await _until(lambda: len(got) >= 300)
                assert post(b, "/channel/rewind?topic=t&channel=py&to=earliest")[0] == 200
                await _until(lambda: len(got) >= 600)
                await asyncio.sleep(0.3)
            finally:
                reader.connect_to_nsqd = lambda *a, **k: None
                reader.close()

        asyncio.run(scenario())
        assert got == sent + sent
    finally:
        assert b.stop() == 0


async def _until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def _kill_children(b: Broker, prefix: str) -> None:
    """SIGKILL every child whose title starts with prefix; wait for their successors."""
    old = {t: pid for t, pid in b.children().items() if t.startswith(prefix)}
    for pid in old.values():
        os.kill(pid, signal.SIGKILL)
    for title, pid in old.items():
        wait_for(lambda: b.children().get(title) not in (None, pid), timeout=15, what=f"new {title}")


@pytest.mark.parametrize("how", ["graceful", "router", "acceptor", "supervisor"])
def test_replay_survives_a_restart_in_its_middle(tmp_path, how):
    b = start(tmp_path)
    try:
        pubs = publishers(b, 2)
        sent = []
        for i in range(30):
            batch = [b"%04d-%02d" % (i, k) + BODY for k in range(50)]
            pubs[i % 2].mpub("t", batch)
            sent += batch
        for p in pubs:
            p.close()
        c = consumer(b, "t", "c")
        take(c, 1500)
        settled(b, "t", "c")
        assert post(b, "/channel/rewind?topic=t&channel=c&to=earliest")[1]["messages"] == 1500
        before = {m.body for m in take(c, 400)}  # part of the replay, then the crash
        time.sleep(0.5)  # the FINs' acks reach the log (sync-timeout 200ms)
        c.close()
        if how == "graceful":
            assert b.stop() == 0
            b.start()
        elif how == "supervisor":  # the children die with it (the lifeline)
            os.kill(b.proc.pid, signal.SIGKILL)
            b.proc.wait(10)
            b._log.close()
            b.start()
        else:
            _kill_children(b, f"nsqmp {how}")
            b.wait_ping()
        c = consumer(b, "t", "c")
        after = set()
        missing = set(sent) - before
        while missing - after:  # everything from the point at least once (duplicates allowed)
            m = c.read_message()
            c.fin(m.id)
            assert m.body in set(sent)
            after.add(m.body)
        ch = wait_for(lambda: (s := b.stats(topic="t")["topics"][0]["channels"][0])["depth"] == 0
                      and s["in_flight_count"] == 0 and s, what="the replay drained")
        # a graceful stop keeps the count; after a kill -9 it is recounted from the files
        assert ch["message_count"] >= (3000 if how == "graceful" else len(missing))
        c.close()
    finally:
        if b.proc is not None and b.proc.poll() is None:
            assert b.stop() == 0


def _segment_file(path, n: int, evil: bool) -> list[tuple[int, int, int]]:
    """A segment file of n records (every 7th deferred; with evil, bodies that hold a whole
    valid record); (offset, timestamp, id) of each."""
    from nsqmp.diskqueue.segment import encode
    from nsqmp.layouts import MESSAGE_HEAD, SEGMENT_HEADER, SEGMENT_HEADER_SIZE, SEGMENT_MAGIC, SEGMENT_VERSION

    out, blob, pos = [], bytearray(), SEGMENT_HEADER_SIZE
    for i in range(n):
        ts, mid = 1_000_000 + i * 10, 5_000 + i * 3
        inner = encode([MESSAGE_HEAD.pack(ts + 5, 0, b"%016x" % (mid + 1)) + b"fake"]) if evil else b""
        payload = MESSAGE_HEAD.pack(ts, 0, b"%016x" % mid) + inner + b"body-%d" % i
        rec = encode([payload], due_ns=ts if i % 7 == 0 else 0)
        out.append((pos, ts, mid))
        blob += rec
        pos += len(rec)
    head = SEGMENT_HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION, 0, 0).ljust(SEGMENT_HEADER_SIZE, b"\0")
    path.write_bytes(head + blob + bytes(64))
    return out


@pytest.mark.parametrize("evil", [False, True], ids=["plain", "bodies-holding-records"])
def test_find_in_a_big_file(tmp_path, evil):
    from nsqmp.router.rewind import NotFound, find_in
    from nsqmp.router.topicfiles import Segment

    path = tmp_path / "00.00000000.seg"
    recs = _segment_file(path, 20_000, evil)
    seg = Segment(0, 0, str(path))
    seg.records, seg.end = len(recs), path.stat().st_size - 64
    seg.marks = [(recs[i][0], i) for i in range(1000, len(recs), 1000)]  # as count_bytes leaves them
    for k in (0, 1, 2, 4_999, 10_000, 13_337, 19_999):
        offset, ts, mid = recs[k]
        assert find_in(seg, ts=ts) == (offset, k)
        assert find_in(seg, ts=ts - 3) == (offset, k)  # between two records: the later one
        assert find_in(seg, mid=mid) == (offset, k)
    assert find_in(seg, ts=recs[-1][1] + 1) is None
    assert find_in(seg, ts=0) == (recs[0][0], 0)
    with pytest.raises(NotFound):
        find_in(seg, mid=recs[500][2] + 1)


def test_replay_from_a_time_survives_kill_9_and_restarts_read_only_what_is_wanted(tmp_path):
    """Kept files are written down in meta.json: after a kill -9 in the middle of a replay
    from a time, the files before the point are not read for anyone (nothing before the
    point comes again), the files after it are read for the rewound channel only."""
    b = start(tmp_path)
    try:
        (p,) = publishers(b, 1)
        c, other = consumer(b, "t", "c"), consumer(b, "t", "other")
        early = [b"early-%04d" % i + BODY for i in range(600)]
        late = [b"late-%04d" % i + BODY for i in range(600)]
        for i in range(0, 600, 50):
            p.mpub("t", early[i:i + 50])
        time.sleep(0.05)
        cut = time.time_ns()
        for i in range(0, 600, 50):
            p.mpub("t", late[i:i + 50])
        p.close()
        take(c, 1200)
        take(other, 1200)
        other.close()
        settled(b, "t", "c")
        assert post(b, f"/channel/rewind?topic=t&channel=c&to={rfc3339(cut)}")[1]["messages"] == 600
        before = {m.body for m in take(c, 200)}
        time.sleep(0.6)  # acks in the log, the kept files written down (sync-timeout 200ms)
        c.close()
        _kill_children(b, "nsqmp router")
        b.wait_ping()
        stats = {ch["channel_name"]: ch for ch in b.stats(topic="t")["topics"][0]["channels"]}
        assert stats["other"]["depth"] == 0  # nothing comes back to the other channel
        c = consumer(b, "t", "c")
        after = set()
        while set(late) - before - after:
            m = c.read_message()
            c.fin(m.id)
            assert m.body in set(late), m.body  # nothing from before the point
            after.add(m.body)
        c.close()
    finally:
        assert b.stop() == 0
