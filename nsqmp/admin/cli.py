"""`nsqmp admin` (GNU-style flags) and `nsqmp-nsqadmin` (nsqadmin's command line)."""
from __future__ import annotations

import logging
import sys

from nsqmp.golog import LEVELS, GoLogFormatter


def setup_logging(level: str, prefix: str) -> None:
    """nsqadmin's log lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(GoLogFormatter(prefix))
    logging.basicConfig(level=LEVELS.get(level, logging.INFO), handlers=[handler])


def cmd_admin(argv: list[str]) -> int:
    """`nsqmp admin`: parse the flags and serve the admin UI."""
    from nsqmp.admin.options import parse

    try:
        opts = parse(argv)
    except ValueError as exc:
        print(f"nsqmp admin: {exc}", file=sys.stderr)
        return 2
    setup_logging(opts.log_level, opts.log_prefix)
    from nsqmp.admin.server import serve

    return serve(opts)


def _fatal(text: str) -> int:
    """lg.LogFatal: "[nsqadmin] " prefix, FATAL, exit 1."""
    record = logging.LogRecord("nsqmp.admin", logging.CRITICAL, __file__, 0, text, None, None)
    print(GoLogFormatter("[nsqadmin] ").format(record), file=sys.stderr)
    return 1


def cmd_nsqadmin(argv: list[str]) -> int:
    """nsqadmin's command line verbatim (Go flag syntax, its defaults and log lines)."""
    from nsqmp.admin import gocli

    try:
        flags = gocli.parse_flags(argv)
    except gocli.HelpRequested:
        sys.stderr.write(gocli.usage())
        return 0
    except gocli.UsageError as exc:
        sys.stderr.write(f"{exc}\n{gocli.usage()}")
        return 2
    if flags.get("version"):
        print(gocli.version_string())
        return 0
    try:
        opts, ignored = gocli.resolve(flags)
    except (OSError, ValueError) as exc:
        return _fatal(f"failed to load config file {flags.get('config')} - {exc}")
    try:
        opts.check()
    except ValueError as exc:
        return _fatal(f"failed to instantiate nsqadmin - {exc}")
    setup_logging(opts.log_level, opts.log_prefix)
    log = logging.getLogger("nsqmp.admin")
    log.info("%s", gocli.version_string())
    for line in ignored:
        log.warning("%s", line)
    from nsqmp.admin.server import serve

    return serve(opts)


def nsqadmin_main() -> None:
    """Console script `nsqmp-nsqadmin`."""
    sys.exit(cmd_nsqadmin(sys.argv[1:]))
