"""Log lines in the format of NSQ's Go daemons (internal/lg after log.Ldate|Ltime|Lmicroseconds):

    [nsqd] 2026/11/22 10:00:00.123456 INFO: TCP: listening on 127.0.0.1:4150

Used by the drop-ins (nsqmp-nsqd, nsqmp-nsqlookupd) so harnesses written for NSQ can read
them. Level names are lg's: DEBUG INFO WARNING ERROR FATAL.
"""
from __future__ import annotations

import datetime
import logging
from typing import ClassVar

#: nsqd's log-level names (lg.ParseLogLevel) -> logging levels
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "error": logging.ERROR, "fatal": logging.CRITICAL}


class GoLogFormatter(logging.Formatter):
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
