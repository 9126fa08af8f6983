"""The publish-path encoder: picks the implementation.

``crc32c``, ``records_size`` and ``encode_records`` are the native ones from
``nsqmp._native`` (``native/publish.c``, layout drawn in ``native/publish.h``) unless
``NSQMP_PURE_PYTHON=1`` is set or the extension cannot be imported; then they are the
pure-Python twin :mod:`nsqmp.diskqueue.pyencoder` (same API, same bytes).

The publisher encodes a batch in one call per block of IDs::

    need = records_size(spans, due != 0)
    written = encode_records(record, head_size, read_buffer, spans, ts, first_id, due)
"""
from __future__ import annotations

import os
from typing import Any

from nsqmp.diskqueue.pubrun import PUB_RUN_MAPPED_MAX
from nsqmp.diskqueue.pubrun import SegmentTail as PySegmentTail
from nsqmp.diskqueue.pubrun import pub_run as py_pub_run
from nsqmp.diskqueue.pyencoder import SPAN
from nsqmp.diskqueue.pyencoder import crc32c as py_crc32c
from nsqmp.diskqueue.pyencoder import encode_records as py_encode_records
from nsqmp.diskqueue.pyencoder import records_size as py_records_size

__all__ = ["PUB_RUN_MAPPED_MAX", "SPAN", "SegmentTail", "crc32c", "encode_records", "pub_run", "records_size", "spans_of"]

native_crc32c: Any
native_records_size: Any
native_encode_records: Any
native_pub_run: Any
NativeSegmentTail: Any
try:
    from nsqmp._native import crc32c as native_crc32c
    from nsqmp._native import encode_records as native_encode_records
    from nsqmp._native import SegmentTail as NativeSegmentTail
    from nsqmp._native import pub_run as native_pub_run
    from nsqmp._native import records_size as native_records_size
except ImportError:  # extension not built
    native_crc32c = native_records_size = native_encode_records = native_pub_run = NativeSegmentTail = None

crc32c: Any
records_size: Any
encode_records: Any
pub_run: Any  # a run of PUB/MPUB from a read buffer to a segment (native/pubrun.c)
SegmentTail: Any  # where an acceptor appends to a topic's segment (native/segtail.c)
if native_encode_records is not None and os.environ.get("NSQMP_PURE_PYTHON", "") != "1":
    crc32c, records_size, encode_records = native_crc32c, native_records_size, native_encode_records
    pub_run, SegmentTail = native_pub_run, NativeSegmentTail
else:
    crc32c, records_size, encode_records = py_crc32c, py_records_size, py_encode_records
    pub_run, SegmentTail = py_pub_run, PySegmentTail


def spans_of(bodies: list[bytes]) -> tuple[bytes, bytes]:
    """(source, spans) for bodies held as separate bytes objects (HTTP, tests)."""
    src = b"".join(bodies)
    spans = bytearray(8 * len(bodies))
    pos = 0
    for k, body in enumerate(bodies):
        SPAN.pack_into(spans, 8 * k, pos, len(body))
        pos += len(body)
    return src, bytes(spans)
