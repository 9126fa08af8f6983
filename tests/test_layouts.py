"""The byte layouts C and Python share are declared equal on both sides.

native/layouts.h (segment file and record, due time, message header, frame) and
native/ring.h (the ring's header and records) are read here through
nsqmp._native.layouts; nsqmp.layouts and nsqmp.ipc.pyring declare the Python side.
"""
from __future__ import annotations

import struct

import pytest

from nsqmp import layouts
from nsqmp.ipc import pyring, records

native = pytest.importorskip("nsqmp._native")


def _python_value(value):
    return value.size if isinstance(value, struct.Struct) else value


def test_every_layout_constant_of_the_header_is_declared_equal_in_python():
    c = native.layouts
    shared = {k: v for k, v in c.items() if not k.startswith("RING_") and k not in ("TOKEN", "ARM_ENTRY")}
    assert shared  # the header exported something
    for name, value in shared.items():
        assert hasattr(layouts, name), f"nsqmp.layouts lacks {name} (native/layouts.h NQL_{name})"
        assert _python_value(getattr(layouts, name)) == value, name


def test_the_ring_layout_of_ring_h_is_the_twins():
    c = native.layouts
    assert c["RING_MAGIC"] == pyring.MAGIC
    assert c["RING_VERSION"] == pyring.VERSION
    assert c["RING_HEADER_SIZE"] == pyring.HEADER_SIZE
    assert c["RING_MIN_CAPACITY"] == pyring.MIN_CAPACITY
    assert c["RING_MAX_CAPACITY"] == pyring.MAX_CAPACITY
    assert c["RING_RECORD_HEADER"] == pyring.RECORD_HEADER
    assert c["RING_WRAP_MARKER"] == pyring.WRAP_MARKER
    for name in ("HEAD", "TAIL", "CONSUMER_SLEEPING", "PRODUCER_WAITING", "CAPACITY", "MAX_RECORD"):
        assert c[f"RING_OFF_{name}"] == getattr(pyring, f"OFF_{name}"), name


def test_the_timer_record_entries_the_heap_reads_are_those_records_packs():
    assert native.layouts["TOKEN"] == records.TOKEN.size
    assert native.layouts["ARM_ENTRY"] == records.TOKEN_DEADLINE.size


def test_the_python_structs_agree_with_their_parts():
    """The sizes C checks are also the sum of the parts the Python structs name."""
    assert layouts.MESSAGE_FRAME_HEAD.size == layouts.FRAME_HEAD.size + layouts.MESSAGE_HEAD.size
    assert layouts.MESSAGE_HEAD.size == layouts.ID_AT + layouts.ID
    assert struct.calcsize(">q") == layouts.ATTEMPTS_AT
    assert layouts.SEGMENT_HEADER.size <= layouts.SEGMENT_HEADER_SIZE
    assert layouts.DEFER & layouts.LENGTH_MASK == 0 and layouts.DEFER | layouts.LENGTH_MASK == 0xFFFFFFFF
    assert struct.calcsize("<H") == layouts.ACK_ACCEPTOR_AT and struct.calcsize("<HH") == layouts.ACK_SEQ_AT
    entry = layouts.ACK_ENTRY.pack(1, 0x0203, 0x04050607, 9)
    assert entry[layouts.ACK_ACCEPTOR_AT] == 3 and entry[layouts.ACK_SEQ_AT] == 7


def test_the_deferred_helpers_read_the_length_word():
    word = layouts.DEFER | 42
    assert layouts.is_deferred(word) and layouts.record_length(word) == 42
    blob = layouts.RECORD_HEAD.pack(word, 0)
    assert layouts.blob_deferred(blob) and not layouts.blob_deferred(layouts.RECORD_HEAD.pack(42, 0))
    assert not layouts.blob_deferred(b"")
