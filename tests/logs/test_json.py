"""`--log-format json`: one JSON object per line, for `nsqmp serve` and the lookupd
(issue 21): time (RFC 3339, UTC, milliseconds), level, role, pid, logger, msg, and the
line's own fields."""
from __future__ import annotations

import re
import subprocess
import sys

import orjson

from nsqmp.client import Connection
from tests.harness import wait_for

TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _objects(text: str) -> list[dict]:
    """Every line of the log as a JSON object (any other line fails the test)."""
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


def _find(objects: list[dict], msg: str) -> dict:
    return next(o for o in objects if o["msg"].startswith(msg))


def test_broker_writes_one_json_object_per_line(make_broker):
    b = make_broker("--log-format", "json", "--acceptors", "1")
    with Connection.connect(b.tcp_address) as c:
        remote = "127.0.0.1:%d" % c.sock.getsockname()[1]
        c.identify(client_id="json-1", user_agent="jsontest/2")
        c.sub("json_t", "json_c")
    wait_for(lambda: "exiting ioloop" in b.log_text() and "new channel(json_c)" in b.log_text(), what="lines")
    objects = _objects(b.log_text())
    for o in objects:
        assert TIME.match(o["time"]), o
        assert o["level"] in ("debug", "info", "warn", "error", "fatal"), o
        assert isinstance(o["pid"], int) and o["logger"].startswith("nsqmp"), o
    children = b.children()
    ready = _find(objects, "nsqmp ready")
    assert ready["role"] == "supervisor" and ready["pid"] == b.proc.pid
    new = _find(objects, f"TCP: new client({remote})")
    assert new["role"] == "acceptor 0" and new["pid"] == children["nsqmp acceptor 0"]
    assert new["remote"] == remote and new["level"] == "info"
    identify = _find(objects, f"[{remote}] IDENTIFY:")
    assert (identify["client_id"], identify["user_agent"]) == ("json-1", "jsontest/2")
    gone = _find(objects, f"PROTOCOL(V2): [{remote}] exiting ioloop")
    assert (gone["remote"], gone["client_id"], gone["user_agent"]) == (remote, "json-1", "jsontest/2")
    created = _find(objects, "TOPIC(json_t): created")
    assert created["role"].startswith("router ") and created["topic"] == "json_t"
    assert created["pid"] == children[f"nsqmp {created['role']}"]
    channel = _find(objects, "TOPIC(json_t): new channel(json_c)")
    assert (channel["topic"], channel["channel"]) == ("json_t", "json_c")


def test_lookupd_writes_json_too(tmp_path):
    log = tmp_path / "lookupd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "nsqmp.lookupd", "-log-format=json",
                                 "-tcp-address=127.0.0.1:0", "-http-address=127.0.0.1:0"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "HTTP: listening on" in log.read_text(), what="lookupd listening")
        objects = _objects(log.read_text())
        listening = _find(objects, "TCP: listening on 127.0.0.1:")
        assert listening["role"] == "lookupd" and listening["level"] == "info"
        assert listening["pid"] == proc.pid and TIME.match(listening["time"])
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    bad = subprocess.run([sys.executable, "-m", "nsqmp.lookupd", "-log-format=xml"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 2 and "invalid log format 'xml'" in bad.stderr
