"""The acceptor's held frames (nsqmp.acceptor.ahead) and frames_span, native and twin."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqmp.acceptor.ahead import Ahead
from nsqmp.protocol import frames as F
from nsqmp.protocol.frames import message_frame, py_frames_span

try:
    from nsqmp._native import frames_span as native_frames_span
except ImportError:  # pragma: no cover - the extension is built by the install step
    native_frames_span = None

SPANS = [py_frames_span] + ([native_frames_span] if native_frames_span is not None else [])


def frame(i: int) -> bytes:
    return message_frame(i, 1, b"%016d" % i, b"x" * (i % 7))


@pytest.mark.parametrize("span", SPANS)
def test_frames_span_counts_whole_frames(span):
    data = b"".join(frame(i) for i in range(5))
    sizes = [len(frame(i)) for i in range(5)]
    assert span(data, 0, 3) == (sum(sizes[:3]), 3)
    assert span(data, sizes[0], 10) == (len(data), 4)
    assert span(data, 0, 0) == (0, 0)
    assert span(data[:-1], 0, 10) == (sum(sizes[:4]), 4)  # the last one cut short
    assert span(data, len(data), 2) == (len(data), 0)
    with pytest.raises(ValueError):
        span(data, len(data) + 1, 1)


@given(st.lists(st.binary(max_size=40), max_size=12), st.integers(0, 14), st.integers(0, 600))
def test_the_native_frames_span_is_its_twins(bodies, k, cut):
    data = b"".join(message_frame(1, 1, b"0" * 16, b) for b in bodies)[:cut]
    if native_frames_span is not None:
        assert native_frames_span(data, 0, k) == py_frames_span(data, 0, k)
    assert F.frames_span(bytearray(data), 0, k) == py_frames_span(data, 0, k)


def test_write_one_frame_per_fin_across_records():
    a = Ahead()
    assert not a
    a.hold(memoryview(b"".join(frame(i) for i in range(3))))
    a.hold(memoryview(b"".join(frame(i) for i in range(3, 5))))
    out: list[bytes] = []
    assert a.write(2, lambda b: out.append(bytes(b))) == 2
    assert out == [frame(0) + frame(1)]
    assert a.write(2, lambda b: out.append(bytes(b))) == 2  # the rest of one record, the next's first
    assert out[1:] == [frame(2), frame(3)]
    assert a.write(5, lambda b: out.append(bytes(b))) == 1
    assert out[3:] == [frame(4)] and not a
    assert a.write(1, out.append) == 0


def test_owed_frames_are_taken_from_the_next_fins():
    a = Ahead()
    a.hold(memoryview(b"".join(frame(i) for i in range(4))))
    a.owe()
    out: list[bytes] = []
    assert a.write(1, lambda b: out.append(bytes(b))) == 0  # the refused FIN's frame was written already
    assert a.write(2, lambda b: out.append(bytes(b))) == 2 and out == [frame(0) + frame(1)]


def test_take_returns_what_is_left_and_only_what_is_old():
    a = Ahead()
    a.chunks.append((memoryview(b"".join(frame(i) for i in range(3))), 100))  # held at 100 ns
    a.chunks.append((memoryview(frame(9)), 200))
    a.write(1, lambda b: None)
    assert a.take(older_than=100) == b""  # held at that instant, not before it
    assert a.take(older_than=150) == frame(1) + frame(2)  # what was not written of it
    assert a.pos == 0 and len(a.chunks) == 1
    assert a.take() == frame(9) and not a


def test_frames_within_rdy_go_out_after_those_held_before_them():
    """A DELIVER while frames are held: as many frames are written, the oldest, and the
    DELIVER's wait in their place (the router counts how many are held, not which)."""
    a = Ahead()
    a.hold(memoryview(frame(0) + frame(1) + frame(2)))
    out: list[bytes] = []
    a.write_within(memoryview(frame(3) + frame(4)), lambda b: out.append(bytes(b)))
    assert out == [frame(0) + frame(1)]
    assert a.write(3, lambda b: out.append(bytes(b))) == 3
    assert out[1:] == [frame(2), frame(3) + frame(4)] and not a
