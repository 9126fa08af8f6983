"""The NSQ V2 command parser: picks the implementation.

``Parser`` and ``mpub_spans`` are the native ones from
``nsqmp._native`` (``native/parser.c``, layouts and limits drawn in
``native/parser.h``) unless ``NSQMP_PURE_PYTHON=1`` is set or the extension
cannot be imported; then they are the pure-Python twin
:mod:`nsqmp.protocol.pyparser` (same API, same results). The constants come
from the twin: the tests check that the native module has the same values.

The acceptor's parse loop makes one ``scan`` per read buffer::

    commands, end, status, error = parser.scan(buf, pos)
    for params, body_off, body_len, next_pos in commands:
        ...  # COMMANDS[params[0]](conn, params, body_off, body_len)
"""
from __future__ import annotations

import os
from typing import Any

from nsqmp.protocol.pyparser import (
    BODY_INVALID, BODY_PENDING, MAX_LINE, NO_BODY, SCAN_BAD_BODY, SCAN_BODY_PENDING,
    SCAN_LINE_TOO_LONG, SCAN_MORE, SCAN_NEED_MORE, Command, PyParser,
    mpub_spans as py_mpub_spans,
)

__all__ = [
    "BODY_INVALID", "BODY_PENDING", "MAX_LINE", "NO_BODY", "SCAN_BAD_BODY", "SCAN_BODY_PENDING",
    "SCAN_LINE_TOO_LONG", "SCAN_MORE", "SCAN_NEED_MORE", "Command", "NativeParser", "Parser",
    "PyParser", "mpub_spans",
]

NativeParser: Any
native_mpub_spans: Any
try:
    from nsqmp._native import Parser as NativeParser
    from nsqmp._native import mpub_spans as native_mpub_spans
except ImportError:  # extension not built
    NativeParser = native_mpub_spans = None

Parser: Any
mpub_spans: Any
if NativeParser is not None and os.environ.get("NSQMP_PURE_PYTHON", "") != "1":
    Parser, mpub_spans = NativeParser, native_mpub_spans
else:
    Parser, mpub_spans = PyParser, py_mpub_spans
