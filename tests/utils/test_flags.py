"""The utilities' command lines (Go's flag syntax, nsq's names and defaults, nsq's
checks) and their pure parts: file names, strftime, stdin splitting, the host pool.
No broker needed."""
from __future__ import annotations

import datetime
import io
import os
import socket
from types import SimpleNamespace

import pytest

from nsqmp import cli
from nsqmp.utils import tail, to_file, to_http, to_nsq
from nsqmp.utils.file_logger import filename_format, strftime
from nsqmp.utils.flags import HelpRequested, UsageError
from nsqmp.utils.upstream import HostPool
from tests.utils.helpers import run

TOOLS = {"tail": "nsq_tail", "to-file": "nsq_to_file", "to-http": "nsq_to_http", "to-nsq": "to_nsq",
         "nsq-to-nsq": "nsq_to_nsq", "stat": "nsq_stat"}


def test_go_flag_syntax():
    fs = to_file.flag_set()
    ns = fs.parse(["-topic=a", "--topic", "b", "--gzip", "-rotate-size", "100", "--sync-interval=1m30s",
                   "-skip-empty-files=false", "--nsqd-tcp-address", "h:1"])
    assert ns.topic == ["a", "b"]
    assert (ns.gzip, ns.skip_empty_files, ns.rotate_size, ns.sync_interval) == (True, False, 100, 90.0)
    assert ns.given == {"topic", "gzip", "rotate-size", "sync-interval", "skip-empty-files", "nsqd-tcp-address"}
    defaults = fs.parse([])
    assert (defaults.channel, defaults.max_in_flight, defaults.output_dir, defaults.sync_interval,
            defaults.filename_format) == ("nsq_to_file", 200, "/tmp", 30.0, "<TOPIC>.<HOST><REV>.<DATETIME>.log")
    with pytest.raises(UsageError, match="flag provided but not defined: -bogus"):
        fs.parse(["-bogus"])
    with pytest.raises(UsageError, match="flag needs an argument: -topic"):
        fs.parse(["--topic"])
    with pytest.raises(UsageError, match='invalid value "x" for flag -rotate-size'):
        fs.parse(["--rotate-size", "x"])
    with pytest.raises(HelpRequested):
        fs.parse(["-h"])


def test_every_utility_is_a_command_with_help_version_and_nsq_checks():
    text = cli.usage()
    for command in TOOLS:
        assert f"  {command} " in text
    r = run("to-file", "--help")
    assert r.returncode == 0
    assert "-sync-interval duration\n    \tsync file to disk every duration (default 30s)" in r.stderr.decode()
    assert '(default "<TOPIC>.<HOST><REV>.<DATETIME>.log")' in r.stderr.decode()
    assert "-rotate-size rotate-size\n    \trotate the file when it grows bigger than rotate-size bytes\n" in \
        r.stderr.decode()
    r = run("tail", "--bogus")
    assert r.returncode == 2 and r.stderr.decode().startswith("flag provided but not defined: -bogus\nUsage of")
    r = run("stat", "--version")
    assert (r.returncode, r.stdout.decode().split()[:2]) == (0, ["nsq_stat", "v1.3.0"])
    r = run("tail", "--topic", "t")
    assert r.returncode == 1 and "--nsqd-tcp-address or --lookupd-http-address required" in r.stderr.decode()
    r = run("to-http", "--topic", "t", "--nsqd-tcp-address", "127.0.0.1:1", "--get", "http://x/")
    assert r.returncode == 1 and "invalid GET address - must be a printf string" in r.stderr.decode()
    r = run("tail", "--topic", "t", "--nsqd-tcp-address", "127.0.0.1:1", "--consumer-opt", "tls_v1,true")
    assert r.returncode == 1 and "--consumer-opt tls_v1,true: invalid option 'tls_v1'" in r.stderr.decode()
    r = run("to-nsq", "--topic", "t", "--delimiter", "ab")
    assert r.returncode == 1 and "--delimiter must be a single byte" in r.stderr.decode()


def test_tail_channel_is_ephemeral_and_nsq_shaped():
    import re

    for _ in range(20):
        assert re.fullmatch(r"tail\d{6}#ephemeral", tail.ephemeral_channel())


def _opts(**kw) -> SimpleNamespace:
    base = dict(host_identifier="", filename_format="<TOPIC>.<HOST><REV>.<DATETIME>.log", gzip=False,
                rotate_size=0, rotate_interval=0.0, work_dir="/out", output_dir="/out")
    return SimpleNamespace(**{**base, **kw})


def test_filename_format_as_nsq_to_file():
    short = socket.gethostname().split(".")[0]
    assert filename_format(_opts(), "t") == f"t.{short}.<DATETIME>.log"  # <REV> dropped: not needed
    assert filename_format(_opts(gzip=True), "t") == f"t.{short}<REV>.<DATETIME>.log.gz"
    assert filename_format(_opts(rotate_size=5, filename_format="<PID>-<TOPIC><REV>",
                                 host_identifier="h-<SHORT_HOST>"), "t") == f"{os.getpid()}-t<REV>"
    assert filename_format(_opts(filename_format="<HOST>", host_identifier="x<HOSTNAME>"), "t") == \
        "x" + socket.gethostname()
    with pytest.raises(ValueError, match="missing <REV>"):
        filename_format(_opts(gzip=True, filename_format="<TOPIC>.log"), "t")


def test_strftime_knows_go_strftimes_codes_only():
    when = datetime.datetime(2026, 3, 4, 5, 6, 7)
    assert strftime("%Y-%m-%d_%H.%M.%S %y %b %%", when) == "2026-03-04_05.06.07 26 Mar %"
    assert strftime("%j %Q %", when) == "%j %Q %"  # unknown codes stay as they are


def test_to_nsq_pieces():
    def split(data: bytes, delim: bytes = b"\n") -> list[bytes]:
        return list(to_nsq.pieces(io.BytesIO(data), delim))

    assert split(b"a\nb\n\nc\n") == [b"a", b"b", b"", b"c"]
    assert split(b"a\nb") == [b"a", b"b"]
    assert split(b"one,two,three\n", b",") == [b"one", b"two", b"three"]


def test_headers_and_host_pool():
    assert to_http.parse_headers(["X-A: 1", "B:two"]) == {"X-A": "1", "B": "two"}
    with pytest.raises(ValueError):
        to_http.parse_headers(["novalue:"])
    pool = HostPool(["a", "b", "c"])
    assert [pool.get() for _ in range(4)] == ["a", "b", "c", "a"]
    pool.mark("b", False)
    assert [pool.get() for _ in range(4)] == ["c", "a", "c", "a"]  # b rests until its retry time
    pool.mark("a", False)
    pool.mark("c", False)
    assert pool.get() in ("a", "b", "c")  # all down: all tried again
