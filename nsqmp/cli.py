"""The `nsqmp` command: serve, check-config, bench."""
from __future__ import annotations

import argparse
import logging
import sys

from nsqmp.config import ConfigError, build_parser, from_namespace, render_resolved

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "error": logging.ERROR, "fatal": logging.CRITICAL}


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=_LEVELS.get(level, logging.INFO),
        format="[nsqmp] %(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s",
        datefmt="%Y/%m/%d %H:%M:%S",
        stream=sys.stderr,
    )


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


def cmd_serve(argv: list[str]) -> int:
    parser = build_parser("nsqmp serve", "Run the broker (nsqd-compatible) on this machine.")
    try:
        opts = from_namespace(parser.parse_args(argv))
        check_limits(opts)
    except ConfigError as exc:
        print(f"nsqmp: {exc}", file=sys.stderr)
        return 2
    _setup_logging(opts.log_level)
    from nsqmp.supervisor.arbiter import Supervisor

    return Supervisor(opts).run()


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
    if not argv or argv[0] not in ("writer", "reader", "ring", "heap", "timer", "suite", "tuning"):
        print("usage: nsqmp bench {writer,reader,timer,suite,tuning,ring,heap} [options]", file=sys.stderr)
        return 2
    if argv[0] == "ring":
        from nsqmp.ipc import ringbench

        return ringbench.main(argv[1:]) or 0
    if argv[0] == "heap":
        from nsqmp.timer import heapbench

        return heapbench.main(argv[1:]) or 0
    if argv[0] == "timer":
        from nsqmp.bench import timer

        return timer.main(argv[1:]) or 0
    if argv[0] == "suite":
        from nsqmp.bench import suite

        return suite.main(argv[1:]) or 0
    if argv[0] == "tuning":
        from nsqmp.bench import tuning

        return tuning.main(argv[1:]) or 0
    from nsqmp.bench import tool

    return tool.main(argv)


COMMANDS = {"serve": cmd_serve, "check-config": cmd_check_config, "bench": cmd_bench}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: nsqmp {serve,check-config,bench} ...\n\n"
              "  serve          run the broker (see `nsqmp serve --help`)\n"
              "  check-config   validate a TOML config file and print the resolved options\n"
              "  bench          writer/reader load generators and the ring benchmark",
              file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
