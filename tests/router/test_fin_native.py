"""A FIN record's file accounting in the same call as the map's finish (native/finrun.c
inside InFlightMap.finish, its twin pyinflight.settle_runs): ack log entries, segment refs
and acked counts, drained segments; native and twin against a plain model."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqmp.diskqueue.acklog import ENTRY
from nsqmp.router.topicfiles import Segment
from tests.router.test_inflight import IMPLS, fin_flight, kit, make

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _segments() -> list:
    """Two real segments with refs to spare, and None (a message of no file)."""
    segs = [Segment(3, 7, "/nonexistent/a"), Segment(65535, 2**32 - 1, "/nonexistent/b")]
    return [*segs, None]


def _run(name: str, held_spec, fin_spec, channel: int, refs: tuple[int, int]):
    """finish() of fin_spec's ids (7-argument form) on a map holding held_spec; what it did."""
    segs = _segments()
    segs[0].refs, segs[1].refs = refs
    msgs = [kit(name).message(f"{k:016x}".encode(), k, b"", segs[seg], 100 + k)
            for k, (_, seg) in enumerate(held_spec)]
    held = make(name)
    flights = [fin_flight(name, c, 0) for c in ("me", "other")]
    for m, (fl, _) in zip(msgs, held_spec):
        held.put(m, 1, flights[fl])
        flights[fl].live += 1
    bad, emptied, acks = [], [], bytearray(b"kept")
    ids = b"".join(f"{k:016x}".encode() for k in fin_spec)
    got, drained = held.finish(ids, 0, "me", bad, emptied, channel, acks)
    return ([m.id for m in got], bytes(acks), [(s.refs, s.acked) for s in segs[:2]],
            [segs.index(s) for s in drained], bad, len(held))


def _model(held_spec, fin_spec, channel: int, refs: tuple[int, int]):
    """The same in the plainest words: entries in FIN order, refs counted per message."""
    owner = {f"{k:016x}".encode(): k for k, (fl, _) in enumerate(held_spec) if fl == 0}
    got, acks, bad, drained = [], bytearray(b"kept"), [], []
    count = [list(refs), [0, 0]]
    run_seg, run_n = None, 0

    def close() -> None:
        if run_seg is not None and count[0][run_seg] <= 0 < count[0][run_seg] + run_n:
            drained.append(run_seg)

    for k in fin_spec:
        mid = f"{k:016x}".encode()
        if mid not in owner:
            bad.append(mid)
            continue
        del owner[mid]
        got.append(mid)
        seg = held_spec[k][1]
        if seg == 2:
            continue
        if seg != run_seg:
            close()
            run_seg, run_n = seg, 0
        run_n += 1
        count[0][seg] -= 1
        if channel:
            count[1][seg] += 1
            acks += ENTRY.pack(channel, *[(3, 7), (65535, 2**32 - 1)][seg], 100 + k)
    close()
    return (got, bytes(acks), list(zip(*count)), drained, bad, len(held_spec) - len(got))


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2)), min_size=1, max_size=40),
       st.lists(st.integers(0, 45), max_size=60), st.sampled_from([0, 1, 513, 65535]),
       st.tuples(st.integers(0, 40), st.integers(0, 40)))
def test_native_and_twin_account_a_fin_record_as_the_model_does(held_spec, fin_spec, channel, refs):
    want = _model(held_spec, fin_spec, channel, refs)
    want = (want[0], want[1], [tuple(p) for p in want[2]], *want[3:])
    for name in IMPLS:
        assert _run(name, held_spec, fin_spec, channel, refs) == want, name


@pytest.mark.parametrize("name", IMPLS)
def test_the_last_reference_of_a_segment_drains_it_once(name):
    """Two runs of one segment in one record (another file's message between): the
    segment is drained by the run that takes its refs to 0, and only once."""
    held_spec = [(0, 0), (0, 1), (0, 0), (0, 0)]
    got, acks, counts, drained, bad, left = _run(name, held_spec, [0, 1, 2, 3], 9, (3, 5))
    assert drained == [0] and counts == [(0, 3), (4, 1)] and not bad and left == 0
    assert [ENTRY.unpack_from(acks, 4 + 16 * i)[3] for i in range(4)] == [100, 101, 102, 103]


@pytest.mark.parametrize("name", IMPLS)
def test_bad_channel_ids_and_ack_buffers_raise(name):
    held = make(name)
    with pytest.raises(OverflowError):
        held.finish(b"", 0, "me", [], [], 65536, bytearray())
    if name == "native":  # the twin takes any mutable buffer
        with pytest.raises(TypeError):
            held.finish(b"", 0, "me", [], [], 1, b"")
