"""The option declarations and the value types they use."""

from __future__ import annotations

import hashlib
import re
import socket
import tomllib
import zlib

import pytest

from nsqmp.config.options import (
    OPTIONS,
    OPTIONS_BY_ATTR,
    OPTIONS_BY_KEY,
    OPTIONS_BY_NAME,
    SECTIONS,
    Address,
    Option,
    OptType,
    format_bytesize,
    format_duration,
    parse_address,
    parse_bool,
    parse_bytesize,
    parse_duration,
)

# --------------------------------------------------------------------------------------
# durations
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("0s", 0.0),
        ("2s", 2.0),
        ("60s", 60.0),
        ("15m", 900.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1h0m0s", 3600.0),
        ("250ms", 0.25),
        ("25ms", 0.025),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("1.s", 1.0),
        ("1m30s", 90.0),
        ("100us", 0.0001),
        ("1\u00b5s", 0.000001),
        ("1\u03bcs", 0.000001),
        ("10ns", 1e-8),
        ("+5s", 5.0),
        ("-5s", -5.0),
        (" 60s ", 60.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_integer_means_milliseconds() -> None:
    # nsqd reads a bare integer in its config file as milliseconds.
    assert parse_duration(250) == 0.25
    assert parse_duration(0) == 0.0
    assert parse_duration(60000) == 60.0


@pytest.mark.parametrize("bad", ["", "60", "1x", "abc", "s", "1h30", "1..5s", "5 s", "1.5", "-", 1.5, True, None, []])
def test_parse_duration_errors(bad: object) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(bad)


def test_parse_duration_names_the_problem() -> None:
    with pytest.raises(ValueError, match="needs a unit"):
        parse_duration("60")
    with pytest.raises(ValueError, match="unknown unit 'd'"):
        parse_duration("1d")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (2, "2s"),
        (60, "60s"),
        (90, "90s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (900, "15m"),
        (3600, "1h"),
        (5400, "1h30m"),
        (3661, "1h1m1s"),
        (0.25, "250ms"),
        (0.025, "25ms"),
        (1.5, "1s500ms"),
        (0.0001, "100us"),
        (1e-8, "10ns"),
        (-5, "-5s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text", ["0s", "1ms", "999ms", "1s1ms", "59s", "61s", "7m", "25h", "1h0m1s", "3.25s", "10us"])
def test_format_duration_round_trips(text: str) -> None:
    seconds = parse_duration(text)
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


# --------------------------------------------------------------------------------------
# sizes, booleans, addresses
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (1048576, 1048576),
        ("1048576", 1048576),
        ("64KiB", 65536),
        ("100MiB", 104857600),
        ("1GiB", 1024**3),
        ("4mib", 4194304),
        ("1MB", 1_000_000),
        ("1kb", 1000),
        ("512B", 512),
        (" 2 MiB ", 2 * 1024**2),
    ],
)
def test_parse_bytesize(value: object, expected: int) -> None:
    assert parse_bytesize(value) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1.5MiB", "10XB", "MiB", True, 1.0, None])
def test_parse_bytesize_errors(bad: object) -> None:
    with pytest.raises(ValueError, match="expected a size in bytes"):
        parse_bytesize(bad)


def test_format_bytesize() -> None:
    assert format_bytesize(4194304) == "4MiB"
    assert format_bytesize(65536) == "64KiB"
    assert format_bytesize(1024**3) == "1GiB"
    assert format_bytesize(1000) == "1000B"


@pytest.mark.parametrize("word", [True, "true", "TRUE", "1", "t", "yes", "on"])
def test_parse_bool_true(word: object) -> None:
    assert parse_bool(word) is True


@pytest.mark.parametrize("word", [False, "false", "False", "0", "f", "no", "off"])
def test_parse_bool_false(word: object) -> None:
    assert parse_bool(word) is False


@pytest.mark.parametrize("bad", ["maybe", "", 1, 0, None])
def test_parse_bool_errors(bad: object) -> None:
    with pytest.raises(ValueError, match="expected a boolean"):
        parse_bool(bad)


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1:4150", Address("127.0.0.1", 4150)),
        ("0.0.0.0:4151", Address("0.0.0.0", 4151)),
        (":4150", Address("", 4150)),
        ("[::1]:4150", Address("::1", 4150)),
        ("[::]:0", Address("::", 0)),
        ("localhost:65535", Address("localhost", 65535)),
        ("nsqd-1.example.com:4150", Address("nsqd-1.example.com", 4150)),
        ("my_container:4160", Address("my_container", 4160)),
    ],
)
def test_parse_address(text: str, address: Address) -> None:
    assert parse_address(text) == address


def test_address_str() -> None:
    assert str(Address("::1", 4150)) == "[::1]:4150"
    assert str(Address("", 4150)) == ":4150"
    assert str(parse_address("127.0.0.1:1")) == "127.0.0.1:1"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("4150", "expected host:port"),
        ("localhost", "expected host:port"),
        ("host:", "numeric port"),
        ("host:http", "numeric port"),
        ("host:-1", "numeric port"),
        ("host:65536", "port must be between 0 and 65535"),
        ("::1:4150", "write IPv6 addresses in brackets"),
        ("[::1]", "expected host:port"),
        ("[nope]:1", "not a valid IPv6 address"),
        ("300.1.1.1:4150", "not a valid IPv4 address"),
        ("bad host:4150", "not a valid host name"),
        ("-bad:4150", "not a valid host name"),
        (4150, "expected host:port"),
    ],
)
def test_parse_address_errors(bad: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_address(bad)


# --------------------------------------------------------------------------------------
# the declarations
# --------------------------------------------------------------------------------------


def test_names_are_nsqd_flag_spellings_and_unique() -> None:
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    for name in names:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name), name
    assert set(OPTIONS_BY_NAME) == set(names)


def test_keys_and_attributes() -> None:
    for opt in OPTIONS:
        assert opt.attr == opt.key
        assert opt.key.isidentifier()
        assert opt.flag == "--" + opt.name
        assert opt.env == "NSQMP_" + opt.key.upper()
        assert opt.section in SECTIONS
        if opt.in_file:
            assert OPTIONS_BY_KEY[opt.key] is opt
        else:
            assert opt.key not in OPTIONS_BY_KEY
    # nsqd's config-file spellings for its list options and the node id
    assert OPTIONS_BY_NAME["lookupd-tcp-address"].key == "nsqlookupd_tcp_addresses"
    assert OPTIONS_BY_NAME["auth-http-address"].key == "auth_http_addresses"
    assert OPTIONS_BY_NAME["e2e-processing-latency-percentile"].key == "e2e_processing_latency_percentiles"
    assert OPTIONS_BY_KEY["id"] is OPTIONS_BY_NAME["node-id"]
    assert OPTIONS_BY_NAME["node-id"].key == "node_id"
    assert "config" not in OPTIONS_BY_KEY
    assert OPTIONS_BY_ATTR["config"].in_file is False


# The defaults this project promises, in stored form (durations in seconds).
EXPECTED_DEFAULTS = {
    "tcp-address": "127.0.0.1:4150",
    "http-address": "127.0.0.1:4151",
    "https-address": "127.0.0.1:4152",
    "data-path": "./nsqmp-data",
    "mem-queue-size": 10000,
    "max-bytes-per-file": 104857600,
    "sync-every": 2500,
    "sync-timeout": 2.0,
    "msg-timeout": 60.0,
    "max-msg-timeout": 900.0,
    "max-msg-size": 1048576,
    "max-body-size": 5242880,
    "max-req-timeout": 3600.0,
    "max-rdy-count": 2500,
    "max-heartbeat-interval": 60.0,
    "max-output-buffer-size": 65536,
    "max-output-buffer-timeout": 30.0,
    "min-output-buffer-timeout": 0.025,
    "output-buffer-timeout": 0.25,
    "max-channel-consumers": 0,
    "lookupd-tcp-address": (),
    "log-level": "info",
    "max-deflate-level": 6,
    "deflate": True,
    "snappy": True,
    "tls-cert": "",
    "tls-key": "",
    "tls-root-ca-file": "",
    "tls-required": False,
    "tls-min-version": "tls1.0",
    "auth-http-address": (),
    "e2e-processing-latency-percentile": (),
    "routers": 2,
    "ring-size": 8388608,  # raised from 4 MiB so one record fits max-msg-size (see cli.check_limits)
    "heartbeat-timeout": 10.0,
}


@pytest.mark.parametrize(("name", "value"), sorted(EXPECTED_DEFAULTS.items()))
def test_default(name: str, value: object) -> None:
    got = OPTIONS_BY_NAME[name].resolve_default()
    assert got == pytest.approx(value) if isinstance(value, float) else got == value
    assert type(got) is type(value)


def test_computed_defaults() -> None:
    host = socket.gethostname()
    assert OPTIONS_BY_NAME["broadcast-address"].resolve_default() == host
    node_id = zlib.crc32(hashlib.md5(host.encode()).digest()) % 1024
    assert OPTIONS_BY_NAME["node-id"].resolve_default() == node_id
    acceptors = OPTIONS_BY_NAME["acceptors"].resolve_default()
    assert 1 <= acceptors <= 64
    for opt in OPTIONS:
        if opt.is_computed:
            assert opt.default_doc, opt.name
            assert opt.parse(opt.example) is not None, opt.name


def test_nsqmp_own_options_are_marked() -> None:
    own = {o.name for o in OPTIONS if not o.nsqd}
    assert {"acceptors", "routers", "ring-size", "heartbeat-timeout", "restart-backoff",
            "max-topic-bytes", "topic-full-policy"} <= own
    # nsqmp's own: the process and storage options, and log-format (issue 21)
    assert all(OPTIONS_BY_NAME[n].section in ("processes", "storage") for n in own - {"log-format"})
    assert OPTIONS_BY_NAME["log-format"].section == "logging"
    assert OPTIONS_BY_NAME["acceptors"].origin == "nsqmp"
    assert OPTIONS_BY_NAME["msg-timeout"].origin == "nsqd"


def test_every_default_renders_as_toml_and_parses_back() -> None:
    for opt in OPTIONS:
        value = opt.resolve_default()
        doc = tomllib.loads(f"v = {opt.to_toml(value)}")
        assert opt.parse(doc["v"]) == value, opt.name


@pytest.mark.parametrize(
    ("name", "good", "bad", "message"),
    [
        ("node-id", [0, 1023], [-1, 1024], "must be between 0 and 1023"),
        ("max-deflate-level", [1, 9], [0, 10], "must be between 1 and 9"),
        ("acceptors", [1, 64], [0, 65], "must be between 1 and 64"),
        ("routers", [1, 64], [0, 65], "must be between 1 and 64"),
        ("ring-size", [65536, "1GiB", "4MiB"], [32768, 2 * 1024**3, 3 * 65536], "must be a power of two between 64KiB and 1GiB"),
        ("heartbeat-timeout", ["100ms", "1h"], ["50ms", "2h"], "must be between 100ms and 1h"),
        ("mem-queue-size", [0, 1], [-1], "must be at least 0"),
        ("sync-every", [1], [0], "must be at least 1"),
        ("msg-timeout", ["1ms"], ["0s"], "must be greater than 0"),
        ("max-req-timeout", ["0"], ["-1s"], "must not be negative"),
        ("max-msg-size", ["1MiB"], ["-1"], "must not be negative"),
        ("broadcast-tcp-port", [0, 65535], [65536], "must be between 0 and 65535"),
        ("e2e-processing-latency-percentile", [[1.0, 0.5], "0.99,0.5"], [[0.0], [1.5]], "must be greater than 0 and at most 1"),
        ("log-level", ["debug", "WARN", "fatal"], ["warning", "trace"], "expected one of debug, info, warn, error, fatal"),
        ("tls-min-version", ["tls1.2", "tls1.3"], ["ssl3.0"], "expected one of tls1.0"),
        ("tcp-address", [":1"], ["", "1"], "expected host:port"),
        ("data-path", ["/tmp/x"], [""], "must not be empty"),
        ("enable-experiment", [["topology-aware-consumption"]], [["nope"]], "expected one of topology-aware-consumption"),
        ("auth-http-address", [["127.0.0.1:4181", "https://auth.example.com/auth"]], [["ftp://x"], ["nope"]], "expected"),
    ],
)
def test_checks(name: str, good: list[object], bad: list[object], message: str) -> None:
    opt = OPTIONS_BY_NAME[name]
    for value in good:
        opt.parse(value)
    for value in bad:
        with pytest.raises(ValueError, match=re.escape(message)):
            opt.parse(value)


def test_repeatable_items_are_tuples_and_errors_name_the_item() -> None:
    opt = OPTIONS_BY_NAME["lookupd-tcp-address"]
    assert opt.parse(["a:1", "b:2"]) == ("a:1", "b:2")
    assert opt.parse("a:1, b:2") == ("a:1", "b:2")
    assert opt.parse("") == ()
    with pytest.raises(ValueError, match=r"^item 2: expected host:port"):
        opt.parse(["a:1", "b"])


def test_tls_required_values() -> None:
    opt = OPTIONS_BY_NAME["tls-required"]
    assert opt.parse(True) is True
    assert opt.parse("false") is False
    assert opt.parse("tcp-https") == "tcp-https"
    assert opt.to_toml("tcp-https") == '"tcp-https"'
    with pytest.raises(ValueError, match="expected true, false or tcp-https"):
        opt.parse("sometimes")


def test_bad_declaration_fails_at_definition() -> None:
    with pytest.raises(ValueError, match="must be between 1 and 9"):
        Option("x", OptType.INT, 0, "help", check=OPTIONS_BY_NAME["max-deflate-level"].check)
    with pytest.raises(ValueError, match="unknown section"):
        Option("x", OptType.INT, 0, "help", section="nope")


def test_option_is_frozen() -> None:
    opt = OPTIONS_BY_NAME["msg-timeout"]
    with pytest.raises(AttributeError):
        opt.default = "1s"  # type: ignore[misc]
