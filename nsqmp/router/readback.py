"""The router's read-back path: picks the implementation.

``Message``, ``read_messages`` and ``pack_frames`` are the native ones from
``nsqmp._native`` (``native/readback.c``; record layout drawn in ``native/publish.h``)
unless ``NSQMP_PURE_PYTHON=1`` is set or the extension cannot be imported; then they are
the pure-Python twin :mod:`nsqmp.router.pyreadback` (same API, same results).

Records read back from a segment file (or carried by a PUBLISH) become queue entries in
one call, and a consumer's deliveries become one DELIVER record in one call::

    entries, consumed, deferred = read_messages(data, file_offset, want, segment)
    record, next_index = pack_frames(head, [(message, attempts), ...], 0, max_bytes)
    record, next_index = pack_members(head, flight.members, 0, max_bytes)  # message, attempts, ...
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from nsqmp.router import pyreadback

__all__ = ["Message", "NATIVE", "pack_frames", "pack_members", "read_messages"]

_native: Any
try:
    from nsqmp import _native
except ImportError:  # extension not built
    _native = None

NATIVE = (_native is not None and hasattr(_native, "read_messages")
          and os.environ.get("NSQMP_PURE_PYTHON", "") != "1")
if TYPE_CHECKING:  # both have the twin's signatures
    from nsqmp.router.pyreadback import Message, pack_frames, pack_members, read_messages
elif NATIVE:
    Message, read_messages = _native.Message, _native.read_messages
    pack_frames, pack_members = _native.pack_frames, _native.pack_members
else:
    Message, read_messages = pyreadback.Message, pyreadback.read_messages
    pack_frames, pack_members = pyreadback.pack_frames, pyreadback.pack_members
