"""Unit and property tests of the shared-memory SPSC ring (native + twin)."""

from __future__ import annotations

import array
import mmap
import os
import random
import struct
import subprocess
import sys
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqmp.ipc import pyring
from nsqmp.ipc import ring as ringmod
from nsqmp.ipc.pyring import PyRing

try:
    from nsqmp import _native
except ImportError as exc:  # pragma: no cover - the extension must build
    _native = None
    _NATIVE_ERROR: ImportError | None = exc
else:
    _NATIVE_ERROR = None

CAP = 4096
HEADER = 512


def test_native_extension_is_built():
    assert _native is not None, f"nsqmp._native failed to import: {_NATIVE_ERROR!r}"
    assert ringmod.NativeRing is _native.Ring


@pytest.fixture(params=["native", "python"])
def impl(request):
    if request.param == "native":
        if _native is None:
            pytest.fail(f"nsqmp._native failed to import: {_NATIVE_ERROR!r}")
        return _native.Ring
    return PyRing


def impls():
    if _native is None:
        pytest.fail(f"nsqmp._native failed to import: {_NATIVE_ERROR!r}")
    return {"native": _native.Ring, "python": PyRing}


def new_buf(capacity=CAP, extra=0):
    return mmap.mmap(-1, HEADER + capacity + extra)


def rec_size(n):
    return (8 + n + 7) & ~7


def head_tail(buf):
    return struct.unpack_from("<Q", buf, 64)[0], struct.unpack_from("<Q", buf, 128)[0]


def payload(seq, n):
    return random.Random(seq).randbytes(n)


# ---------------------------------------------------------------------------
# sizes, header, attach/format errors
# ---------------------------------------------------------------------------


def test_ring_size_everywhere():
    for fn in (pyring.ring_size, ringmod.ring_size, impls() and _native.ring_size):
        assert fn(4096) == 4096 + 512
        assert fn(1 << 30) == (1 << 30) + 512
        for bad in (0, 4095, 2048, 6000, 1 << 31, -4096):
            with pytest.raises(ValueError):
                fn(bad)
        with pytest.raises(TypeError):
            fn("4096")
    assert _native.RING_HEADER_SIZE == pyring.HEADER_SIZE == 512


def test_selection_env():
    code = "from nsqmp.ipc import ring; print(ring.Ring.__module__, ring.NativeRing is not None)"
    for env, expected in (("1", "nsqmp.ipc.pyring True"), ("0", "nsqmp._native True")):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "NSQMP_PURE_PYTHON": env},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert out == expected


def test_format_writes_header(impl):
    buf = bytearray(b"\xaa" * (HEADER + 8192))
    r = impl.format(buf, 8192)
    assert isinstance(r, impl)
    assert buf[0:4] == b"NQRG"
    assert struct.unpack_from("<IHHQI", buf, 0) == (0x4752514E, 1, 0, 8192, 2048)
    assert buf[20:512] == bytes(492)  # reserved, head, tail, flags all zero
    assert buf[512:] == b"\xaa" * 8192  # data area untouched
    assert (r.capacity, r.max_record, r.used, r.free) == (8192, 2048, 0, 8192)


def test_format_resets_state(impl):
    buf = new_buf()
    r = impl.format(buf, CAP)
    r.push(b"abc")
    assert r.prepare_sleep() is False
    r2 = impl.format(buf, CAP)
    assert r2.used == 0 and r.used == 0 and r2.pop() is None


def test_attach_sees_same_state(impl):
    buf = new_buf()
    impl.format(buf, CAP).push(b"hello")
    r = impl(buf)
    assert r.used == rec_size(5)
    assert r.pop() == b"hello"


def test_attach_bigger_buffer_ok(impl):
    buf = new_buf(extra=1000)
    impl.format(buf, CAP)
    assert impl(buf).capacity == CAP


def test_bad_magic(impl):
    buf = new_buf()
    with pytest.raises(ValueError, match="magic"):
        impl(buf)
    impl.format(buf, CAP)
    buf[0] ^= 0xFF
    with pytest.raises(ValueError, match="magic"):
        impl(buf)


def test_bad_version(impl):
    buf = new_buf()
    impl.format(buf, CAP)
    struct.pack_into("<H", buf, 4, 2)
    with pytest.raises(ValueError, match="version"):
        impl(buf)


def test_bad_header_fields(impl):
    buf = new_buf()
    impl.format(buf, CAP)
    struct.pack_into("<Q", buf, 8, 3000)
    with pytest.raises(ValueError):
        impl(buf)
    impl.format(buf, CAP)
    struct.pack_into("<I", buf, 16, 5000)
    with pytest.raises(ValueError):
        impl(buf)


def test_too_small_buffer(impl):
    with pytest.raises(ValueError, match="small"):
        impl.format(bytearray(HEADER + CAP - 8), CAP)
    with pytest.raises(ValueError, match="small"):
        impl.format(bytearray(100), CAP)
    buf = new_buf()
    impl.format(buf, CAP)
    with pytest.raises(ValueError, match="small"):
        impl(memoryview(buf)[: HEADER + CAP - 8])
    with pytest.raises(ValueError, match="small"):
        impl(memoryview(buf)[:100])


@pytest.mark.parametrize("capacity", [0, 8, 2048, 4095, 4097, 6144, 1 << 31, -4096])
def test_capacity_invalid(impl, capacity):
    with pytest.raises(ValueError, match="power of two"):
        impl.format(bytearray(HEADER + 8192), capacity)


def test_bad_buffer_types(impl):
    with pytest.raises(TypeError):
        impl(bytes(HEADER + CAP))  # read-only
    with pytest.raises(TypeError):
        impl.format(bytes(HEADER + CAP), CAP)
    with pytest.raises(TypeError):
        impl(object())
    with pytest.raises(TypeError):
        impl.format("x" * 5000, CAP)
    with pytest.raises(TypeError):
        impl.format(bytearray(HEADER + CAP), "4096")


def test_native_requires_alignment():
    buf = new_buf(extra=8)
    with pytest.raises(ValueError, match="aligned"):
        impls()["native"].format(memoryview(buf)[1:], CAP)
    PyRing.format(memoryview(buf)[1:], CAP)
    with pytest.raises(ValueError, match="aligned"):
        impls()["native"](memoryview(buf)[1:])


def test_formats_other_than_bytes(impl):
    # any writable contiguous buffer, whatever its item format
    buf = array.array("Q", bytes(HEADER + CAP))
    r = impl.format(buf, CAP)
    assert r.push(b"xyz") == 1
    assert impl(buf).pop() == b"xyz"


# ---------------------------------------------------------------------------
# push / pop
# ---------------------------------------------------------------------------


def test_push_pop_basic(impl):
    r = impl.format(new_buf(), CAP)
    assert r.pop() is None
    assert r.pop_many() == []
    assert r.push(b"") == 1
    assert r.push(b"a") == 1
    assert r.push(b"12345678") == 1
    assert r.used == 8 + 16 + 16
    assert r.free == CAP - 40
    assert r.pop() == b""
    assert r.pop_many() == [b"a", b"12345678"]
    assert r.used == 0 and r.free == CAP


def test_record_layout_on_wire(impl):
    buf = new_buf()
    r = impl.format(buf, CAP)
    r.push(b"abcde")
    r.push(b"")
    assert buf[512:528] == struct.pack("<II", 5, 0) + b"abcde" + bytes(3)
    assert buf[528:536] == struct.pack("<II", 0, 0)
    assert head_tail(buf) == (24, 0)


def test_bytes_like_inputs(impl):
    r = impl.format(new_buf(), CAP)
    assert r.push(bytearray(b"ba")) == 1
    assert r.push(memoryview(b"mv")) == 1
    assert r.push(array.array("I", [1, 2])) == 1
    assert r.push_many([b"x", bytearray(b"y"), memoryview(b"zz")[1:]]) == (3, False)
    assert r.push_many((b"t",)) == (1, False)
    out = r.pop_many()
    assert out == [b"ba", b"mv", struct.pack("=II", 1, 2), b"x", b"y", b"z", b"t"]
    assert all(type(x) is bytes for x in out)


def test_bad_record_types(impl):
    r = impl.format(new_buf(), CAP)
    with pytest.raises(TypeError):
        r.push("text")
    with pytest.raises(TypeError):
        r.push(12)
    with pytest.raises(TypeError):
        r.push(memoryview(bytearray(10))[::2])  # not contiguous
    with pytest.raises(TypeError):
        r.push_many([b"ok", "text"])
    with pytest.raises(TypeError):
        r.push_many(12)
    assert r.used == 0  # nothing published by the failing push_many


def test_max_record(impl):
    r = impl.format(new_buf(), CAP)
    assert r.max_record == 1024
    big = bytes(range(256)) * 4
    assert r.push(big) == 1
    assert r.pop() == big
    with pytest.raises(ValueError, match="max_record"):
        r.push(bytes(1025))
    with pytest.raises(ValueError, match="max_record"):
        r.push_many([b"a", b"b", bytes(1025), b"c"])
    assert r.used == 0  # nothing published
    with pytest.raises(ValueError, match="max_record"):
        r.prepare_wait(1025)


def test_oversize_raises_even_when_full(impl):
    r = impl.format(new_buf(), CAP)
    while r.push(bytes(1000)):
        pass
    with pytest.raises(ValueError):
        r.push(bytes(2000))


def test_full_ring(impl):
    r = impl.format(new_buf(), CAP)
    n = 0
    while (res := r.push(bytes([n % 256]) * 100)) == 1:
        n += 1
    assert res == 0
    assert n == CAP // rec_size(100)
    used = r.used
    assert r.push(bytes(100)) == 0
    assert r.used == used  # nothing written
    # still room for a small one
    assert r.free == CAP - n * rec_size(100)
    assert r.push(b"") == (1 if r.free >= 8 else 0)
    r.pop()
    assert r.push(bytes(100)) == 1


def test_fill_exactly(impl):
    r = impl.format(new_buf(), CAP)
    # 4 records of exactly max_record + header = 1032 bytes do not fit; use 1016
    for _ in range(4):
        assert r.push(bytes(1016)) == 1
    assert r.used == CAP and r.free == 0
    assert r.push(b"") == 0
    assert len(r.pop_many()) == 4


def test_wrap_marker_written(impl):
    buf = new_buf()
    r = impl.format(buf, CAP)
    for _ in range(3):
        assert r.push(bytes(1000)) == 1  # 3 * 1008 = 3024
    assert len(r.pop_many()) == 3
    assert r.push(bytes(1016)) == 1  # 3024 + 1024 = 4048, 48 left before end
    assert r.push(b"W" * 100) == 1  # does not fit in 48: wrap
    head, tail = head_tail(buf)
    assert tail == 3024
    assert head == 4048 + 48 + rec_size(100)
    assert buf[512 + 4048 : 512 + 4056] == struct.pack("<II", 0xFFFFFFFF, 0)
    assert buf[512 : 512 + 8] == struct.pack("<II", 100, 0)
    assert r.used == 1024 + 48 + rec_size(100)
    assert r.pop() == bytes(1016)
    assert r.pop() == b"W" * 100
    assert r.used == 0
    assert head_tail(buf) == (head, head)


def test_wrap_needs_room_for_skip(impl):
    r = impl.format(new_buf(), CAP)
    for _ in range(3):
        r.push(bytes(1000))
    r.pop()
    r.pop()  # tail = 2016, head = 3024; 1072 left at the end, 2016 free at start
    assert r.push(bytes(1024)) == 1  # fits at the end: head 4056
    # 40 bytes at end; a 1000-byte record must skip 40 and needs 1008 at start
    assert r.push(bytes(1000)) == 1  # used = 1008+1032+40+1008 = 3088
    assert r.used == 3088
    # next: 1000 bytes needs 1008; free 1008 -> fits exactly
    assert r.push(bytes(1000)) == 1
    assert r.free == 0
    assert [len(x) for x in r.pop_many()] == [1000, 1024, 1000, 1000]


def test_implicit_wrap_short_tail(impl):
    # A foreign producer could leave fewer than 8 bytes before the end; the
    # consumer must treat that as a wrap.  Craft such a state by hand.
    buf = new_buf()
    r = impl.format(buf, CAP)
    start = CAP - 4
    struct.pack_into("<II", buf, 512, 3, 0)
    buf[520:523] = b"abc"
    struct.pack_into("<Q", buf, 128, start)
    struct.pack_into("<Q", buf, 64, start + 4 + 16)
    assert r.used == 20
    assert r.pop_many() == [b"abc"]
    assert head_tail(buf) == (start + 20, start + 20)


def test_corrupt_record_detected(impl):
    buf = new_buf()
    r = impl.format(buf, CAP)
    r.push(b"abc")
    struct.pack_into("<I", buf, 512, 5000)
    with pytest.raises(RuntimeError, match="corrupt"):
        r.pop()
    with pytest.raises(RuntimeError, match="corrupt"):
        r.pop_many()
    struct.pack_into("<I", buf, 512, 3)
    assert r.pop() == b"abc"


def test_push_many_partial_and_start(impl):
    r = impl.format(new_buf(), CAP)
    recs = [bytes([i]) * 500 for i in range(10)]  # 512 bytes each: 8 fit
    assert r.push_many(recs) == (8, False)
    assert r.push_many(recs, 8) == (0, False)
    assert r.pop_many(3) == recs[:3]
    assert r.push_many(recs, 8) == (2, False)
    assert r.push_many(recs, 10) == (0, False)
    assert r.pop_many() == recs[3:10]
    with pytest.raises(ValueError):
        r.push_many(recs, 11)
    with pytest.raises(ValueError):
        r.push_many(recs, -1)
    assert r.push_many([]) == (0, False)
    assert r.push_many(iter([b"a", b"b"])) == (2, False)
    assert r.push_many(records=[b"c"], start=0) == (1, False)
    assert r.pop_many() == [b"a", b"b", b"c"]


def test_push_many_stops_at_first_misfit(impl):
    # order is preserved: a small record after a big one that does not fit
    # must not be written
    r = impl.format(new_buf(), CAP)
    r.push_many([bytes(1000)] * 4)  # 4032 used
    assert r.push_many([bytes(100), b""]) == (0, False)
    assert r.push_many([b"", bytes(100)]) == (1, False)


def test_pop_many_limits(impl):
    r = impl.format(new_buf(), CAP)
    recs = [bytes([i]) * (i * 10) for i in range(10)]
    assert r.push_many(recs) == (10, False)
    assert r.pop_many(0) == []
    assert r.pop_many(max_records=2) == recs[0:2]  # 0 + 10 bytes
    assert r.pop_many(max_bytes=50) == recs[2:4]  # 20 + 30; +40 > 50
    assert r.pop_many(max_bytes=0) == recs[4:5]  # at least one
    assert r.pop_many(1, 10**6) == recs[5:6]
    assert r.pop_many(max_records=10, max_bytes=150) == recs[6:8]  # 60+70; +80 > 150
    assert r.pop_many(max_bytes=170) == recs[8:10]  # exactly 170
    with pytest.raises(ValueError):
        r.pop_many(-1)
    with pytest.raises(ValueError):
        r.pop_many(max_bytes=-1)


def test_pop_many_max_bytes_does_not_pass_wrap(impl):
    # Stopping because of max_bytes right before a wrap must leave the tail
    # before the wrap marker in both implementations (same state).
    buf = new_buf()
    r = impl.format(buf, CAP)
    r.push_many([bytes(1000)] * 3)
    r.pop_many()
    r.push(bytes(1016))  # ends at 4048
    r.push(bytes(100))  # wraps
    assert r.pop_many(max_bytes=1016) == [bytes(1016)]
    assert head_tail(buf)[1] == 4048
    assert r.pop_many() == [bytes(100)]


def test_release(impl):
    buf = new_buf()
    r = impl.format(buf, CAP)
    r.push(b"x")
    with pytest.raises(BufferError):
        buf.close()  # the ring holds the buffer
    r.release()
    r.release()  # idempotent
    for op in (
        r.pop,
        r.pop_many,
        r.prepare_sleep,
        r.take_producer_wakeup,
        lambda: r.push(b"a"),
        lambda: r.push_many([b"a"]),
        lambda: r.prepare_wait(1),
        lambda: r.used,
        lambda: r.free,
        lambda: r.capacity,
        lambda: r.max_record,
    ):
        with pytest.raises(ValueError, match="released"):
            op()
    buf.close()


def test_dealloc_releases_buffer(impl):
    buf = new_buf()
    r = impl.format(buf, CAP)
    del r
    buf.close()  # no exports left


def test_failed_attach_releases_buffer(impl):
    buf = new_buf()
    with pytest.raises(ValueError):
        impl(buf)
    buf.close()


# ---------------------------------------------------------------------------
# sleep / wake handshake
# ---------------------------------------------------------------------------


def flags(buf):
    return struct.unpack_from("<I", buf, 192)[0], struct.unpack_from("<I", buf, 256)[0]


def test_prepare_sleep_then_push_wakes_once(impl):
    buf = new_buf()
    r = impl.format(buf, CAP)
    assert r.prepare_sleep() is True
    assert flags(buf) == (1, 0)
    assert r.push(b"a") == 2
    assert flags(buf) == (0, 0)
    assert r.push(b"b") == 1
    assert r.push_many([b"c"]) == (1, False)


def test_prepare_sleep_then_push_many_wakes_once(impl):
    r = impl.format(new_buf(), CAP)
    assert r.prepare_sleep() is True
    assert r.push_many([]) == (0, False)  # nothing published: flag kept
    assert r.push_many([b"a", b"b"]) == (2, True)
    assert r.push_many([b"c"]) == (1, False)
    assert r.push(b"d") == 1


def test_full_push_does_not_consume_wake(impl):
    r = impl.format(new_buf(), CAP)
    r.push_many([bytes(1016)] * 4)
    r.prepare_sleep()  # data present: False, flag cleared
    assert r.prepare_sleep() is False
    r.pop_many()
    assert r.prepare_sleep() is True
    assert r.push(bytes(1016)) == 2


def test_prepare_sleep_with_data(impl):
    buf = new_buf()
    r = impl.format(buf, CAP)
    r.push(b"x")
    assert r.prepare_sleep() is False
    assert flags(buf) == (0, 0)
    assert r.push(b"y") == 1
    assert r.pop_many() == [b"x", b"y"]
    assert r.prepare_sleep() is True


def test_prepare_wait_and_take_producer_wakeup(impl):
    buf = new_buf()
    r = impl.format(buf, CAP)
    assert r.take_producer_wakeup() is False
    # room: no wait
    assert r.prepare_wait(1024) is False
    assert flags(buf) == (0, 0)
    r.push_many([bytes(1000)] * 4)  # 4032 used, 64 free
    assert r.prepare_wait(56) is False  # 64 bytes fit
    assert r.prepare_wait(57) is True
    assert flags(buf) == (0, 1)
    assert r.take_producer_wakeup() is True
    assert flags(buf) == (0, 0)
    assert r.take_producer_wakeup() is False
    assert r.prepare_wait(100) is True
    r.pop()
    assert r.prepare_wait(100) is False  # space appeared: flag cleared
    assert flags(buf) == (0, 0)
    assert r.take_producer_wakeup() is False
    with pytest.raises(ValueError):
        r.prepare_wait(-1)
    with pytest.raises(TypeError):
        r.prepare_wait("1")


def test_prepare_wait_accounts_for_wrap(impl):
    r = impl.format(new_buf(), CAP)
    r.push_many([bytes(1000)] * 4)  # head 4032: 64 bytes left before the end
    r.pop()  # tail 1008
    assert r.free == 1072
    assert r.prepare_wait(56) is False  # 64 bytes fit at the end
    assert r.prepare_wait(1000) is False  # skip 64 + 1008 == 1072 fits
    # 1024 bytes are free but a 1016-byte payload needs skip 64 + 1024
    assert r.prepare_wait(1016) is True
    assert r.push(bytes(1016)) == 0
    assert r.take_producer_wakeup() is True
    assert r.push(bytes(1000)) == 1
    assert r.free == 0
    assert r.prepare_wait(0) is True


def test_flags_cross_implementation():
    ims = impls()
    buf = new_buf()
    ims["native"].format(buf, CAP)
    a, b = ims["native"](buf), ims["python"](buf)
    assert a.prepare_sleep() is True
    assert b.push(b"x") == 2
    assert b.prepare_sleep() is False
    b.pop()
    assert b.prepare_sleep() is True
    assert a.push_many([b"y"]) == (1, True)


# ---------------------------------------------------------------------------
# cross implementation
# ---------------------------------------------------------------------------

COMBOS = [
    (f, p, c)
    for f in ("native", "python")
    for p in ("native", "python")
    for c in ("native", "python")
]


@pytest.mark.parametrize("fmt,prod,cons", COMBOS)
def test_cross_implementation(fmt, prod, cons):
    ims = impls()
    buf = new_buf()
    ims[fmt].format(buf, CAP)
    p, c = ims[prod](buf), ims[cons](buf)
    rng = random.Random(7)
    expected = deque()
    seq = 0
    for _round in range(300):
        batch = [
            payload(seq + k, rng.randrange(0, 1025)) for k in range(rng.randrange(1, 8))
        ]
        if rng.random() < 0.5:
            n, _ = p.push_many(batch)
        else:
            n = 0
            for item in batch:
                if not p.push(item):
                    break
                n += 1
        expected.extend(batch[:n])
        seq += len(batch)
        if rng.random() < 0.5:
            got = c.pop_many(rng.randrange(1, 6))
        else:
            got = [x for x in (c.pop(),) if x is not None]
        for g in got:
            assert g == expected.popleft()
        assert p.used == c.used
    assert c.pop_many() == list(expected)


def run_script(ring_cls, buf, script):
    out = []
    for op in script:
        if op[0] == "push":
            out.append(ring_cls(buf).push(op[1]))
        elif op[0] == "push_many":
            out.append(ring_cls(buf).push_many(op[1]))
        elif op[0] == "pop_many":
            out.append(ring_cls(buf).pop_many(op[1], op[2]))
        elif op[0] == "sleep":
            out.append(ring_cls(buf).prepare_sleep())
        elif op[0] == "wait":
            out.append(ring_cls(buf).prepare_wait(op[1]))
        elif op[0] == "take":
            out.append(ring_cls(buf).take_producer_wakeup())
    return out


def test_identical_bytes_after_same_operations():
    """Both implementations produce byte-identical buffers."""
    rng = random.Random(99)
    script = []
    for i in range(2000):
        k = rng.randrange(6)
        if k == 0:
            script.append(("push", payload(i, rng.randrange(0, 1025))))
        elif k == 1:
            script.append(
                (
                    "push_many",
                    [
                        payload(i * 100 + j, rng.randrange(0, 300))
                        for j in range(rng.randrange(0, 6))
                    ],
                )
            )
        elif k == 2:
            script.append(("pop_many", rng.randrange(0, 5), rng.randrange(0, 2000)))
        elif k == 3:
            script.append(("sleep",))
        elif k == 4:
            script.append(("wait", rng.randrange(0, 1025)))
        else:
            script.append(("take",))
    ims = impls()
    results = {}
    bufs = {}
    for name, cls in ims.items():
        buf = bytearray(HEADER + CAP)
        cls.format(buf, CAP)
        results[name] = run_script(cls, buf, script)
        bufs[name] = bytes(buf)
    assert results["native"] == results["python"]
    assert bufs["native"] == bufs["python"]


# ---------------------------------------------------------------------------
# property test against a deque model
# ---------------------------------------------------------------------------

sizes = st.integers(min_value=0, max_value=1024)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), sizes),
        st.tuples(st.just("push_many"), st.lists(sizes, max_size=8), st.integers(0, 3)),
        st.tuples(st.just("pop")),
        st.tuples(st.just("pop_many"), st.integers(0, 10), st.integers(0, 4096)),
    ),
    max_size=80,
)


class Model:
    """Independent model: a deque of payloads plus byte accounting."""

    def __init__(self, capacity):
        self.cap = capacity
        self.head = 0
        self.tail = 0
        self.q = deque()  # (payload, end counter)

    def fits(self, n):
        need = rec_size(n)
        room = self.cap - self.head % self.cap
        if need > room:
            need += room
        return self.head - self.tail + need <= self.cap, need

    def push(self, data):
        ok, need = self.fits(len(data))
        if ok:
            self.head += need
            self.q.append((data, self.head))
        return ok

    def pop(self):
        if not self.q:
            return None
        data, end = self.q.popleft()
        self.tail = end
        return data


def check_against_model(ring_for_op, script):
    model = Model(CAP)
    seq = 0
    for op in script:
        ring = ring_for_op()
        if op[0] == "push":
            data = payload(seq, op[1])
            seq += 1
            assert ring.push(data) == (1 if model.push(data) else 0)
        elif op[0] == "push_many":
            batch = [payload(seq + i, n) for i, n in enumerate(op[1])]
            seq += len(batch)
            start = min(op[2], len(batch))
            expect = 0
            for data in batch[start:]:
                if not model.push(data):
                    break
                expect += 1
            assert ring.push_many(batch, start) == (expect, False)
        elif op[0] == "pop":
            assert ring.pop() == model.pop()
        else:
            max_records, max_bytes = op[1], op[2]
            expect, total = [], 0
            while model.q and len(expect) < max_records:
                n = len(model.q[0][0])
                if expect and total + n > max_bytes:
                    break
                expect.append(model.pop())
                total += n
            assert ring.pop_many(max_records, max_bytes) == expect
        assert ring.used == model.head - model.tail
        assert ring.free == CAP - ring.used
    ring = ring_for_op()
    assert ring.pop_many() == [d for d, _ in model.q]


@pytest.mark.parametrize("name", ["native", "python"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=ops)
def test_property_against_model(name, script):
    cls = impls()[name]
    ring = cls.format(bytearray(HEADER + CAP), CAP)
    check_against_model(lambda: ring, script)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=ops, choices=st.randoms(use_true_random=False))
def test_property_mixed_implementations(script, choices):
    ims = impls()
    buf = bytearray(HEADER + CAP)
    ims[choices.choice(["native", "python"])].format(buf, CAP)
    rings = [ims["native"](buf), ims["python"](buf)]
    check_against_model(lambda: choices.choice(rings), script)


def test_integer_arguments(impl):
    r = impl.format(new_buf(), CAP)
    r.push(b"a")
    assert r.pop_many(1 << 70, 1 << 80) == [b"a"]  # huge limits are fine
    assert r.push_many([b"x"], True) == (0, False)  # __index__ accepted
    with pytest.raises(ValueError):
        r.push_many([b"x"], 1 << 70)
    with pytest.raises(ValueError):
        r.push_many([b"x"], -(1 << 70))
    with pytest.raises(ValueError):
        r.prepare_wait(1 << 70)
    for bad in (1.5, "1", None):
        with pytest.raises(TypeError):
            r.pop_many(bad)
        with pytest.raises(TypeError):
            r.pop_many(1, bad)
        with pytest.raises(TypeError):
            r.push_many([b"x"], bad)
        with pytest.raises(TypeError):
            r.prepare_wait(bad)
    with pytest.raises(TypeError):
        r.push_many()
    with pytest.raises(TypeError):
        r.pop_many(1, 2, 3)


def test_no_leaks_native():
    import gc
    import tracemalloc

    r = impls()["native"].format(new_buf(), CAP)
    recs = [bytes(100), bytearray(50), memoryview(b"abc")]

    def work():
        for _ in range(2000):
            r.push_many(recs)
            r.push(b"x" * 10)
            r.pop()
            r.pop_many()
            r.prepare_sleep()
            r.take_producer_wakeup()
            r.prepare_wait(10)
            with pytest.raises(ValueError):
                r.push(bytes(2000))

    work()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 10_000


def test_stale_flags_cleared_by_prechecks(impl):
    buf = new_buf()
    r = impl.format(buf, CAP)
    r.push(b"x")
    struct.pack_into("<I", buf, 192, 1)  # stale consumer_sleeping
    assert r.prepare_sleep() is False
    assert flags(buf) == (0, 0)
    struct.pack_into("<I", buf, 256, 1)  # stale producer_waiting
    assert r.prepare_wait(10) is False
    assert flags(buf) == (0, 0)
