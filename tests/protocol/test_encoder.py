"""The publish-path encoder: native (nsqmp._native.encode_records, records_size, crc32c) and
its pure-Python twin (nsqmp.diskqueue.pyencoder), the reference.

Differential tests give both the same spans of the same buffer and require the same bytes
(or the same error, with nothing written). The output must be what segment.encode() draws
and what segment.scan() reads back, and the CRC must equal the crc32c package's value.
"""
from __future__ import annotations

import os
import struct

import crc32c as crc32c_package
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqmp.diskqueue import encoder as chooser
from nsqmp.diskqueue import pyencoder as py
from nsqmp.diskqueue.segment import HEADER, HEADER_SIZE, MAGIC, VERSION, encode, scan
from nsqmp.protocol.frames import MESSAGE_HEADER
from nsqmp.protocol.ids import hex_id
from nsqmp.protocol.pyparser import mpub_spans
from tests.harness import native_module

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SPAN = struct.Struct("<II")
I32 = struct.Struct(">i")


def native():
    return native_module("encode_records")


def run_both(dst_size, dst_pos, src, spans, ts, first, due, fill=0xAB):
    """encode_records on both implementations: (outcome, dst after) of each."""
    out = []
    for impl in (native(), py):
        dst = bytearray([fill]) * dst_size
        try:
            result = ("ok", impl.encode_records(dst, dst_pos, src, spans, ts, first, due))
        except ValueError as exc:
            result = ("ValueError", str(exc))
        out.append((result, bytes(dst)))
    return out


def pack_spans(pairs):
    return b"".join(SPAN.pack(off, size) for off, size in pairs)


def expected(src, pairs, ts, first, due):
    payloads = [MESSAGE_HEADER.pack(ts, 0, hex_id(first + k)) + bytes(src[off:off + size])
                for k, (off, size) in enumerate(pairs)]
    return encode(payloads, due)


# -- CRC-32C ------------------------------------------------------------------

@FUZZ
@given(st.binary(max_size=3000), st.integers(0, 0xFFFFFFFF))
def test_crc32c_equals_the_package(data, value):
    assert native().crc32c(data, value) == crc32c_package.crc32c(data, value)
    assert py.crc32c(data, value) == crc32c_package.crc32c(data, value)


@FUZZ
@given(st.binary(max_size=3000), st.integers(0, 0xFFFFFFFF))
def test_the_table_fallback_equals_the_package(data, value):
    assert native().crc32c_table(data, value) == crc32c_package.crc32c(data, value)


@FUZZ
@given(st.binary(max_size=600), st.integers(0, 600))
def test_crc32c_continues(data, cut):
    cut = min(cut, len(data))
    n = native()
    assert n.crc32c(data[cut:], n.crc32c(data[:cut])) == crc32c_package.crc32c(data)


def test_crc32c_known_values_and_every_alignment():
    n = native()
    assert n.crc32c(b"") == 0
    assert n.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    data = os.urandom(4096 + 7)
    for start in range(9):
        for length in (0, 1, 7, 8, 9, 63, 64, 65, 4096):
            chunk = data[start:start + length]
            assert n.crc32c(chunk) == crc32c_package.crc32c(chunk)
            assert n.crc32c_table(chunk) == crc32c_package.crc32c(chunk)
    assert n.CRC32C_HARDWARE in (0, 1)


def test_crc32c_rejects_a_value_past_32_bits():
    with pytest.raises(ValueError):
        native().crc32c(b"x", 1 << 32)
    with pytest.raises(ValueError):
        py.crc32c(b"x", 1 << 32)


# -- encode_records: differential ----------------------------------------------

bodies = st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=40)


@FUZZ
@given(bodies, st.binary(max_size=20), st.integers(-(1 << 63), (1 << 63) - 1),
       st.integers(0, (1 << 64) - 1 - 64), st.sampled_from([0, 1, -5, 1_800_000_000_000_000_000]),
       st.integers(0, 40))
def test_native_and_twin_write_the_same_bytes(items, gap, ts, first, due, dst_pos):
    # the bodies sit at arbitrary places of a bigger buffer, as in a read buffer
    src = bytearray(gap)
    pairs = []
    for body in items:
        pairs.append((len(src), len(body)))
        src += body + gap
    spans = pack_spans(pairs)
    need = native().records_size(spans, due != 0)
    assert need == py.records_size(spans, due != 0)
    (nres, ndst), (pres, pdst) = run_both(dst_pos + need + 3, dst_pos, src, spans, ts, first, due)
    assert nres == pres == ("ok", need)
    assert ndst == pdst
    assert ndst[dst_pos:dst_pos + need] == expected(src, pairs, ts, first, due)
    assert ndst[:dst_pos] == bytes([0xAB]) * dst_pos and ndst[dst_pos + need:] == b"\xab" * 3


@FUZZ
@given(st.binary(max_size=200), st.lists(st.tuples(st.integers(0, 260), st.integers(0, 260)), max_size=8),
       st.integers(0, 2000), st.integers(-3, 60))
def test_bad_spans_and_small_buffers_fail_alike_writing_nothing(src, pairs, dst_size, dst_pos):
    spans = pack_spans(pairs)
    (nres, ndst), (pres, pdst) = run_both(dst_size, dst_pos, src, spans, 1, 2, 0)
    assert nres == pres
    assert ndst == pdst
    if nres[0] != "ok":
        assert ndst == b"\xab" * dst_size


def test_malformed_spans_are_refused():
    for impl in (native(), py):
        with pytest.raises(ValueError, match="pairs"):
            impl.records_size(b"1234567", False)
        with pytest.raises(ValueError, match="pairs"):
            impl.encode_records(bytearray(100), 0, b"abc", b"123", 0, 0, 0)
        with pytest.raises(BufferError):
            impl.encode_records(b"readonly" * 10, 0, b"abc", SPAN.pack(0, 3), 0, 0, 0)


def test_chooser_picks_native_unless_pure_python_is_asked():
    if os.environ.get("NSQMP_PURE_PYTHON", "") == "1":
        assert chooser.encode_records is py.encode_records
    else:
        assert chooser.encode_records is native().encode_records


# -- the output is a segment ---------------------------------------------------

@FUZZ
@given(st.lists(st.binary(min_size=1, max_size=500), min_size=1, max_size=30), st.booleans())
def test_spans_from_an_mpub_encode_into_records_scan_reads_back(tmp_path_factory, items, deferred):
    body = I32.pack(len(items)) + b"".join(I32.pack(len(b)) + b for b in items)
    buf = b"MPUB t\n" + I32.pack(len(body)) + body + b"trailing"
    spans, err = mpub_spans(buf, 11, len(body), 1 << 20, 1 << 24)
    assert err is None and spans is not None
    ts, first, due = 1_700_000_000_000_000_000, 0x1234_5678_9000_0000, (5 if deferred else 0)
    n = native()
    need = n.records_size(spans, deferred)
    seg = bytearray(HEADER_SIZE + need + 8)
    seg[:HEADER.size] = HEADER.pack(MAGIC, VERSION, 0, 0)
    assert n.encode_records(seg, HEADER_SIZE, buf, spans, ts, first, due) == need
    path = tmp_path_factory.mktemp("seg") / "00.00000000.seg"
    path.write_bytes(seg)
    got = list(scan(str(path)))
    assert [g[1][26:] for g in got] == items
    assert [g[1][10:26] for g in got] == [hex_id(first + k) for k in range(len(items))]
    assert all(g[2] == due for g in got)


def test_the_chooser_spans_of_helper():
    src, spans = chooser.spans_of([b"a", b"bcd", b"ef"])
    assert src == b"abcdef"
    assert list(SPAN.iter_unpack(spans)) == [(0, 1), (1, 3), (4, 2)]
