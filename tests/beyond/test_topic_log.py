"""GET /topic/offsets and /topic/log (nsqmp/acceptor/http_log.py, diskqueue/logread.py) against a
real broker and its real segment files: points in a stream, paging across files, the binary
form, every error, a torn tail never returned, a deleted file reported as skipped."""
from __future__ import annotations

import base64
import os
import signal
import time
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest

from nsqmp.client import wire
from nsqmp.client.sync import Connection
from nsqmp.diskqueue.logread import LOG_CHUNK, LOG_HEAD, LOG_MAGIC, parse_position
from nsqmp.diskqueue.segment import encode
from nsqmp.layouts import MESSAGE_HEAD
from tests.harness import Broker, wait_for


@pytest.fixture
def one(tmp_path):
    """One acceptor (one partition, "0"), 4 KiB segment files."""
    b = Broker(tmp_path / "data", "--acceptors", "1", "--max-bytes-per-file", "4096").start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        assert b.stop() == 0, b.log_text()


def _publish(b: Broker, topic: str, bodies: list[bytes], batch: int = 10, defer_ms: int = 0) -> None:
    with Connection.connect(b.tcp_address) as c:
        for i in range(0, len(bodies), batch):
            if defer_ms:
                for body in bodies[i:i + batch]:
                    c.send(wire.dpub(topic, defer_ms, body))
                    c.expect_ok()
            else:
                c.mpub(topic, bodies[i:i + batch])


def _log(b: Broker, **params) -> dict:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return b.get(f"/topic/log?{query}")


def _read_all(b: Broker, topic: str, start: str = "0:0", **params) -> tuple[list[dict], str, int]:
    """Page through partition 0 from start: (records, final next, pages)."""
    records, pos, pages = [], start, 0
    while True:
        got = _log(b, topic=topic, partition=0, **{"from": pos}, **params)
        pages += 1
        records += got["records"]
        if got["next"] == pos:
            return records, pos, pages
        pos = got["next"]


def _files(b: Broker, topic: str) -> list[Path]:
    return sorted((b.data_path / "topics" / topic).glob("00.*.seg"))


def test_offsets_and_paging_across_files(one):
    bodies = [b"m%04d-" % i + b"x" * 80 for i in range(200)]
    before = time.time_ns()
    _publish(one, "lg", bodies[:100])
    middle = time.time_ns()
    _publish(one, "lg", bodies[100:])
    assert len(_files(one, "lg")) >= 5

    earliest = one.get("/topic/offsets?topic=lg&at=earliest")
    latest = one.get("/topic/offsets?topic=lg&at=latest")
    assert earliest == {"topic": "lg", "partitions": {"0": "0:64"}}
    assert parse_position(latest["partitions"]["0"]) > (len(_files(one, "lg")) - 1, 64)
    assert one.get("/topic/offsets?topic=lg") == latest  # latest is the default
    assert one.get(f"/topic/offsets?topic=lg&at={before}") == earliest
    assert one.get(f"/topic/offsets?topic=lg&at={time.time_ns()}") == latest

    records, end, pages = _read_all(one, "lg", n=7)
    assert end == latest["partitions"]["0"] and pages > 200 // 7
    assert [base64.b64decode(r["body"]) for r in records] == bodies
    assert len({r["id"] for r in records}) == 200
    assert {r["offset"].split(":")[0] for r in records} == {str(i) for i in range(len(_files(one, "lg")))}
    assert all(before <= r["timestamp"] <= time.time_ns() and r["deferred_until"] is None for r in records)

    # the first record at or after a time, as unix ns and as RFC 3339 with nanoseconds
    at = one.get(f"/topic/offsets?topic=lg&at={middle}")["partitions"]["0"]
    first_after = next(r for r in records if r["timestamp"] >= middle)
    assert at == first_after["offset"]
    stamp = datetime.fromtimestamp(middle // 10**9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    rfc = f"{stamp}.{middle % 10**9:09d}Z"
    assert one.get(f"/topic/offsets?topic=lg&at={rfc}")["partitions"]["0"] == at
    rest, _, _ = _read_all(one, "lg", start=at)
    assert [base64.b64decode(r["body"]) for r in rest] == bodies[100:]

    # max_bytes: at least one record per answer; `to` is an exclusive end
    got = _log(one, topic="lg", partition=0, max_bytes=1)
    assert len(got["records"]) == 1 and got["next"] == records[1]["offset"]
    got = _log(one, topic="lg", partition=0, to=records[3]["offset"])
    assert [r["offset"] for r in got["records"]] == [r["offset"] for r in records[:3]]
    assert _log(one, topic="lg", partition=0, to=records[3]["offset"], format="next") == {
        "next": records[3]["offset"], "earliest": "0:64", "skipped": False, "count": 3}
    # a stream that has no files is empty, not an error
    assert _log(one, topic="lg", partition=5)["records"] == []


def test_binary_form_and_deferred(one):
    _publish(one, "bn", [b"plain%d" % i for i in range(5)])
    _publish(one, "bn", [b"later"], defer_ms=3_600_000)
    status, body, headers = one.http("GET", "/topic/log?topic=bn&partition=0&format=binary")
    assert status == 200 and headers["Content-Type"] == "application/octet-stream"
    magic, version, flags, _r, nseq, noff, eseq, eoff, chunks = LOG_HEAD.unpack_from(body)
    assert (magic, version, flags, eseq, eoff) == (LOG_MAGIC, 1, 0, 0, 64)
    assert f"{nseq}:{noff}" == one.get("/topic/offsets?topic=bn")["partitions"]["0"]
    at, found = LOG_HEAD.size, []
    for _ in range(chunks):
        seq, offset, size = LOG_CHUNK.unpack_from(body, at)
        at += LOG_CHUNK.size
        path = one.data_path / "topics" / "bn" / f"00.{seq:08d}.seg"
        assert body[at:at + size] == path.read_bytes()[offset:offset + size]  # as in the file
        found.append(body[at:at + size])
        at += size
    assert at == len(body)
    js = _log(one, topic="bn", partition=0)["records"]
    assert [base64.b64decode(r["body"]) for r in js] == [b"plain0", b"plain1", b"plain2", b"plain3", b"plain4",
                                                         b"later"]
    due = js[-1]["deferred_until"]
    assert due is not None and abs(due - js[-1]["timestamp"] - 3_600 * 10**9) < 10**9
    assert all(r["deferred_until"] is None for r in js[:-1])


def test_errors(one):
    _publish(one, "er", [b"x"])
    cases = {
        "/topic/log?partition=0": (400, "MISSING_ARG_TOPIC"),
        "/topic/offsets": (400, "MISSING_ARG_TOPIC"),
        "/topic/log?topic=b@d&partition=0": (400, "INVALID_TOPIC"),
        "/topic/offsets?topic=b@d": (400, "INVALID_TOPIC"),
        "/topic/log?topic=nope&partition=0": (404, "TOPIC_NOT_FOUND"),
        "/topic/offsets?topic=nope": (404, "TOPIC_NOT_FOUND"),
        "/topic/offsets?topic=er%23ephemeral": (404, "TOPIC_NOT_FOUND"),
        "/topic/log?topic=er": (400, "MISSING_ARG_PARTITION"),
        "/topic/log?topic=er&partition=x": (400, "INVALID_PARTITION"),
        "/topic/log?topic=er&partition=0&from=12": (400, "INVALID_OFFSET"),
        "/topic/log?topic=er&partition=0&from=1:-5": (400, "INVALID_OFFSET"),
        "/topic/log?topic=er&partition=0&to=a:b": (400, "INVALID_OFFSET"),
        "/topic/log?topic=er&partition=0&n=0": (400, "INVALID_N"),
        "/topic/log?topic=er&partition=0&max_bytes=-1": (400, "INVALID_MAX_BYTES"),
        "/topic/log?topic=er&partition=0&format=xml": (400, "INVALID_FORMAT"),
        "/topic/offsets?topic=er&at=yesterday": (400, "INVALID_AT"),
        "/topic/offsets?topic=er&at=2026-13-01T00:00:00Z": (400, "INVALID_AT"),
        "/topic/log?topic=er&partition=0;x": (400, "INVALID_REQUEST"),
    }
    for path, (status, message) in cases.items():
        got = one.http("GET", path)
        assert (got[0], orjson.loads(got[1])) == (status, {"message": message}), path
    for path in ("/topic/log?topic=er&partition=0", "/topic/offsets?topic=er"):
        got = one.http("POST", path)
        assert (got[0], orjson.loads(got[1])) == (405, {"message": "METHOD_NOT_ALLOWED"})
    # bounded: n and max_bytes above their caps are capped, not refused
    assert len(_log(one, topic="er", partition=0, n=10**9, max_bytes=10**12)["records"]) == 1


def test_torn_tail_is_never_returned(one):
    _publish(one, "tt", [b"whole%d" % i for i in range(3)], batch=3)
    end = one.get("/topic/offsets?topic=tt")["partitions"]["0"]
    seq, pos = parse_position(end)
    path = one.data_path / "topics" / "tt" / f"00.{seq:08d}.seg"
    head = MESSAGE_HEAD.pack(time.time_ns(), 0, b"f" * 16)
    record = encode([head + b"torn-body" * 20])
    with open(path, "r+b") as f:  # what a reader can see while a record is being written
        f.seek(pos)
        f.write(record[: len(record) // 2])
    got = _log(one, topic="tt", partition=0)
    assert [base64.b64decode(r["body"]) for r in got["records"]] == [b"whole0", b"whole1", b"whole2"]
    assert got["next"] == end and one.get("/topic/offsets?topic=tt")["partitions"]["0"] == end
    with open(path, "r+b") as f:  # now whole: visible
        f.seek(pos)
        f.write(record)
    assert base64.b64decode(_log(one, topic="tt", partition=0)["records"][-1]["body"]) == b"torn-body" * 20
    with open(path, "r+b") as f:  # torn again, and the writer dies: its next incarnation starts a new file
        f.seek(pos + len(record) // 2)
        f.write(bytes(len(record) - len(record) // 2))
    pid = one.children()["nsqmp acceptor 0"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: one.children().get("nsqmp acceptor 0") not in (None, pid), timeout=15)
    wait_for(lambda: _try_publish(one, "tt", b"after"), timeout=15)
    records, _, _ = _read_all(one, "tt")
    assert [base64.b64decode(r["body"]) for r in records] == [b"whole0", b"whole1", b"whole2", b"after"]
    assert records[-1]["offset"].split(":")[0] == str(seq + 1)


def _try_publish(b: Broker, topic: str, body: bytes) -> bool:
    try:
        _publish(b, topic, [body])
        return True
    except OSError:
        return False


def test_deleted_file_is_reported_skipped(one):
    bodies = [b"d%03d-" % i + b"y" * 100 for i in range(120)]
    _publish(one, "dl", bodies)
    files = _files(one, "dl")
    assert len(files) >= 3
    os.unlink(files[0])  # what retention (or every channel finishing it) does
    got = _log(one, topic="dl", partition=0, **{"from": "0:64"})
    assert got["skipped"] is True and got["earliest"] == "1:64"
    assert got["records"][0]["offset"] == "1:64"
    assert _log(one, topic="dl", partition=0)["skipped"] is False  # "0:0": whatever is retained
    assert one.get("/topic/offsets?topic=dl&at=earliest")["partitions"]["0"] == "1:64"
    os.unlink(files[2])  # a hole in the middle
    got = _log(one, topic="dl", partition=0, **{"from": "2:64"})
    assert got["skipped"] is True and got["records"][0]["offset"] == "3:64"


def test_a_topic_made_again_starts_a_new_log(one):
    _publish(one, "re", [b"old" * 30] * 20)
    old_end = one.get("/topic/offsets?topic=re")["partitions"]["0"]  # remembered by the acceptor
    assert one.http("POST", "/topic/delete?topic=re")[0] == 200
    _publish(one, "re", [b"new"])
    new_end = one.get("/topic/offsets?topic=re")["partitions"]["0"]
    assert new_end != old_end
    records, end, _ = _read_all(one, "re")
    assert [base64.b64decode(r["body"]) for r in records] == [b"new"] and end == new_end
