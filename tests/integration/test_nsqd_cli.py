"""`nsqmp-nsqd`: nsqd's command line, start-up lines and version, so harnesses written for
nsqd run nsqmp unchanged."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from nsqmp.client import Connection

_LINE = re.compile(r"^\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} (DEBUG|INFO|WARNING|ERROR|FATAL): (.*)$")
_LISTEN = re.compile(r"(TCP|HTTP): listening on ([\d.]+):(\d+)")


def nsqd_cmd(*args: str) -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "nsqmp-nsqd")
    return [exe, *args]


def test_version_in_nsqds_format():
    out = subprocess.run(nsqd_cmd("-version"), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert re.match(r"^nsqd v1\.3\.0 \(built w/", out.stdout), out.stdout
    out2 = subprocess.run(nsqd_cmd("--version"), capture_output=True, text=True, timeout=30)
    assert out2.stdout == out.stdout


def test_unknown_flag_is_gos_error_and_exit_code_2():
    out = subprocess.run(nsqd_cmd("-bogus", "1"), capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "flag provided but not defined: -bogus" in out.stderr


def test_go_flag_syntax_port_0_startup_lines_and_sigterm(tmp_path):
    """`-flag=value`, `-flag value`, `--flag`, bare booleans; port 0; nsqd's lines; SIGTERM."""
    args = nsqd_cmd("-tcp-address=127.0.0.1:0", "--http-address", "127.0.0.1:0",
                    "-data-path", str(tmp_path), "-mem-queue-size", "100", "-snappy",
                    "--sync-timeout=1s", "-max-rdy-count", "200")
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ports: dict[str, int] = {}
        lines = []
        deadline = time.monotonic() + 20
        while len(ports) < 2 and time.monotonic() < deadline:
            line = proc.stderr.readline().rstrip("\n")
            if not line:
                assert proc.poll() is None, "\n".join(lines)
                continue
            lines.append(line)
            m = _LINE.match(line)
            assert m, f"not an nsqd log line: {line!r}"
            listen = _LISTEN.search(m.group(2))
            if listen:
                ports[listen.group(1)] = int(listen.group(3))
        assert lines[0].endswith("INFO: " + subprocess.run(nsqd_cmd("-version"), capture_output=True,
                                                              text=True).stdout.strip())
        assert set(ports) == {"TCP", "HTTP"} and all(ports.values())
        with Connection.connect(f"127.0.0.1:{ports['TCP']}") as c:
            info = c.identify()
            assert info["max_rdy_count"] == 200
            c.pub("dropin", b"works")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert (tmp_path / "topics" / "dropin").is_dir()  # data went where -data-path said
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        proc.stderr.close()


def test_statsd_flags_start_the_broker(tmp_path):
    """nsqd's -statsd-* flags start the broker (harnesses pass them): real options now, none ignored."""
    args = nsqd_cmd("-tcp-address=127.0.0.1:0", "--http-address", "127.0.0.1:0", "-data-path", str(tmp_path),
                    "-statsd-address=127.0.0.1:8125", "-statsd-prefix", "nsq.%s", "-statsd-mem-stats")
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 20
        while not any("nsqmp ready" in line for line in lines) and time.monotonic() < deadline:
            line = proc.stderr.readline().rstrip("\n")
            if not line:
                assert proc.poll() is None, "\n".join(lines)
                continue
            assert _LINE.match(line), f"not an nsqd log line: {line!r}"
            lines.append(line)
        assert not [line for line in lines if "ignored" in line]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        proc.stderr.close()
