"""Shared-memory SPSC byte ring: picks the implementation.

``Ring`` is the native type ``nsqmp._native.Ring`` unless the environment
variable ``NSQMP_PURE_PYTHON=1`` is set or the extension cannot be imported,
in which case it is the pure-Python twin :class:`nsqmp.ipc.pyring.PyRing`
(same binary layout, same API; see ``native/ring.h``).

Usage pattern (producer)::

    r = ring.push(data)            # or n, wake = ring.push_many(batch, i)
    if r == 2: ring the consumer's doorbell
    if r == 0 and ring.prepare_wait(len(data)): sleep on the producer doorbell

(consumer)::

    recs = ring.pop_many()
    if recs and ring.take_producer_wakeup(): ring the producer's doorbell
    if not recs and ring.prepare_sleep(): sleep on the consumer doorbell
"""

from __future__ import annotations

import os
from typing import Any

from nsqmp.ipc.pyring import HEADER_SIZE, PyRing, ring_size

__all__ = ["HEADER_SIZE", "NativeRing", "PyRing", "Ring", "ring_size"]

NativeRing: Any
try:
    from nsqmp._native import Ring as NativeRing
except ImportError:  # extension not built
    NativeRing = None

Ring: Any
if NativeRing is not None and os.environ.get("NSQMP_PURE_PYTHON", "") != "1":
    Ring = NativeRing
else:
    Ring = PyRing
