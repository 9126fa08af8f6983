"""A channel's messages in flight: picks the implementation.

``InFlightMap`` is the native one from ``nsqmp._native`` (``native/inflight.c``, slot
layout drawn there) unless ``NSQMP_PURE_PYTHON=1`` is set or the extension cannot be
imported; then it is the pure-Python twin :mod:`nsqmp.router.pyinflight`. One delivery
pass for one consumer, and one timed-out flight, are one call each::

    taken = in_flight.fly(ready, n, flight, flight.members, out)
    landed = in_flight.land(flight.members, flight, ready)
    landed = in_flight.expire(flight.members, flight, ready)  # no member has left it
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from nsqmp.router import pyinflight

__all__ = ["NATIVE", "InFlightMap"]

_native: Any
try:
    from nsqmp import _native
except ImportError:  # extension not built
    _native = None

NATIVE = (_native is not None and hasattr(_native, "InFlightMap")
          and os.environ.get("NSQMP_PURE_PYTHON", "") != "1")
if TYPE_CHECKING:
    from nsqmp.router.pyinflight import InFlightMap
elif NATIVE:
    InFlightMap = _native.InFlightMap
else:
    InFlightMap = pyinflight.InFlightMap
