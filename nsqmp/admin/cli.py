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


def nsqadmin_main() -> None:
    """Console script `nsqmp-nsqadmin` (nsqadmin's Go-flag command line comes in a later commit)."""
    sys.exit(cmd_admin(sys.argv[1:]))
