"""Resolving the configuration: defaults, TOML file, environment, flags; errors; the
example file."""

from __future__ import annotations

import argparse
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nsqmp.config import (
    OPTIONS,
    OPTIONS_BY_NAME,
    Config,
    ConfigError,
    build_parser,
    from_namespace,
    ignored_given,
    load,
    read_file,
    render_example,
    render_resolved,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "nsqmp.toml.example"


def write(tmp_path: Path, text: str, name: str = "nsqmp.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def load_file(tmp_path: Path, text: str, *flags: str, name: str = "nsqmp.toml") -> Config:
    return load(["--config", write(tmp_path, text, name), *flags], environ={})


def error_of(argv: list[str], environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load(argv, environ=environ if environ is not None else {})
    message = str(info.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------------------
# defaults and precedence
# --------------------------------------------------------------------------------------


def test_defaults() -> None:
    c = load([], environ={})
    assert c.tcp_address == "127.0.0.1:4150"
    assert c.http_address == "127.0.0.1:4151"
    assert c.data_path == "./nsqmp-data"
    assert c.mem_queue_size == 10000
    assert c.msg_timeout == 60.0
    assert c.max_msg_timeout == 900.0
    assert c.output_buffer_timeout == 0.25
    assert c.nsqlookupd_tcp_addresses == ()
    assert c.snappy is True and c.deflate is True
    assert c.tls_required is False
    assert c.config == ""
    assert 0 <= c.node_id <= 1023
    assert 1 <= c.acceptors <= 64
    for opt in OPTIONS:
        assert c.source(opt.attr) == "default"
        if not opt.is_computed:
            assert getattr(c, opt.attr) == opt.resolve_default()


def test_file_overrides_defaults(tmp_path: Path) -> None:
    c = load_file(
        tmp_path,
        """
        mem_queue_size = 5000
        msg_timeout = "30s"
        max_req_timeout = "1h30m"
        snappy = false
        max_bytes_per_file = "64MiB"
        tcp_address = "0.0.0.0:5150"
        log_level = "DEBUG"
        acceptors = 3
        """,
    )
    assert c.mem_queue_size == 5000
    assert c.msg_timeout == 30.0
    assert c.max_req_timeout == 5400.0
    assert c.snappy is False
    assert c.max_bytes_per_file == 64 * 1024**2
    assert c.tcp_address == "0.0.0.0:5150"
    assert c.log_level == "debug"
    assert c.acceptors == 3
    assert c.source("mem_queue_size") == "file"
    assert c.source("sync_every") == "default"
    assert c.config.endswith("nsqmp.toml")


def test_flags_override_file(tmp_path: Path) -> None:
    c = load_file(tmp_path, "mem_queue_size = 5000\nsnappy = false\nsync_every = 7\n",
                  "--mem-queue-size", "42", "--snappy")
    assert c.mem_queue_size == 42
    assert c.snappy is True
    assert c.sync_every == 7
    assert c.source("mem_queue_size") == "flag"
    assert c.source("sync_every") == "file"


def test_flag_order_does_not_matter(tmp_path: Path) -> None:
    path = write(tmp_path, "mem_queue_size = 5000\n")
    c = load(["--mem-queue-size=42", "--config", path], environ={})
    assert c.mem_queue_size == 42


def test_environment_between_file_and_flags(tmp_path: Path) -> None:
    path = write(tmp_path, "mem_queue_size = 5000\nsync_every = 7\nrouters = 3\n")
    env = {"NSQMP_MEM_QUEUE_SIZE": "10", "NSQMP_SYNC_EVERY": "11", "NSQMP_NSQLOOKUPD_TCP_ADDRESSES": "a:1,b:2"}
    c = load(["--config", path, "--mem-queue-size", "1"], environ=env)
    assert c.mem_queue_size == 1
    assert c.sync_every == 11
    assert c.routers == 3
    assert c.nsqlookupd_tcp_addresses == ("a:1", "b:2")
    assert c.source("sync_every") == "environment"


def test_config_path_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "routers = 5\n")
    c = load([], environ={"NSQMP_CONFIG": path})
    assert c.routers == 5
    assert c.config == path
    assert c.source("config") == "environment"


def test_flag_spellings() -> None:
    c = load(["--mem-queue-size=1", "-sync-every=2", "-max-rdy-count", "3", "--msg-timeout", "5s"], environ={})
    assert (c.mem_queue_size, c.sync_every, c.max_rdy_count, c.msg_timeout) == (1, 2, 3, 5.0)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--snappy"], True),
        (["--snappy=false"], False),
        (["--snappy=0"], False),
        (["--snappy=true"], True),
        (["-snappy=false"], False),
        (["--snappy", "false"], False),
    ],
)
def test_bool_flags(argv: list[str], expected: bool) -> None:
    assert load(argv, environ={}).snappy is expected


def test_tls_required_flag_forms(tmp_path: Path) -> None:
    cert = write(tmp_path, "cert", "cert.pem")
    key = write(tmp_path, "key", "key.pem")
    base = ["--tls-cert", cert, "--tls-key", key]
    assert load([*base, "--tls-required"], environ={}).tls_required is True
    assert load([*base, "--tls-required=tcp-https"], environ={}).tls_required == "tcp-https"
    assert load([*base, "--tls-required=false"], environ={}).tls_required is False


# --------------------------------------------------------------------------------------
# repeatable options
# --------------------------------------------------------------------------------------


def test_repeatable_flags_accumulate() -> None:
    c = load(["--lookupd-tcp-address", "10.0.0.1:4160", "--lookupd-tcp-address=10.0.0.2:4160",
              "--auth-http-address", "https://auth.example.com/auth",
              "--e2e-processing-latency-percentile", "0.99,0.95",
              "--e2e-processing-latency-percentile=0.5"], environ={})
    assert c.nsqlookupd_tcp_addresses == ("10.0.0.1:4160", "10.0.0.2:4160")
    assert c.auth_http_addresses == ("https://auth.example.com/auth",)
    assert c.e2e_processing_latency_percentiles == (0.99, 0.95, 0.5)


def test_repeatable_flags_replace_the_file_list(tmp_path: Path) -> None:
    text = 'nsqlookupd_tcp_addresses = ["a:1", "b:2"]\n'
    assert load_file(tmp_path, text).nsqlookupd_tcp_addresses == ("a:1", "b:2")
    c = load_file(tmp_path, text, "--lookupd-tcp-address", "c:3")
    assert c.nsqlookupd_tcp_addresses == ("c:3",)


def test_repeatable_in_file(tmp_path: Path) -> None:
    c = load_file(
        tmp_path,
        """
        nsqlookupd_tcp_addresses = "a:1,b:2"
        e2e_processing_latency_percentiles = [1.0, 0.99, 1]
        auth_http_addresses = ["127.0.0.1:4181"]
        """,
    )
    assert c.nsqlookupd_tcp_addresses == ("a:1", "b:2")
    assert c.e2e_processing_latency_percentiles == (1.0, 0.99, 1.0)
    assert c.auth_http_addresses == ("127.0.0.1:4181",)


# --------------------------------------------------------------------------------------
# nsqd config-file compatibility
# --------------------------------------------------------------------------------------


def test_nsqd_config_file_loads(tmp_path: Path) -> None:
    c = load_file(
        tmp_path,
        """
        id = 7
        data_path = "/var/lib/nsq"
        msg_timeout = 90000
        max_heartbeat_interval = "1m"
        nsqlookupd_tcp_addresses = ["lookupd-1:4160"]
        tls_required = true
        tls_client_auth_policy = ""
        e2e_processing_latency_percentiles = [0.99]
        tls_required = false
        """.replace("tls_required = true\n", ""),
    )
    assert c.node_id == 7
    assert c.msg_timeout == 90.0  # nsqd reads integers as milliseconds
    assert c.max_heartbeat_interval == 60.0


def test_id_and_node_id_together(tmp_path: Path) -> None:
    path = write(tmp_path, "id = 1\nnode_id = 2\n")
    assert error_of(["--config", path]) == f"option 'node_id' is given twice in {path}, as 'id' and 'node_id'"


def test_tls_client_auth_policy_implies_required(tmp_path: Path) -> None:
    cert = write(tmp_path, "cert", "cert.pem")
    key = write(tmp_path, "key", "key.pem")
    c = load(["--tls-cert", cert, "--tls-key", key, "--tls-client-auth-policy", "require-verify"], environ={})
    assert c.tls_required is True


def test_tls_cross_checks(tmp_path: Path) -> None:
    cert = write(tmp_path, "cert", "cert.pem")
    assert error_of(["--tls-cert", cert]) == "tls_cert is set but tls_key is not: TLS needs both"
    assert error_of(["--tls-required"]).startswith("tls_required is set but tls_cert and tls_key are not")
    missing = str(tmp_path / "missing.pem")
    assert error_of(["--tls-cert", cert, "--tls-key", missing]) == f"option 'tls_key': file {missing!r} not found"


# --------------------------------------------------------------------------------------
# error messages
# --------------------------------------------------------------------------------------


def test_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    path = write(tmp_path, "mem_queue_sze = 1\n")
    assert error_of(["--config", path]) == f"unknown option 'mem_queue_sze' in {path} (did you mean 'mem_queue_size'?)"


def test_unknown_key_without_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "foo = 1\n")
    assert error_of(["--config", path]) == f"unknown option 'foo' in {path}"


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("mem-queue-size", "mem_queue_size"),
        ("lookupd_tcp_address", "nsqlookupd_tcp_addresses"),
        ("e2e_processing_latency_percentile", "e2e_processing_latency_percentiles"),
        ("msg_timout", "msg_timeout"),
    ],
)
def test_unknown_key_suggestions(tmp_path: Path, key: str, suggestion: str) -> None:
    path = write(tmp_path, f'"{key}" = 1\n')
    assert error_of(["--config", path]).endswith(f"(did you mean '{suggestion}'?)")


def test_config_is_not_a_key(tmp_path: Path) -> None:
    path = write(tmp_path, 'config = "other.toml"\n')
    assert error_of(["--config", path]).startswith(f"unknown option 'config' in {path}")


def test_wrong_type(tmp_path: Path) -> None:
    path = write(tmp_path, 'mem_queue_size = "abc"\n', "x.toml")
    assert error_of(["--config", path]) == f'option \'mem_queue_size\' in {path}: expected an integer, got "abc"'


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("mem_queue_size = 1.5", "option 'mem_queue_size' in {}: expected an integer, got 1.5"),
        ("mem_queue_size = true", "option 'mem_queue_size' in {}: expected an integer, got true"),
        ("snappy = 1", "option 'snappy' in {}: expected a boolean (true or false), got 1"),
        ("tcp_address = 4150", "option 'tcp_address' in {}: expected host:port, got 4150"),
        ("data_path = []", "option 'data_path' in {}: expected a string, got []"),
        ("log_prefix = 5", "option 'log_prefix' in {}: expected a string, got 5"),
        ("msg_timeout = {a = 1}", "option 'msg_timeout' in {}: expected a value, got a table"),
        ("e2e_processing_latency_percentiles = [0.5, \"x\"]",
         "option 'e2e_processing_latency_percentiles' in {}: item 2: expected a number, got \"x\""),
    ],
)
def test_type_errors(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, line + "\n")
    assert error_of(["--config", path]) == message.format(path)


def test_out_of_range(tmp_path: Path) -> None:
    path = write(tmp_path, "max_deflate_level = 12\n")
    assert error_of(["--config", path]) == f"option 'max_deflate_level' in {path}: must be between 1 and 9, got 12"
    path = write(tmp_path, "node_id = 1024\n")
    assert error_of(["--config", path]) == f"option 'node_id' in {path}: must be between 0 and 1023, got 1024"
    path = write(tmp_path, "ring_size = 100000\n")
    assert error_of(["--config", path]) == (
        f"option 'ring_size' in {path}: must be a power of two between 64KiB and 1GiB, got 100000"
    )


def test_bad_duration(tmp_path: Path) -> None:
    path = write(tmp_path, 'msg_timeout = "60 seconds"\n')
    message = error_of(["--config", path])
    assert message.startswith(f"option 'msg_timeout' in {path}: expected a duration such as \"60s\"")
    assert message.endswith('got "60 seconds"')
    assert error_of(["--msg-timeout", "1x"]).startswith("option --msg-timeout: expected a duration")


def test_bad_address(tmp_path: Path) -> None:
    path = write(tmp_path, 'http_address = "localhost:99999"\n')
    assert error_of(["--config", path]) == (
        f'option \'http_address\' in {path}: port must be between 0 and 65535, got "localhost:99999"'
    )
    assert error_of(["--tcp-address", "nohost"]) == 'option --tcp-address: expected host:port, got "nohost"'


def test_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.toml")
    assert error_of(["--config", path]) == f"config file {path!r} not found"


def test_directory_as_file(tmp_path: Path) -> None:
    assert error_of(["--config", str(tmp_path)]) == f"config file {str(tmp_path)!r} is a directory"


def test_not_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "mem_queue_size = 1\nthis is not toml\n")
    message = error_of(["--config", path])
    assert message.startswith(f"config file {path!r} is not valid TOML: ")
    assert "line 2" in message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.toml"
    path.write_bytes(b"a = \"\xff\"\n")
    assert "is not valid" in error_of(["--config", str(path)])


def test_flag_errors() -> None:
    assert error_of(["--mem-queue-size", "abc"]) == 'option --mem-queue-size: expected an integer, got "abc"'
    assert error_of(["--mem-queue-sze=3"]) == "unknown option --mem-queue-sze (did you mean --mem-queue-size?)"
    assert error_of(["--mem_queue_size=3"]) == "unknown option --mem_queue_size (did you mean --mem-queue-size?)"
    assert error_of(["--bogus"]) == "unknown option --bogus"
    assert error_of(["stray"]) == "unexpected argument 'stray'"
    assert error_of(["--tcp-address"]) == "option --tcp-address: expected one argument"
    assert error_of(["--snappy=maybe"]) == 'option --snappy: expected a boolean (true or false), got "maybe"'
    assert error_of(["--lookupd-tcp-address", "a:1", "--lookupd-tcp-address", "b"]) == (
        'option --lookupd-tcp-address: item 2: expected host:port, got "b"'
    )
    # no abbreviations: Go's flag package has none either
    assert error_of(["--mem-queue=3"]).startswith("unknown option --mem-queue")


def test_environment_errors() -> None:
    message = error_of([], environ={"NSQMP_MEM_QUEUE_SIZE": "lots"})
    assert message == 'environment variable NSQMP_MEM_QUEUE_SIZE: expected an integer, got "lots"'


# --------------------------------------------------------------------------------------
# durations end to end
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h30m", 5400.0), ("250ms", 0.25), ("0", 0.0), ("2s", 2.0), ("15m", 900.0)],
)
def test_duration_values(tmp_path: Path, text: str, seconds: float) -> None:
    assert load(["--max-req-timeout", text], environ={}).max_req_timeout == seconds
    assert load_file(tmp_path, f'max_req_timeout = "{text}"\n').max_req_timeout == seconds


# --------------------------------------------------------------------------------------
# Config object
# --------------------------------------------------------------------------------------


def test_config_is_immutable() -> None:
    c = load([], environ={})
    with pytest.raises(AttributeError):
        c.mem_queue_size = 1
    with pytest.raises(AttributeError, match="did you mean 'mem_queue_size'"):
        c.mem_queue_sze  # noqa: B018


def test_as_dict_and_equality() -> None:
    c = load(["--lookupd-tcp-address", "a:1"], environ={})
    d = c.as_dict()
    assert d["nsqlookupd_tcp_addresses"] == ["a:1"]
    assert d["msg_timeout"] == 60.0
    assert set(d) == {o.attr for o in OPTIONS}
    d["mem_queue_size"] = 1  # a copy
    assert c.mem_queue_size == 10000
    assert Config(c.as_dict()) == c
    assert hash(Config(c.as_dict())) == hash(c)


def test_replace() -> None:
    c = load([], environ={})
    d = c.replace(mem_queue_size=0, msg_timeout="5s")
    assert (d.mem_queue_size, d.msg_timeout, c.mem_queue_size) == (0, 5.0, 10000)
    with pytest.raises(ConfigError, match="option 'max_deflate_level': must be between 1 and 9, got 0"):
        c.replace(max_deflate_level=0)
    with pytest.raises(ConfigError, match="unknown option 'mem_queue'"):
        c.replace(mem_queue=1)


def test_pickle_round_trip() -> None:
    c = load(["--routers", "3"], environ={})
    d = pickle.loads(pickle.dumps(c))
    assert d == c and d.routers == 3 and d.source("routers") == "flag"


# --------------------------------------------------------------------------------------
# build_parser / from_namespace / render_resolved
# --------------------------------------------------------------------------------------


def test_build_parser_and_from_namespace(tmp_path: Path) -> None:
    parser = build_parser("nsqmp serve", "Run the broker.")
    assert isinstance(parser, argparse.ArgumentParser)
    path = write(tmp_path, "routers = 4\n")
    c = from_namespace(parser.parse_args(["--config", path, "--acceptors", "2"]), environ={})
    assert (c.routers, c.acceptors) == (4, 2)
    with pytest.raises(ConfigError, match="unknown option --nope"):
        parser.parse_args(["--nope"])


def test_parser_as_parent() -> None:
    parent = build_parser(add_help=False)
    parser = argparse.ArgumentParser(prog="x", parents=[parent])
    parser.add_argument("file")
    ns = parser.parse_args(["f.toml", "--routers=3"])
    assert ns.file == "f.toml"
    assert from_namespace(ns, environ={}).routers == 3


def test_help_lists_every_flag_once() -> None:
    text = build_parser("nsqmp serve", "Run.").format_help()
    for opt in OPTIONS:
        assert opt.flag in text
        assert f" -{opt.name}" not in text  # nsqd's single-dash aliases stay hidden
    assert "% 1024" in text  # a "%" in a help text survives argparse's formatting


def test_render_resolved_round_trips(tmp_path: Path) -> None:
    c = load(["--lookupd-tcp-address", "a:1", "--msg-timeout", "1h30m", "--output-buffer-timeout", "0",
              "--log-prefix", 'we"ird\\%s', "--e2e-processing-latency-percentile", "0.99"], environ={})
    text = render_resolved(c)
    assert 'msg_timeout = "1h30m"' in text
    assert 'max_msg_timeout = "15m"' in text
    assert 'max_heartbeat_interval = "60s"' in text
    assert 'output_buffer_timeout = "0s"' in text
    assert "mem_queue_size = 10000" in text
    assert 'nsqlookupd_tcp_addresses = ["a:1"]' in text
    assert "config =" not in text
    for opt in OPTIONS:
        if opt.in_file:
            assert len(re.findall(rf"^{opt.key} = ", text, re.M)) == 1, opt.key
    again = load_file(tmp_path, text)
    assert again.as_dict() | {"config": ""} == c.as_dict()


# --------------------------------------------------------------------------------------
# the example file
# --------------------------------------------------------------------------------------


def test_committed_example_is_current() -> None:
    assert EXAMPLE.read_text() == render_example(), (
        "deploy/nsqmp.toml.example is stale: python -m nsqmp.config.example > deploy/nsqmp.toml.example"
    )


def test_example_loads() -> None:
    c = load(["--config", str(EXAMPLE)], environ={})
    # every option line is commented out
    assert c.as_dict() == load([], environ={}).as_dict() | {"config": str(EXAMPLE)}
    assert c.config == str(EXAMPLE)


def test_example_lists_every_option_once_with_origin() -> None:
    text = render_example()
    for opt in OPTIONS:
        hits = re.findall(rf"^#{opt.key} = ", text, re.M)
        assert len(hits) == (1 if opt.in_file else 0), opt.key
        if opt.in_file:
            assert f"({opt.origin}) flag: {opt.flag}" in text
    assert "(nsqmp) flag: --ring-size" in text
    assert "(nsqd) flag: --msg-timeout" in text


def test_example_uncommented_loads_with_the_defaults(tmp_path: Path) -> None:
    uncommented = re.sub(r"^#(\w+ = )", r"\1", render_example(), flags=re.M)
    c = load_file(tmp_path, uncommented)
    defaults = load([], environ={})
    for opt in OPTIONS:
        if not opt.in_file:
            continue
        if opt.is_computed:
            assert getattr(c, opt.attr) == opt.parse(opt.example)
        else:
            assert getattr(c, opt.attr) == getattr(defaults, opt.attr), opt.key


def test_example_module_prints_the_example() -> None:
    out = subprocess.run(
        [sys.executable, "-W", "error", "-m", "nsqmp.config.example"],
        cwd=REPO, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.stderr == ""
    assert out.stdout == render_example()


def test_read_file_returns_parsed_values(tmp_path: Path) -> None:
    values = read_file(write(tmp_path, 'msg_timeout = "2m"\nid = 3\n'))
    assert values == {"msg_timeout": 120.0, "node_id": 3}


def test_option_lookup_table_is_consistent() -> None:
    assert OPTIONS_BY_NAME["config"].in_file is False


# --------------------------------------------------------------------------------------
# statsd: real options with nsqd's names and defaults (issue 21), in Go syntax for nsqmp-nsqd
# --------------------------------------------------------------------------------------


def test_statsd_options_have_nsqds_defaults() -> None:
    c = from_namespace(build_parser("nsqmp serve").parse_args([]), environ={})
    assert (c.statsd_address, c.statsd_prefix, c.statsd_interval, c.statsd_mem_stats, c.statsd_udp_packet_size,
            c.statsd_exclude_ephemeral) == ("", "nsq.%s", 60.0, True, 508, False)


def test_nsqd_parser_takes_the_statsd_flags_in_go_syntax() -> None:
    parser = build_parser("nsqd", nsqd=True)
    ns = parser.parse_args(["-statsd-address=127.0.0.1:8125", "--statsd-prefix", "p.%s", "-statsd-mem-stats=false",
                            "--statsd-exclude-ephemeral", "-statsd-interval", "10s", "-statsd-udp-packet-size=1400",
                            "--routers", "3"])
    c = from_namespace(ns, environ={})
    assert (c.routers, c.statsd_address, c.statsd_prefix, c.statsd_interval) == (3, "127.0.0.1:8125", "p.%s", 10.0)
    assert (c.statsd_mem_stats, c.statsd_exclude_ephemeral, c.statsd_udp_packet_size) == (False, True, 1400)
    assert ignored_given(ns, c) == []
    assert "--statsd-address" in build_parser("nsqmp serve").format_help()


def test_nsqd_config_file_with_statsd_keys_loads_them(tmp_path: Path) -> None:
    path = write(tmp_path, 'statsd_address = "127.0.0.1:8125"\nstatsd_interval = "10s"\nmem_queue_size = 7\n')
    ns = build_parser("nsqmp serve").parse_args(["--config", path])
    c = from_namespace(ns, environ={})
    assert (c.mem_queue_size, c.statsd_address, c.statsd_interval) == (7, "127.0.0.1:8125", 10.0)
    assert ignored_given(ns, c) == []
