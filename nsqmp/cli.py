"""The `nsqmp` command: serve, nsqd, check-config, bench; and the `nsqmp-nsqd` drop-in."""
from __future__ import annotations

import argparse
import logging
import sys

from nsqmp import utils
from nsqmp.config import ConfigError, build_parser, from_namespace, ignored_given, render_resolved
from nsqmp import golog


def _setup_logging(level: str, nsqd_style: bool = False, prefix: str = "[nsqmp] ", fmt: str = "text") -> None:
    """Every process's log lines to stderr (the children inherit it at fork): nsqmp's or
    nsqd's text lines, or JSON objects with --log-format json (nsqmp/golog.py)."""
    golog.setup(level, fmt, prefix, nsqd_style=nsqd_style)


def check_limits(opts) -> None:
    """Cross-option checks that need knowledge of the ring layout."""
    biggest = opts.max_msg_size + 26 + 8 + 128
    if opts.ring_size // 4 < biggest:
        raise ConfigError(
            f"ring_size {opts.ring_size} is too small for max_msg_size {opts.max_msg_size}: "
            f"a ring record holds at most ring_size/4 bytes; use ring_size >= {_pow2(biggest * 4)}"
        )


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


def _log_ignored(ns: argparse.Namespace, opts) -> None:
    """One warning per nsqd option given that nsqmp accepts and ignores (statsd's)."""
    for given, why in ignored_given(ns, opts):
        logging.getLogger("nsqmp").warning("%s: accepted for nsqd compatibility and ignored (%s)", given, why)


def cmd_serve(argv: list[str]) -> int:
    if _wants_version(argv):
        print(nsqd_version())
        return 0
    parser = build_parser("nsqmp serve", "Run the broker (nsqd-compatible) on this machine.")
    try:
        ns = parser.parse_args(argv)
        opts = from_namespace(ns)
        check_limits(opts)
    except ConfigError as exc:
        print(f"nsqmp: {exc}", file=sys.stderr)
        return 2
    _setup_logging(opts.log_level, prefix=opts.log_prefix, fmt=opts.log_format)
    _log_ignored(ns, opts)
    from nsqmp.supervisor.arbiter import Supervisor

    return Supervisor(opts).run()


# what nsqd binds and where it keeps its data when given no flags
_NSQD_DEFAULTS = ["--tcp-address", "0.0.0.0:4150", "--http-address", "0.0.0.0:4151",
                  "--data-path", ".", "--log-prefix", "[nsqd] "]


def nsqd_version() -> str:
    """nsqd's --version line, as nsqmp says it (nsqmp/version.py): ``nsqd v1.3.0 (built
    w/nsqmp-0.1.0-python3.11.7)``; `nsqmp --version` and `nsqmp serve --version` print it too."""
    from nsqmp.acceptor.identify import VERSION
    from nsqmp.version import version_line

    return version_line("nsqd", VERSION)


def _wants_version(argv: list[str]) -> bool:
    return any(a in ("-version", "--version") for a in argv)


def cmd_nsqd(argv: list[str]) -> int:
    """nsqd's command line, verbatim: Go flag syntax, nsqd's defaults and log lines."""
    if _wants_version(argv):
        print(nsqd_version())
        return 0
    parser = build_parser("nsqd", "nsqmp, started with nsqd's command line.", nsqd=True)
    try:
        ns = parser.parse_args(_NSQD_DEFAULTS + argv)
        opts = from_namespace(ns)
        check_limits(opts)
    except ConfigError as exc:
        text = str(exc)
        if text.startswith("unknown option "):  # as Go's flag package says it
            text = "flag provided but not defined: " + text.split()[2]
        print(text, file=sys.stderr)
        return 2
    _setup_logging(opts.log_level, nsqd_style=True, prefix=opts.log_prefix, fmt=opts.log_format)
    logging.getLogger("nsqmp").info("%s", nsqd_version())
    _log_ignored(ns, opts)
    from nsqmp.supervisor.arbiter import Supervisor

    return Supervisor(opts).run()


def nsqd_main() -> None:
    """Console script `nsqmp-nsqd`."""
    sys.exit(cmd_nsqd(sys.argv[1:]))


def cmd_check_config(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nsqmp check-config",
                                     description="Validate a TOML config file and print the resolved options.")
    parser.add_argument("file")
    args = parser.parse_args(argv)
    try:
        opts = from_namespace(build_parser("nsqmp").parse_args(["--config", args.file]))
        check_limits(opts)
    except ConfigError as exc:
        print(f"nsqmp: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(render_resolved(opts))
    return 0


def cmd_bench(argv: list[str]) -> int:
    """`nsqmp bench NAME ...`: the benchmarks of nsqmp/bench/commands.py (listed by --help)."""
    from nsqmp.bench.commands import main as bench_main

    return bench_main(argv)


def cmd_lookupd(argv: list[str]) -> int:
    from nsqmp.lookupd.cli import cmd_lookupd as run_lookupd

    return run_lookupd(argv)


def cmd_health(argv: list[str]) -> int:
    """`nsqmp health`: python -m nsqmp.health (the container's HEALTHCHECK)."""
    from nsqmp.health import main as health

    return health(argv)


def cmd_admin(argv: list[str]) -> int:
    from nsqmp.admin.cli import cmd_admin as run_admin

    return run_admin(argv)


#: every `nsqmp` command: name -> (function, one-line description for `nsqmp --help`)
COMMANDS: dict[str, tuple] = {
    "serve": (cmd_serve, "run the broker (see `nsqmp serve --help`)"),
    "nsqd": (cmd_nsqd, "run the broker with nsqd's command line (also: nsqmp-nsqd)"),
    "lookupd": (cmd_lookupd, "run nsqlookupd, the discovery service (also: nsqmp-nsqlookupd)"),
    "check-config": (cmd_check_config, "validate a TOML config file and print the resolved options"),
    "health": (cmd_health, "exit 0 if the broker these options configure answers /ping (the image's HEALTHCHECK)"),
    "admin": (cmd_admin, "run the admin web UI, nsqadmin (also: nsqmp-nsqadmin)"),
    "bench": (cmd_bench, "benchmarks and load generators (`nsqmp bench --help` lists them)"),
    "tail": (utils.cmd_tail, "print a topic's messages to stdout (nsq_tail)"),
    "to-file": (utils.cmd_to_file, "write a topic's messages to rotated, optionally gzipped files (nsq_to_file)"),
    "to-http": (utils.cmd_to_http, "send a topic's messages to HTTP endpoints, GET or POST (nsq_to_http)"),
    "to-nsq": (utils.cmd_to_nsq, "publish stdin to a topic, one message per line (to_nsq)"),
    "nsq-to-nsq": (utils.cmd_nsq_to_nsq, "copy topics from brokers to other brokers (nsq_to_nsq)"),
    "stat": (utils.cmd_stat, "a rolling table of a topic/channel's stats over its brokers (nsq_stat)"),
}


def usage() -> str:
    """`nsqmp --help`: every command with its one-line description."""
    width = max(map(len, COMMANDS)) + 3
    lines = [f"usage: nsqmp {{{','.join(COMMANDS)}}} ...", ""]
    lines += [f"  {name:<{width}}{text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-version", "--version"):
        print(nsqd_version())
        return 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        asked = bool(argv) and argv[0] in ("-h", "--help")
        print(usage(), file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    return COMMANDS[argv[0]][0](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
