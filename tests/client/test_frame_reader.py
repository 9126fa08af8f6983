"""The test client's frame reader: whole frames only, and no further than asked."""
import struct

import pytest

from nsqmp.client import wire


def frame(ftype: int, data: bytes) -> bytes:
    return struct.pack(">ii", 4 + len(data), ftype) + data


def test_frames_split_across_reads_come_out_whole():
    stream = frame(wire.FRAME_RESPONSE, b"OK") + frame(wire.FRAME_ERROR, b"E_INVALID x")
    reader, got = wire.FrameReader(), []
    for k in range(len(stream)):
        got += reader.feed(stream[k:k + 1])
    assert got == [(wire.FRAME_RESPONSE, b"OK"), (wire.FRAME_ERROR, b"E_INVALID x")]
    assert reader.buf == b""


def test_most_leaves_what_follows_untouched():
    """After IDENTIFY turns on snappy the rest of the same read is a compressed stream, which
    must not be parsed as frames (CI once read b'\\xff\\x06\\x00\\x00sNaPpY' as a frame size)."""
    tail = b"\xff\x06\x00\x00sNaPpY\x01\x0e\x00\x00"
    reader = wire.FrameReader()
    assert reader.feed(frame(wire.FRAME_RESPONSE, b"{}") + tail, most=1) == [(wire.FRAME_RESPONSE, b"{}")]
    assert bytes(reader.buf) == tail


def test_a_size_smaller_than_the_type_field_is_an_error_not_a_negative_offset():
    with pytest.raises(ValueError, match="frame size -16384000 "):
        wire.FrameReader().feed(b"\xff\x06\x00\x00sNaPpY")
