"""``nsqmp lookupd`` and the ``nsqmp-nsqlookupd`` drop-in (console script
``nsqmp.lookupd.cli:main``).

The drop-in takes nsqlookupd's command line verbatim (Go flag syntax, its defaults:
0.0.0.0:4160 and 0.0.0.0:4161) and writes nsqlookupd's log lines, so scripts and test
harnesses written for nsqlookupd run it unchanged. ``nsqmp lookupd`` is the same service
with loopback defaults (127.0.0.1:4160 and 127.0.0.1:4161).
"""
from __future__ import annotations

import logging
import sys

from nsqmp import golog
from nsqmp.golog import GoLogFormatter
from nsqmp.lookupd import version_string
from nsqmp.lookupd.options import (
    ConfigFileError, HelpRequested, UsageError, parse_flags, resolve, usage,
)

_OWN_DEFAULTS = {"tcp-address": "127.0.0.1:4160", "http-address": "127.0.0.1:4161"}


def _fatal(text: str) -> int:
    """lg.LogFatal: always the "[nsqlookupd] " prefix; exit code 1."""
    record = logging.LogRecord("nsqmp.lookupd", logging.CRITICAL, __file__, 0, text, None, None)
    print(GoLogFormatter("[nsqlookupd] ").format(record), file=sys.stderr)
    return 1


def run(argv: list[str], prog: str = "nsqlookupd", defaults: dict | None = None) -> int:
    """Parse, then serve until SIGTERM/SIGINT; returns the exit code."""
    try:
        flags = parse_flags(argv)
    except HelpRequested:
        sys.stderr.write(usage(prog, defaults))
        return 0
    except UsageError as exc:
        sys.stderr.write(f"{exc}\n{usage(prog, defaults)}")
        return 2
    if flags.get("version"):
        print(version_string())
        return 0
    try:
        opts = resolve(flags, defaults)
    except ConfigFileError as exc:
        return _fatal(str(exc))

    golog.setup(opts.log_level, opts.log_format, opts.log_prefix, nsqd_style=True,
                logger="nsqmp.lookupd", role="lookupd")

    from nsqmp.lookupd.server import LookupdServer

    return LookupdServer(opts).run()


def cmd_lookupd(argv: list[str]) -> int:
    """``nsqmp lookupd``: nsqlookupd's flags with loopback defaults."""
    return run(argv, prog="nsqmp lookupd", defaults=_OWN_DEFAULTS)


def main() -> None:
    """Console script ``nsqmp-nsqlookupd``: nsqlookupd's command line, verbatim."""
    sys.exit(run(sys.argv[1:]))
