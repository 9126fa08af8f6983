"""The broker's and lookupd's log output: NSQ's text lines, or one JSON object per line.

Text, in the format of NSQ's Go daemons (internal/lg after log.Ldate|Ltime|Lmicroseconds):

    [nsqd] 2026/11/22 10:00:00.123456 INFO: TCP: listening on 127.0.0.1:4150

Used by the drop-ins (nsqmp-nsqd, nsqmp-nsqlookupd) so harnesses written for NSQ can read
them. Level names are lg's: DEBUG INFO WARNING ERROR FATAL.

JSON (``--log-format json``, nsqmp's own), for log shippers: one object per line,

    {"time":"2026-11-22T10:00:00.123Z","level":"info","role":"acceptor 0","pid":4242,
     "logger":"nsqmp.acceptor","msg":"TCP: new client(127.0.0.1:50412)","remote":"127.0.0.1:50412"}

with the fields a log call passes as ``extra=`` (remote, client_id, user_agent, topic,
channel, code, ...) after the fixed ones, and ``exc`` holding a traceback.
"""
from __future__ import annotations

import datetime
import logging
import os
import re
import sys
from typing import Any, ClassVar

import orjson
import setproctitle

#: nsqd's log-level names (lg.ParseLogLevel) -> logging levels
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "error": logging.ERROR, "fatal": logging.CRITICAL}
#: logging levels -> nsqd's names, as the JSON lines spell them
_LEVEL_NAMES = {value: name for name, value in LEVELS.items()}
# the titles nsqmp's processes give themselves (nsqmp/roles.py, the supervisor)
_ROLE_TITLE = re.compile(r"nsqmp (supervisor|timer|acceptor \d+|router \d+)$")
#: --log-format's values
FORMATS = ("text", "json")

# what every LogRecord has: the JSON formatter writes any other attribute as a field
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class GoLogFormatter(logging.Formatter):
    """NSQ's text lines: prefix, date and time to the microsecond, lg's level name, message."""

    _NAMES: ClassVar[dict[str, str]] = {"CRITICAL": "FATAL"}

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created).strftime("%Y/%m/%d %H:%M:%S.%f")
        level = self._NAMES.get(record.levelname, record.levelname)
        text = f"{self.prefix}{when} {level}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def process_role(default: str) -> str:
    """This process's role as its title names it ("nsqmp acceptor 0" -> "acceptor 0"),
    or `default` before a title is set (the command line, lookupd)."""
    found = _ROLE_TITLE.match(setproctitle.getproctitle())
    return found.group(1) if found else default


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time (RFC 3339, UTC, milliseconds), level (nsqd's name),
    role and pid of the process, logger, msg, then the record's own fields."""

    def __init__(self, role: str = "nsqmp") -> None:
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
        out: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": _LEVEL_NAMES.get(record.levelno, record.levelname.lower()),
            "role": process_role(self.role),
            "pid": record.process if record.process is not None else os.getpid(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def make_handler(fmt: str, prefix: str, *, nsqd_style: bool = False, role: str = "nsqmp") -> logging.Handler:
    """A stderr handler writing `fmt` ("text" or "json"). Text is nsqd's line with
    `nsqd_style`, else nsqmp's (prefix, time, level, logger[pid]); JSON ignores the prefix."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonLogFormatter(role))
    elif nsqd_style:
        handler.setFormatter(GoLogFormatter(prefix))
    else:
        handler.setFormatter(logging.Formatter(
            f"{prefix}%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s", "%Y/%m/%d %H:%M:%S"))
    return handler


def setup(level: str, fmt: str = "text", prefix: str = "[nsqmp] ", *, nsqd_style: bool = False,
          logger: str = "", role: str = "nsqmp") -> None:
    """Send `logger` (the root logger by default) to stderr in `fmt` at nsqd's `level`.
    A named logger stops propagating, so it alone writes its lines (lookupd)."""
    handler = make_handler(fmt, prefix, nsqd_style=nsqd_style, role=role)
    log = logging.getLogger(logger or None)
    log.handlers[:] = [handler]
    log.setLevel(LEVELS.get(level, logging.INFO))
    if logger:
        log.propagate = False
