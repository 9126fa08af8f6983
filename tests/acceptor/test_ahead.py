"""The acceptor's held frames (nsqmp.acceptor.ahead) and frame_ends, native and twin."""
from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqmp.acceptor.ahead import Ahead
from nsqmp.protocol import frames as F
from nsqmp.protocol.frames import message_frame, py_frame_ends

try:
    from nsqmp._native import frame_ends as native_frame_ends
except ImportError:  # pragma: no cover - the extension is built by the install step
    native_frame_ends = None

ENDS = [py_frame_ends] + ([native_frame_ends] if native_frame_ends is not None else [])


def frame(i: int) -> bytes:
    return message_frame(i, 1, b"%016d" % i, b"x" * (i % 7))


def ends_of(data: bytes, ends) -> list[int]:
    return array("I", ends(data)).tolist()


@pytest.mark.parametrize("ends", ENDS)
def test_frame_ends_are_where_whole_frames_end(ends):
    data = b"".join(frame(i) for i in range(5))
    sizes = [len(frame(i)) for i in range(5)]
    assert ends_of(data, ends) == [sum(sizes[:i + 1]) for i in range(5)]
    assert ends_of(data[:-1], ends) == [sum(sizes[:i + 1]) for i in range(4)]  # the last one cut short
    assert ends_of(b"", ends) == [] and ends_of(data[:3], ends) == []
    assert ends_of(b"\xff\xff\xff\xff" + data, ends) == []  # a size past the end (or negative)
    assert ends_of(memoryview(data)[sizes[0]:], ends) == [sum(sizes[1:i + 1]) for i in range(1, 5)]


@given(st.lists(st.binary(max_size=40), max_size=12), st.integers(0, 600))
def test_the_native_frame_ends_are_its_twins(bodies, cut):
    data = b"".join(message_frame(1, 1, b"0" * 16, b) for b in bodies)[:cut]
    if native_frame_ends is not None:
        assert native_frame_ends(data) == py_frame_ends(data)
    assert F.frame_ends(bytearray(data)) == py_frame_ends(data)


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
    a.hold(memoryview(b"".join(frame(i) for i in range(3))))
    a.hold(memoryview(frame(9)))
    for i, held in enumerate((100, 200)):  # held at 100 ns and at 200 ns
        frames, _, ends = a.chunks[i]
        a.chunks[i] = (frames, held, ends)
    a.write(1, lambda b: None)
    assert a.take(older_than=100) == b""  # held at that instant, not before it
    assert a.take(older_than=150) == frame(1) + frame(2)  # what was not written of it
    assert a.pos == a.done == 0 and len(a.chunks) == 1
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
