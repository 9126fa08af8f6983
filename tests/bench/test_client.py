"""The bench reader's frame scanner: native (nsqmp.bench._client.fin_replies) and its twin
(nsqmp.client.wire.py_fin_replies) against a model built from the frame encoder."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqmp.client import wire
from nsqmp.protocol.frames import FRAME_ERROR, FRAME_RESPONSE, frame, message_frame
from tests.bench.conftest import bench_client

IMPLS = [pytest.param(lambda: wire.py_fin_replies, id="twin"),
         pytest.param(lambda: bench_client("fin_replies").fin_replies, id="native")]

message = st.tuples(st.just("m"), st.binary(min_size=16, max_size=16), st.binary(max_size=300))
heartbeat = st.tuples(st.just("h"), st.just(b""), st.just(b""))
response = st.tuples(st.just("r"), st.just(b""), st.sampled_from([b"OK", b"CLOSE_WAIT", b""]))
error = st.tuples(st.just("e"), st.just(b""), st.binary(min_size=1, max_size=40))


def encode(kind: str, msg_id: bytes, data: bytes) -> bytes:
    if kind == "m":
        return message_frame(1_700_000_000_000_000_000, 3, msg_id, data)
    if kind == "h":
        return frame(FRAME_RESPONSE, b"_heartbeat_")
    if kind == "r":
        return frame(FRAME_RESPONSE, data)
    return frame(FRAME_ERROR, data)


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=300, deadline=None)
@given(frames=st.lists(st.one_of(message, heartbeat, response, error), max_size=30), cut=st.integers(0, 40))
def test_replies_match_the_model(impl, frames, cut):
    fin_replies = impl()
    encoded = [encode(*f) for f in frames]
    buf = b"".join(encoded)
    buf = buf[:max(0, len(buf) - cut)]  # a partial frame at the end is left for the next read
    want, messages, consumed, err = [], 0, 0, None
    for (kind, msg_id, data), raw in zip(frames, encoded):
        if consumed + len(raw) > len(buf):
            break
        consumed += len(raw)
        if kind == "m":
            want.append(b"FIN " + msg_id + b"\n")
            messages += 1
        elif kind == "h":
            want.append(b"NOP\n")
        elif kind == "e":
            err = data
            break
    assert fin_replies(buf) == (b"".join(want), messages, consumed, err)
    assert fin_replies(bytearray(buf)) == (b"".join(want), messages, consumed, err)


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_frames_raise(impl):
    fin_replies = impl()
    with pytest.raises(ValueError):
        fin_replies(struct.pack(">ii", 3, 2) + b"xxxx")  # size below the frame type's 4 bytes
    with pytest.raises(ValueError):
        fin_replies(struct.pack(">ii", -1, 2) + b"xxxx")
    with pytest.raises(ValueError):
        fin_replies(struct.pack(">ii", 4 + 10, 2) + b"y" * 10)  # a message shorter than its header
