"""nsqmp to-file against a running broker: nothing acknowledged is lost (SIGTERM and
SIGKILL mid-way, then a second run), rotation by size and interval, gzip, file names."""
from __future__ import annotations

import gzip
import os
import signal
import socket
import time
from pathlib import Path

from tests.harness import wait_for

N = 5000


def _lines(out: Path) -> list[bytes]:
    """Every line of every file, gzipped or not."""
    if not out.exists():
        return []
    lines = []
    for f in sorted(out.iterdir()):
        data = gzip.decompress(f.read_bytes()) if f.name.endswith(".gz") else f.read_bytes()
        lines += data.splitlines()
    return lines


def _count(out: Path) -> int:
    """How many lines the files hold, or -1 while a gzip member is still being written."""
    try:
        return len(_lines(out))
    except (EOFError, gzip.BadGzipFile):
        return -1


def _channel(broker, topic: str, channel: str = "nsq_to_file") -> dict:
    (t,) = [t for t in broker.stats()["topics"] if t["topic_name"] == topic]
    (c,) = [c for c in t["channels"] if c["channel_name"] == channel]
    return c


def _publish(broker, topic: str, n: int) -> set[bytes]:
    bodies = [b"msg-%06d" % i for i in range(n)]
    for i in range(0, n, 1000):
        assert broker.http("POST", f"/mpub?topic={topic}", b"\n".join(bodies[i:i + 1000]))[0] == 200
    return set(bodies)


def _start(utils, broker, out: Path, max_in_flight: int = 200):
    return utils("to-file", "--topic", "t", "--nsqd-tcp-address", broker.tcp_address, "--output-dir", str(out),
                 "--max-in-flight", str(max_in_flight), "--sync-interval", "0.5s")


def test_sigterm_mid_way_loses_nothing_acknowledged(broker, utils, tmp_path):
    sent = _publish(broker, "t", N)
    out = tmp_path / "out"
    tool = _start(utils, broker, out, max_in_flight=5)  # an fsync every 4 messages: slow enough to stop mid-way
    wait_for(lambda: len(_lines(out)) > 0, what="the first lines")
    assert tool.stop(signal.SIGTERM) == 0, tool.stderr()
    assert "protocol error" not in tool.stderr()  # FINs after CLS are fine; a second CLS is not
    first = _lines(out)
    assert 0 < len(first) < N, "stopped too late to test a stop mid-way"
    # what was written was FINished, what was not is still the broker's: exactly
    wait_for(lambda: _channel(broker, "t")["in_flight_count"] == 0, what="no message in flight")
    assert _channel(broker, "t")["depth"] == N - len(first)

    tool = _start(utils, broker, out)
    wait_for(lambda: len(_lines(out)) >= N, timeout=60, what=lambda: f"{len(_lines(out))} of {N} lines")
    assert tool.stop() == 0, tool.stderr()
    lines = _lines(out)
    assert len(lines) == N and set(lines) == sent
    assert _channel(broker, "t")["depth"] == 0


def test_sigkill_mid_way_redelivers_what_was_not_finished(broker, utils, tmp_path):
    sent = _publish(broker, "t", N)
    out = tmp_path / "out"
    tool = _start(utils, broker, out, max_in_flight=5)  # an fsync every 4 messages: slow enough to stop mid-way
    wait_for(lambda: len(_lines(out)) > 0, what="the first lines")
    tool.kill()
    tool = _start(utils, broker, out)
    wait_for(lambda: set(_lines(out)) == sent, timeout=60, what=lambda: f"{len(set(_lines(out)))} of {N} messages")
    assert tool.stop() == 0, tool.stderr()
    assert _channel(broker, "t")["depth"] == 0
    assert len(_lines(out)) >= N  # duplicates (written, not yet FINished at the kill) are allowed


def test_rotation_by_size_gzip_and_filename_format(broker, utils, tmp_path):
    body = b"x" * 99
    assert broker.http("POST", "/mpub?topic=rot", b"\n".join([body] * 300))[0] == 200
    out = tmp_path / "out"
    tool = utils("to-file", "--topic", "rot", "--nsqd-tcp-address", broker.tcp_address, "--output-dir", str(out),
                 "--gzip", "--rotate-size", "5000", "--datetime-format", "%Y", "--sync-interval", "0.3s",
                 "--filename-format", "<TOPIC>-<HOST>-<PID><REV>.<DATETIME>.log")
    wait_for(lambda: _count(out) == 300, what=lambda: f"300 lines, have {_count(out)}")
    assert tool.stop() == 0, tool.stderr()
    host = socket.gethostname().split(".")[0]
    year = time.strftime("%Y")
    names = sorted(f.name for f in out.iterdir())
    assert names == [f"rot-{host}-{tool.proc.pid}-{rev:06d}.{year}.log.gz" for rev in range(len(names))]
    assert len(names) == 6  # 5000 bytes is 50 lines of 100: rotated after each 51st
    for name in names:
        data = gzip.decompress((out / name).read_bytes())  # complete gzip members only
        assert len(data) <= 5000 + 100 and set(data.splitlines()) == {body}


def test_rotation_by_interval_and_work_dir(broker, utils, tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    tool = utils("to-file", "--topic", "iv", "--nsqd-tcp-address", broker.tcp_address, "--output-dir", str(out),
                 "--work-dir", str(work), "--rotate-interval", "0.5s", "--sync-interval", "0.2s",
                 "--skip-empty-files")
    wait_for(lambda: _has_channel(broker, "iv"), what="to-file's channel")
    broker.http("POST", "/mpub?topic=iv", b"a1\na2")
    wait_for(lambda: len(_lines(out)) == 2, what="the first file moved to the output dir")
    broker.http("POST", "/mpub?topic=iv", b"b1\nb2")
    wait_for(lambda: len(_lines(out)) == 4, what="the second file moved to the output dir")
    assert tool.stop() == 0, tool.stderr()
    files = sorted(out.iterdir())
    assert [sorted(f.read_bytes().splitlines()) for f in files] == [[b"a1", b"a2"], [b"b1", b"b2"]]
    assert os.listdir(work) == []  # finished files leave the work dir; empty ones are never made


def _has_channel(broker, topic: str) -> bool:
    return any(t["topic_name"] == topic and t["channels"] for t in broker.stats()["topics"])


def test_sighup_closes_the_file_and_the_next_message_opens_a_new_one(broker, utils, tmp_path):
    out = tmp_path / "out"
    tool = utils("to-file", "--topic", "hup", "--nsqd-tcp-address", broker.tcp_address, "--output-dir", str(out),
                 "--gzip", "--sync-interval", "0.2s")
    wait_for(lambda: _has_channel(broker, "hup"), what="to-file's channel")
    broker.http("POST", "/mpub?topic=hup", b"a1\na2")
    wait_for(lambda: _count(out) == 2, what="the first two lines synced")
    tool.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "SIGHUP: closing the files" in tool.stderr(), what="the SIGHUP handled")
    broker.http("POST", "/mpub?topic=hup", b"b1\nb2")
    wait_for(lambda: _count(out) == 4, what="two more lines")
    assert tool.stop() == 0, tool.stderr()
    files = sorted(out.iterdir())
    assert [f.name.split(".")[1][-7:] for f in files] == ["-000000", "-000001"]
    assert [sorted(gzip.decompress(f.read_bytes()).splitlines()) for f in files] == [[b"a1", b"a2"], [b"b1", b"b2"]]
