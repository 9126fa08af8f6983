"""The read path of a V2 connection: picks the implementation.

``ReadPath`` is the native one from ``nsqmp._native`` (``native/readpath.c``) unless
``NSQMP_PURE_PYTHON=1`` is set or the extension cannot be imported; then it is the
pure-Python twin :class:`nsqmp.acceptor.pyreadpath.ReadPath` (same calls, same order).
V2Connection (nsqmp.acceptor.tcp) derives from it and calls ``configure`` once.
"""
from __future__ import annotations

import os
from typing import Any

from nsqmp.acceptor.pyreadpath import ReadPath as PyReadPath

__all__ = ["NATIVE", "PyReadPath", "ReadPath"]

_native: Any
try:
    from nsqmp import _native
except ImportError:  # extension not built
    _native = None

NATIVE = (_native is not None and hasattr(_native, "ReadPath")
          and os.environ.get("NSQMP_PURE_PYTHON", "") != "1")
ReadPath: Any = _native.ReadPath if NATIVE else PyReadPath
