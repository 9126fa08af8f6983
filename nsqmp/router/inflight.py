"""A channel's messages in flight: picks the implementation.

``InFlightMap`` and ``Flight`` are the native ones from ``nsqmp._native``
(``native/inflight.c``, slot layout drawn there; ``native/flight.h``, whose struct the
map reads instead of looking attributes up) unless ``NSQMP_PURE_PYTHON=1`` is set or the
extension cannot be imported; then they are the pure-Python twins of
:mod:`nsqmp.router.pyinflight` (same fields, same constructor). One delivery
pass for one consumer, and one timed-out flight, are one call each::

    taken = in_flight.fly(ready, n, flight, flight.members, out)
    landed = in_flight.land(flight.members, flight, ready)
    landed = in_flight.expire(flight.members, flight, ready)  # no member has left it
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from nsqmp.router import pyinflight

__all__ = ["NATIVE", "Flight", "InFlightMap"]

_native: Any
try:
    from nsqmp import _native
except ImportError:  # extension not built
    _native = None

NATIVE = (_native is not None and hasattr(_native, "InFlightMap")
          and os.environ.get("NSQMP_PURE_PYTHON", "") != "1")
if TYPE_CHECKING:
    from nsqmp.router.pyinflight import Flight, InFlightMap
elif NATIVE:
    InFlightMap, Flight = _native.InFlightMap, _native.Flight
else:
    InFlightMap, Flight = pyinflight.InFlightMap, pyinflight.Flight
