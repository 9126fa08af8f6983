"""nsqlookupd's command line, verbatim: Go flag syntax, defaults, config file, version,
start-up lines with the bound ports, signals and exit codes."""
from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

import pytest

from nsqmp.lookupd.launcher import Lookupd
from nsqmp.lookupd.options import (
    HelpRequested, Options, UsageError, go_duration, parse_flags, resolve,
)
from tests.lookupd.helpers import V1

DROPIN = [sys.executable, "-m", "nsqmp.lookupd"]
LINE = re.compile(r"^\[nsqlookupd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} (DEBUG|INFO|WARNING|ERROR|FATAL): (.*)$")


def run(*args: str, cmd: list[str] = DROPIN) -> subprocess.CompletedProcess:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=30)


# -- parsing, in process ------------------------------------------------------------------------
def test_go_flag_syntax():
    assert parse_flags(["-tcp-address=a:1", "--http-address", "b:2", "-version", "--verbose=false",
                        "-tombstone-lifetime", "1m30s", "--inactive-producer-timeout=250ms",
                        "-log-level=WARN", "-tcp-address", "c:3"]) == {
        "tcp-address": "c:3", "http-address": "b:2", "version": True, "verbose": False,
        "tombstone-lifetime": 90.0, "inactive-producer-timeout": 0.25, "log-level": "warn"}
    # the first non-flag argument, or "--", ends the flags
    assert parse_flags(["-verbose", "stray", "-bogus"]) == {"verbose": True}
    assert parse_flags(["--", "-bogus"]) == {}
    assert parse_flags(["-version", "false"]) == {"version": True}  # a bare bool takes no value


@pytest.mark.parametrize("argv,message", [
    (["-bogus"], "flag provided but not defined: -bogus"),
    (["--bogus=1"], "flag provided but not defined: -bogus"),
    (["-tcp-address"], "flag needs an argument: -tcp-address"),
    (["-tombstone-lifetime=5"], 'invalid value "5" for flag -tombstone-lifetime: parse error'),
    (["-inactive-producer-timeout", "soon"], 'invalid value "soon" for flag -inactive-producer-timeout: parse error'),
    (["-version=maybe"], 'invalid boolean value "maybe" for -version: parse error'),
    (["-log-level=loud"], "invalid value \"loud\" for flag -log-level: invalid log level 'loud' "
                          "(debug, info, warn, error, fatal)"),
    (["---x"], "bad flag syntax: ---x"),
    (["-=x"], "bad flag syntax: -=x"),
])
def test_go_flag_errors(argv, message):
    with pytest.raises(UsageError) as info:
        parse_flags(argv)
    assert str(info.value) == message


def test_help_and_defaults():
    for argv in (["-h"], ["--help"], ["-help"]):
        with pytest.raises(HelpRequested):
            parse_flags(argv)
    opts = resolve(parse_flags([]))
    assert opts == Options(tcp_address="0.0.0.0:4160", http_address="0.0.0.0:4161",
                           broadcast_address=socket.gethostname(), inactive_producer_timeout=300.0,
                           tombstone_lifetime=45.0, log_level="info", log_prefix="[nsqlookupd] ")
    assert resolve(parse_flags(["-broadcast-address="])).broadcast_address == ""  # explicit empty stays
    assert [go_duration(s) for s in (300, 45, 3600, 1.5, 0.25, 0, 90)] == \
        ["5m0s", "45s", "1h0m0s", "1.5s", "250ms", "0s", "1m30s"]


def test_config_file_then_flags(tmp_path):
    cfg = tmp_path / "nsqlookupd.cfg"
    cfg.write_text('tcp_address = "127.0.0.1:7000"\nbroadcast_address = "from-config"\n'
                   'tombstone_lifetime = "10s"\ninactive_producer_timeout = 2000\nlog_level = "debug"\n'
                   'some_future_option = 1\n')
    opts = resolve(parse_flags(["--config", str(cfg), "-broadcast-address=from-flag"]))
    assert (opts.tcp_address, opts.broadcast_address) == ("127.0.0.1:7000", "from-flag")
    assert (opts.tombstone_lifetime, opts.inactive_producer_timeout, opts.log_level) == (10.0, 2.0, "debug")


# -- the processes -------------------------------------------------------------------------------
def test_version_in_nsqlookupds_format():
    out = run("-version")
    assert out.returncode == 0 and out.stderr == ""
    assert re.fullmatch(r"nsqlookupd v1\.3\.0 \(built w/nsqmp-[a-z0-9.-]+-python3\.\d+\.\d+\)\n", out.stdout), out.stdout
    assert run("--version").stdout == out.stdout
    assert run("-version", "-config=/nonexistent").returncode == 0  # as nsqlookupd: version first


def test_usage_errors_exit_2_help_exits_0():
    out = run("-bogus", "1")
    assert out.returncode == 2
    assert out.stderr.startswith("flag provided but not defined: -bogus\nUsage of nsqlookupd:\n")
    assert "  -tombstone-lifetime duration\n    \tduration of time a producer will remain tombstoned" in out.stderr
    assert "(default 5m0s)" in out.stderr and '(default "0.0.0.0:4160")' in out.stderr
    out = run("-tombstone-lifetime=forever")
    assert out.returncode == 2 and out.stderr.splitlines()[0] == \
        'invalid value "forever" for flag -tombstone-lifetime: parse error'
    out = run("-h")
    assert out.returncode == 0 and out.stderr.startswith("Usage of nsqlookupd:\n")
    out = run("--help", cmd=[sys.executable, "-m", "nsqmp", "lookupd"])
    assert out.returncode == 0 and out.stderr.startswith("Usage of nsqmp lookupd:\n")
    assert '(default "127.0.0.1:4160")' in out.stderr


def test_fatal_start_up_errors_exit_1(tmp_path):
    bad = tmp_path / "bad.cfg"
    bad.write_text("tcp_address = [1, 2\n")
    out = run("-config", str(bad))
    assert out.returncode == 1
    assert LINE.match(out.stderr.splitlines()[0]).group(1) == "FATAL"
    assert f"failed to load config file {bad}" in out.stderr
    bad.write_text('tombstone_lifetime = "soon"\n')
    out = run("-config", str(bad))
    assert out.returncode == 1 and "failed parsing tombstone_lifetime 'soon'" in out.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run(f"-tcp-address=127.0.0.1:{port}", "-http-address=127.0.0.1:0")
    assert out.returncode == 1
    assert f"FATAL: failed to instantiate nsqlookupd - listen tcp 127.0.0.1:{port}: bind: address already in use" \
        in out.stderr
    out = run("-tcp-address=127.0.0.1", "-http-address=127.0.0.1:0")
    assert out.returncode == 1 and "missing port in address" in out.stderr


def _start_lines(d: Lookupd) -> list[tuple[str, str]]:
    lines = []
    for line in d.log_text().splitlines():
        m = LINE.match(line)
        assert m, f"not an nsqlookupd log line: {line!r}"
        lines.append((m.group(1), m.group(2)))
    return lines


def test_start_up_lines_port_0_and_sigterm(tmp_path):
    d = Lookupd("-tcp-address=127.0.0.1:0", "--http-address", "127.0.0.1:0", "-inactive-producer-timeout", "5m",
                "--tombstone-lifetime=45s", "-verbose", "-broadcast-address", "lookupd.example",
                log_path=tmp_path / "l.log").start()
    try:
        lines = _start_lines(d)
        assert lines[0] == ("INFO", run("-version").stdout.strip())
        assert lines[1] == ("INFO", f"TCP: listening on 127.0.0.1:{d.tcp_port}")
        assert lines[2] == ("INFO", f"HTTP: listening on 127.0.0.1:{d.http_port}")
        assert d.tcp_port and d.http_port
        with V1(d.tcp_port) as c:
            assert c.identify()["broadcast_address"] == "lookupd.example"
        assert d.stop(signal.SIGTERM) == 0
        assert _start_lines(d)[-2:] == [("INFO", f"TCP: closing 127.0.0.1:{d.tcp_port}"),
                                        ("INFO", f"HTTP: closing 127.0.0.1:{d.http_port}")]
    finally:
        if d.alive():
            d.kill()


def test_wildcard_address_is_shown_as_go_shows_it_and_sigint(tmp_path):
    d = Lookupd("-tcp-address=0.0.0.0:0", "-http-address=:0", "-log-level=debug", "-log-prefix=[lk] ",
                log_path=tmp_path / "l.log").start()
    try:
        text = d.log_text()
        assert re.search(rf"^\[lk\] .* INFO: TCP: listening on \[::\]:{d.tcp_port}$", text, re.MULTILINE), text
        assert re.search(rf"^\[lk\] .* INFO: HTTP: listening on \[::\]:{d.http_port}$", text, re.MULTILINE), text
        assert d.http("GET", "/ping")[0] == 200  # IPv4 reaches the dual-stack socket
        assert "DEBUG: 200 GET /ping" in d.log_text()
        assert d.stop(signal.SIGINT) == 0
    finally:
        if d.alive():
            d.kill()


def test_config_file_drives_the_daemon(tmp_path):
    cfg = tmp_path / "nsqlookupd.cfg"
    cfg.write_text('tcp_address = "127.0.0.1:0"\nhttp_address = "127.0.0.1:0"\nbroadcast_address = "cfg-host"\n'
                   'log_prefix = "[cfg] "\n')
    d = Lookupd("-config", str(cfg), log_path=tmp_path / "l.log", port0=False).start()  # the file's addresses
    try:
        assert d.log_text().startswith("[cfg] ")
        with V1(d.tcp_port) as c:
            assert c.identify()["broadcast_address"] == "cfg-host"
        assert d.stop() == 0
    finally:
        if d.alive():
            d.kill()


def test_nsqmp_lookupd_subcommand(tmp_path):
    d = Lookupd(log_path=tmp_path / "own.log", program=[sys.executable, "-m", "nsqmp", "lookupd"]).start()
    try:
        assert d.get("/info") == {"version": "1.3.0"}
        assert d.stop() == 0
    finally:
        if d.alive():
            d.kill()


def test_console_script_is_installed():
    import os
    import subprocess
    import sys

    exe = os.path.join(os.path.dirname(sys.executable), "nsqmp-nsqlookupd")
    out = subprocess.run([exe, "-version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("nsqlookupd v1.3.0"), out
