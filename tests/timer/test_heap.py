"""The timer's deadline heap: native (nsqmp._native.DeadlineHeap) and its pure-Python twin.

Every behavioural test runs on both implementations; a stateful hypothesis test checks
each against a plain dict model, and a differential test runs the same random scripts on
both and compares every result. The last section drives the timer role's wake-up and
FIRE chunking with a real uvloop loop and a fake endpoint.
"""

from __future__ import annotations

import array
import gc
import json
import os
import random
import struct
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from nsqmp.ipc import records
from nsqmp.timer import heap as heapmod
from nsqmp.timer.heap import PyDeadlineHeap
from tests.harness import native_module

I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1


def native_cls():
    return native_module("DeadlineHeap").DeadlineHeap


IMPLS = ["native", "python"]


def make(name):
    return native_cls()() if name == "native" else PyDeadlineHeap()


@pytest.fixture(params=IMPLS)
def impl(request):
    return request.param


@pytest.fixture
def h(impl):
    return make(impl)


def arm_buf(pairs):
    return b"".join(struct.pack("<Qq", t, d) for t, d in pairs)


def tok_buf(tokens):
    return struct.pack(f"<{len(tokens)}Q", *tokens)


def unpack(blob):
    return list(struct.unpack(f"<{len(blob) // 8}Q", blob))


def flat(result):
    """pop_due result as [(owner, [tokens])]."""
    return [(owner, unpack(blob)) for owner, blob in result]


# ---------------------------------------------------------------------------
# selection
# ---------------------------------------------------------------------------


def test_native_extension_has_the_heap():
    cls = native_cls()
    assert heapmod.NativeDeadlineHeap is cls
    if os.environ.get("NSQMP_PURE_PYTHON", "") != "1":
        assert heapmod.DeadlineHeap is cls


def test_pure_python_selected_by_env():
    code = "from nsqmp.timer.heap import DeadlineHeap as D; print(D.__module__ + '.' + D.__qualname__)"
    for env_value, expected in (
        ("1", "nsqmp.timer.heap.PyDeadlineHeap"),
        ("0", "nsqmp._native.DeadlineHeap"),
    ):
        env = dict(os.environ, NSQMP_PURE_PYTHON=env_value)
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == expected


# ---------------------------------------------------------------------------
# single operations and edge cases
# ---------------------------------------------------------------------------


def test_empty(h):
    assert len(h) == 0
    assert not h
    assert h.next_deadline() is None
    assert h.pop_due(I64_MAX) == []
    assert h.pop_due(10**30, max_count=5) == []
    assert h.disarm(0, 0) is False
    assert h.disarm_many(0, b"") == 0
    assert h.disarm_many(0, tok_buf([1, 2, 3])) == 0
    assert h.arm_many(0, b"") == 0
    assert h.forget_owner(0) == 0
    assert h.get(0, 0) is None
    assert len(h) == 0


def test_arm_rearm_disarm(h):
    assert h.arm(1, 10, 500) is True
    assert h.arm(1, 11, 400) is True
    assert h.next_deadline() == 400
    assert h.arm(1, 10, 300) is False  # moves (TOUCH)
    assert len(h) == 2
    assert h.get(1, 10) == 300
    assert h.next_deadline() == 300
    assert h.arm(1, 10, 300) is False  # same deadline: nothing changes
    assert h.arm(1, 10, 900) is False  # moves later
    assert h.next_deadline() == 400
    assert h.disarm(1, 10) is True
    assert h.disarm(1, 10) is False
    assert h.disarm(2, 11) is False  # same token, other owner
    assert h.get(1, 10) is None
    assert len(h) == 1
    assert flat(h.pop_due(399)) == []
    assert flat(h.pop_due(400)) == [(1, [11])]
    assert len(h) == 0 and h.next_deadline() is None


def test_owner_is_part_of_the_key(h):
    for owner in (0, 1, U32_MAX):
        assert h.arm(owner, 7, owner) is True
    assert len(h) == 3
    assert h.disarm(1, 7) is True
    assert h.get(0, 7) == 0 and h.get(U32_MAX, 7) == U32_MAX
    assert flat(h.pop_due(I64_MAX)) == [(0, [7]), (U32_MAX, [7])]


def test_pop_due_order_and_grouping(h):
    # ties on deadline are broken by owner, then token
    h.arm_many(3, arm_buf([(30, 5), (10, 5), (20, 1)]))
    h.arm_many(1, arm_buf([(99, 5), (2, 7), (1, 5)]))
    h.arm(2, 50, 5)
    assert h.next_deadline() == 1
    # global order: (1,3,20) (5,1,1) (5,1,99) (5,2,50) (5,3,10) (5,3,30) (7,1,2)
    assert flat(h.pop_due(6, max_count=4)) == [(1, [1, 99]), (2, [50]), (3, [20])]
    assert flat(h.pop_due(100)) == [(1, [2]), (3, [10, 30])]
    assert len(h) == 0


def test_pop_due_max_count(h):
    h.arm_many(0, arm_buf([(t, t // 3) for t in range(30)]))
    assert h.pop_due(100, max_count=0) == []
    assert flat(h.pop_due(100, 4)) == [(0, [0, 1, 2, 3])]
    assert flat(h.pop_due(now=1, max_count=None)) == [(0, [4, 5])]
    assert flat(h.pop_due(1)) == []
    rest = flat(h.pop_due(100, max_count=10**30))
    assert rest == [(0, list(range(6, 30)))]


def test_fire_payload_is_a_fire_record(h):
    h.arm_many(4, arm_buf([(t, 1000 - t) for t in range(100)]))
    [(owner, payload)] = h.pop_due(10**6)
    assert owner == 4 and type(payload) is bytes
    assert records.parse_fire(records.fire_packed(payload)) == tuple(
        range(99, -1, -1)
    )


def test_arm_many_duplicates_last_wins(h):
    buf = arm_buf([(1, 100), (2, 50), (1, 10), (3, 70), (2, 50), (1, 60)])
    assert h.arm_many(9, buf) == 3
    assert len(h) == 3
    assert [h.get(9, t) for t in (1, 2, 3)] == [60, 50, 70]
    assert h.arm_many(9, arm_buf([(1, 5), (4, 5)])) == 1
    assert flat(h.pop_due(I64_MAX)) == [(9, [1, 4, 2, 3])]


def test_disarm_many(h):
    h.arm_many(1, arm_buf([(t, t) for t in range(10)]))
    h.arm_many(2, arm_buf([(t, t) for t in range(10)]))
    assert h.disarm_many(1, tok_buf([0, 2, 2, 4, 100, 4])) == 3
    assert len(h) == 17
    assert flat(h.pop_due(4)) == [(1, [1, 3]), (2, [0, 1, 2, 3, 4])]


def test_buffer_types(h):
    pairs = [(t, 100 + t) for t in range(8)]
    record = records.arm_packed(arm_buf(pairs))
    assert h.arm_many(0, records.arm_entries(record)) == 8  # what the timer role passes
    assert h.arm_many(1, bytearray(arm_buf(pairs))) == 8
    assert h.arm_many(2, array.array("q", [v for p in pairs for v in p])) == 8
    assert h.arm_many(3, memoryview(arm_buf(pairs)).cast("Q")) == 8
    assert h.disarm_many(0, memoryview(tok_buf([1, 2]))) == 2
    assert h.disarm_many(1, bytearray(tok_buf([1, 2, 3]))) == 3
    assert h.disarm_many(2, array.array("Q", [1, 2, 3, 4])) == 4
    assert len(h) == 32 - 9


@pytest.mark.parametrize("n", [1, 7, 8, 15, 17, 31, 33])
def test_arm_many_bad_length_changes_nothing(h, n):
    h.arm(0, 1, 5)
    with pytest.raises(ValueError):
        h.arm_many(0, bytes(range(n)))
    assert len(h) == 1 and h.get(0, 1) == 5


@pytest.mark.parametrize("n", [1, 4, 7, 9, 15, 17])
def test_disarm_many_bad_length_changes_nothing(h, n):
    h.arm_many(0, arm_buf([(t, t) for t in range(4)]))
    with pytest.raises(ValueError):
        h.disarm_many(0, tok_buf([0, 1, 2])[:n])
    assert len(h) == 4


def test_negative_and_extreme_deadlines(h):
    h.arm(0, 1, -5)
    h.arm(0, 2, I64_MIN)
    h.arm(0, 3, I64_MAX)
    h.arm(0, 4, 0)
    h.arm_many(1, arm_buf([(5, -1), (6, I64_MIN), (7, I64_MAX)]))
    assert h.next_deadline() == I64_MIN
    assert h.pop_due(-(10**30)) == []  # now below the i64 range: nothing is due
    assert flat(h.pop_due(I64_MIN)) == [(0, [2]), (1, [6])]
    assert flat(h.pop_due(-1)) == [(0, [1]), (1, [5])]
    assert flat(h.pop_due(I64_MAX - 1)) == [(0, [4])]
    assert flat(h.pop_due(10**30)) == [
        (0, [3]),
        (1, [7]),
    ]  # beyond the range: everything


def test_big_tokens_and_owners(h):
    assert h.arm(U32_MAX, U64_MAX, 1) is True
    assert h.arm_many(U32_MAX, arm_buf([(U64_MAX, 2), (0, 0)])) == 1
    assert h.get(U32_MAX, U64_MAX) == 2
    assert flat(h.pop_due(5)) == [(U32_MAX, [0, U64_MAX])]


@pytest.mark.parametrize(
    "call",
    [
        lambda h: h.arm(-1, 0, 0),
        lambda h: h.arm(U32_MAX + 1, 0, 0),
        lambda h: h.arm(0, -1, 0),
        lambda h: h.arm(0, U64_MAX + 1, 0),
        lambda h: h.arm(0, 0, I64_MAX + 1),
        lambda h: h.arm(0, 0, I64_MIN - 1),
        lambda h: h.disarm(-1, 0),
        lambda h: h.disarm(0, U64_MAX + 1),
        lambda h: h.get(0, -1),
        lambda h: h.arm_many(-1, b""),
        lambda h: h.arm_many(U32_MAX + 1, b""),
        lambda h: h.disarm_many(-1, b""),
        lambda h: h.forget_owner(-1),
        lambda h: h.forget_owner(1 << 40),
        lambda h: h.pop_due(0, max_count=-1),
    ],
)
def test_value_errors(h, call):
    h.arm(0, 0, 0)
    with pytest.raises(ValueError):
        call(h)
    assert len(h) == 1 and h.get(0, 0) == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda h: h.arm(0.0, 0, 0),
        lambda h: h.arm(0, "1", 0),
        lambda h: h.arm(0, 0, 1.5),
        lambda h: h.arm(0, 0),
        lambda h: h.arm(0, 0, 0, 0),
        lambda h: h.disarm(None, 0),
        lambda h: h.get(0),
        lambda h: h.arm_many(0, "0123456789abcdef"),
        lambda h: h.arm_many(0, [1, 2]),
        lambda h: h.arm_many(0, memoryview(bytes(64))[::2]),
        lambda h: h.disarm_many(0, 12345678),
        lambda h: h.disarm_many(0, memoryview(bytes(32))[::2]),
        lambda h: h.forget_owner("0"),
        lambda h: h.pop_due(0.5),
        lambda h: h.pop_due(0, 1.0),
        lambda h: h.pop_due(),
        lambda h: h.arm(owner=0, token=0, deadline=0),
    ],
)
def test_type_errors(h, call):
    h.arm(0, 0, 0)
    with pytest.raises(TypeError):
        call(h)
    assert len(h) == 1 and h.get(0, 0) == 0


def test_constructor_takes_no_arguments(impl):
    cls = native_cls() if impl == "native" else PyDeadlineHeap
    with pytest.raises(TypeError):
        cls(5)


def test_index_protocol_and_bool_ints(h):
    class Idx:
        def __init__(self, v):
            self.v = v

        def __index__(self):
            return self.v

    assert h.arm(Idx(2), Idx(3), Idx(-4)) is True
    assert h.arm(True, False, 7) is True
    assert h.get(2, 3) == -4 and h.get(1, 0) == 7
    assert flat(h.pop_due(Idx(0), max_count=Idx(5))) == [(2, [3])]


def test_forget_owner(h):
    for owner in range(4):
        h.arm_many(owner, arm_buf([(t, (t * 7919 + owner) % 1000) for t in range(500)]))
    assert h.forget_owner(2) == 500
    assert h.forget_owner(2) == 0
    assert h.forget_owner(99) == 0
    assert len(h) == 1500
    assert h.get(2, 5) is None and h.get(1, 5) == (5 * 7919 + 1) % 1000
    h.arm(2, 5, -1)  # the owner can come back
    out = flat(h.pop_due(I64_MAX))
    assert [o for o, _ in out] == [0, 1, 2, 3]
    assert out[2][1] == [5]
    for owner in (0, 1, 3):
        toks = dict(out)[owner]
        assert sorted(toks) == list(range(500))
        keys = [((t * 7919 + owner) % 1000, t) for t in toks]
        assert keys == sorted(keys)
    assert len(h) == 0


def test_forget_everything_then_reuse(h):
    h.arm_many(5, arm_buf([(t, t) for t in range(10000)]))
    assert h.forget_owner(5) == 10000
    assert len(h) == 0 and h.next_deadline() is None
    h.arm(5, 1, 1)
    assert flat(h.pop_due(1)) == [(5, [1])]


def test_grow_and_shrink_keep_every_entry(h):
    rng = random.Random(7)
    model = {}
    for rnd in range(3):
        pairs = [
            (rng.randrange(1 << 40), rng.randrange(-1000, 1000)) for _ in range(20000)
        ]
        h.arm_many(rnd, arm_buf(pairs))
        for t, d in pairs:
            model[(rnd, t)] = d
        assert len(h) == len(model)
    for rnd in range(3):  # shrink through disarm
        toks = [t for (o, t) in list(model) if o == rnd][:15000]
        assert h.disarm_many(rnd, tok_buf(toks)) == len(toks)
        for t in toks:
            del model[(rnd, t)]
    assert len(h) == len(model)
    for (o, t), d in list(model.items())[::97]:
        assert h.get(o, t) == d
    got = []
    while len(h):
        for owner, toks in flat(h.pop_due(I64_MAX, max_count=1000)):
            got += [(model[(owner, t)], owner, t) for t in toks]
    assert sorted(got) == sorted((d, o, t) for (o, t), d in model.items())


# ---------------------------------------------------------------------------
# model-based (hypothesis, stateful) and differential tests
# ---------------------------------------------------------------------------


class Model:
    """The obvious implementation: a dict, sorted on demand."""

    def __init__(self):
        self.live = {}

    def pop_due(self, now, max_count=None):
        due = sorted((d, o, t) for (o, t), d in self.live.items() if d <= now)
        if max_count is not None:
            due = due[:max_count]
        groups = {}
        for d, o, t in due:
            del self.live[(o, t)]
            groups.setdefault(o, []).append(t)
        return [(o, groups[o]) for o in sorted(groups)]

    def next_deadline(self):
        return min(self.live.values(), default=None)


owners = st.one_of(st.integers(0, 3), st.sampled_from([U32_MAX, 1 << 20]))
tokens = st.one_of(st.integers(0, 24), st.integers(0, U64_MAX))
deadlines = st.one_of(
    st.integers(-5, 40), st.sampled_from([I64_MIN, I64_MAX, -(10**12), 10**12])
)
nows = st.one_of(
    st.integers(-8, 45), st.sampled_from([I64_MIN, I64_MAX, 10**30, -(10**30)])
)


class HeapMachine(RuleBasedStateMachine):
    impl = "native"

    @initialize()
    def setup(self):
        self.heap = make(self.impl)
        self.model = Model()
        self.known = []  # keys armed at some point, so disarm/re-arm hit existing entries

    def _key(self, data, owner, token):
        if self.known and data.draw(st.booleans()):
            return data.draw(st.sampled_from(self.known))
        return owner, token

    @rule(data=st.data(), owner=owners, token=tokens, deadline=deadlines)
    def arm(self, data, owner, token, deadline):
        owner, token = self._key(data, owner, token)
        new = (owner, token) not in self.model.live
        assert self.heap.arm(owner, token, deadline) is new
        self.model.live[(owner, token)] = deadline
        self.known.append((owner, token))

    @rule(data=st.data(), owner=owners, token=tokens)
    def disarm(self, data, owner, token):
        owner, token = self._key(data, owner, token)
        was = self.model.live.pop((owner, token), None) is not None
        assert self.heap.disarm(owner, token) is was

    @rule(
        owner=owners,
        items=st.lists(st.tuples(tokens, deadlines), max_size=12),
        data=st.data(),
    )
    def arm_many(self, owner, items, data):
        mine = [t for o, t in self.known if o == owner]
        if mine:
            items += data.draw(
                st.lists(st.tuples(st.sampled_from(mine), deadlines), max_size=4)
            )
        new = 0
        for t, d in items:
            if (owner, t) not in self.model.live:
                new += 1
            self.model.live[(owner, t)] = d
            self.known.append((owner, t))
        assert self.heap.arm_many(owner, arm_buf(items)) == new

    @rule(owner=owners, toks=st.lists(tokens, max_size=8), data=st.data())
    def disarm_many(self, owner, toks, data):
        mine = [t for o, t in self.known if o == owner]
        if mine:
            toks += data.draw(st.lists(st.sampled_from(mine), max_size=6))
        gone = sum(self.model.live.pop((owner, t), None) is not None for t in toks)
        assert self.heap.disarm_many(owner, tok_buf(toks)) == gone

    @rule(now=nows, max_count=st.one_of(st.none(), st.integers(0, 6)))
    def pop_due(self, now, max_count):
        assert flat(self.heap.pop_due(now, max_count)) == self.model.pop_due(
            now, max_count
        )

    @precondition(lambda self: len(self.model.live) > 0)
    @rule(data=st.data())
    def forget_owner(self, data):
        owner = data.draw(st.sampled_from(sorted({o for o, _ in self.model.live})))
        gone = [k for k in self.model.live if k[0] == owner]
        for k in gone:
            del self.model.live[k]
        assert self.heap.forget_owner(owner) == len(gone)

    @rule(owner=owners, token=tokens)
    def get(self, owner, token):
        assert self.heap.get(owner, token) == self.model.live.get((owner, token))

    @invariant()
    def agrees(self):
        assert len(self.heap) == len(self.model.live)
        assert self.heap.next_deadline() == self.model.next_deadline()


_machine_settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class NativeHeapMachine(HeapMachine):
    impl = "native"


class PythonHeapMachine(HeapMachine):
    impl = "python"


TestNativeHeapStateful = NativeHeapMachine.TestCase
TestNativeHeapStateful.settings = _machine_settings
TestPythonHeapStateful = PythonHeapMachine.TestCase
TestPythonHeapStateful.settings = _machine_settings


def random_script(seed, steps, owners=4, tokens=3000, span=5000):
    """A list of operations on a few owners with many collisions, ties and re-arms."""
    rng = random.Random(seed)
    ops = []
    now = 0
    for _ in range(steps):
        r = rng.random()
        owner = rng.randrange(owners)
        if r < 0.35:
            n = rng.choice((1, 2, 16, 512))
            pairs = [
                (rng.randrange(tokens), now + rng.randrange(-50, span))
                for _ in range(n)
            ]
            ops.append(("arm_many", owner, arm_buf(pairs)))
        elif r < 0.55:
            n = rng.choice((1, 8, 200))
            ops.append(
                (
                    "disarm_many",
                    owner,
                    tok_buf([rng.randrange(tokens) for _ in range(n)]),
                )
            )
        elif r < 0.65:
            ops.append(("arm", owner, rng.randrange(tokens), now + rng.randrange(span)))
        elif r < 0.72:
            ops.append(("disarm", owner, rng.randrange(tokens)))
        elif r < 0.93:
            now += rng.randrange(0, span // 10)
            ops.append(("pop_due", now, rng.choice((None, 1, 10, 1000))))
        elif r < 0.95:
            ops.append(("forget_owner", owner))
        else:
            ops.append(("next_deadline",))
        ops.append(("__len__",))
    ops.append(("pop_due", 1 << 62, None))
    return ops


def run_script(heap, ops):
    out = []
    for name, *args in ops:
        out.append(getattr(heap, name)(*args))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_differential_native_vs_python(seed):
    ops = random_script(seed, 3000)
    native, python = native_cls()(), PyDeadlineHeap()
    for i, (name, *args) in enumerate(ops):
        a = getattr(native, name)(*args)
        b = getattr(python, name)(*args)
        assert a == b, f"step {i}: {name}{tuple(args)!r}"
    assert len(native) == len(python) == 0


def test_differential_against_model():
    ops = random_script(99, 1500, tokens=400, span=300)
    model = Model()
    heap = make("native")
    for name, *args in ops:
        got = getattr(heap, name)(*args)
        if name == "pop_due":
            assert flat(got) == model.pop_due(*args)
        elif name == "arm_many":
            for t, d in struct.iter_unpack("<Qq", args[1]):
                model.live[(args[0], t)] = d
        elif name == "disarm_many":
            for (t,) in struct.iter_unpack("<Q", args[1]):
                model.live.pop((args[0], t), None)
        elif name == "arm":
            model.live[(args[0], args[1])] = args[2]
        elif name == "disarm":
            model.live.pop((args[0], args[1]), None)
        elif name == "forget_owner":
            for k in [k for k in model.live if k[0] == args[0]]:
                del model.live[k]
        elif name == "next_deadline":
            assert got == model.next_deadline()
        elif name == "__len__":
            assert got == len(model.live)


# ---------------------------------------------------------------------------
# size and memory
# ---------------------------------------------------------------------------


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _two_million(cls):
    n = 2_000_000
    base = 10**12
    idx = array.array("q", range(n))
    # deadlines: a permutation of [base, base + n) so that the pop order is known
    perm = array.array("q", (base + (i * 1_000_003) % n for i in range(n)))
    buf = array.array("q", [0]) * (2 * n)
    buf[0::2] = idx
    buf[1::2] = perm
    h = cls()
    start = time.perf_counter()
    assert h.arm_many(1, buf) == n
    assert len(h) == n and h.next_deadline() == base
    assert h.disarm_many(1, array.array("Q", range(0, n, 2))) == n // 2
    [(_owner, blob)] = h.pop_due(base + n)
    got = array.array("Q")
    got.frombytes(blob)
    assert len(got) == n // 2 and len(h) == 0
    assert all(got[i] % 2 == 1 for i in range(0, len(got), 997))
    dl = [base + (t * 1_000_003) % n for t in got[::1000]]
    assert dl == sorted(dl)
    return time.perf_counter() - start


def test_two_million_entries_native():
    elapsed = _two_million(native_cls())
    assert elapsed < 10


def test_two_million_entries_python():
    _two_million(
        PyDeadlineHeap
    )  # about 5 s here: under the 10 s that would make it "slow"


_MEMORY_SCRIPT = """
import array, json, os
from nsqmp._native import DeadlineHeap

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

n = 1_000_000
buf = array.array("q", [0]) * (2 * n)
buf[0::2] = array.array("q", range(n))
buf[1::2] = array.array("q", range(n, 0, -1))
out = {"base": rss()}
h = DeadlineHeap()
h.arm_many(0, buf)
out["full"] = rss()
h.disarm_many(0, array.array("Q", range(0, n, 4)))
h.pop_due(n * 73 // 100)  # leaves about 200,000: below a quarter of the heap capacity
out["quarter"] = rss()
out["left"] = len(h)
h.pop_due(1 << 62)
out["empty"] = rss()
del h
out["freed"] = rss()
print(json.dumps(out))
"""


def test_native_memory_per_entry_and_shrink():
    native_cls()
    proc = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT],
        capture_output=True,
        text=True,
        check=True,
    )
    m = json.loads(proc.stdout)
    n = 1_000_000
    per_entry = (m["full"] - m["base"]) / n
    # 24 bytes per heap entry + 8 per table slot (load 0.35..0.7): about 40 bytes
    assert per_entry < 44, m
    assert 190_000 < m["left"] < 210_000
    # capacities halve once a quarter (heap) or an eighth (table) full
    assert m["quarter"] - m["base"] < (m["full"] - m["base"]) * 0.6, m
    assert m["empty"] - m["base"] < 1 << 20, m  # the mappings are gone, not just free
    assert m["freed"] - m["base"] < 1 << 20, m


def test_native_no_leak_in_a_loop():
    cls = native_cls()
    rng = random.Random(3)
    bufs = [
        arm_buf([(rng.randrange(1 << 30), rng.randrange(10**6)) for _ in range(512)])
        for _ in range(40)
    ]
    toks = [tok_buf([rng.randrange(1 << 30) for _ in range(512)]) for _ in range(40)]

    def cycle():
        h = cls()
        for b, t in zip(bufs, toks):
            h.arm_many(3, b)
            h.arm_many(4, b)
            h.disarm_many(3, t)
        h.forget_owner(4)
        for now in range(0, 10**6, 50_000):
            h.pop_due(now, max_count=300)
        for bad in (b"x", b"y" * 17):
            with pytest.raises(ValueError):
                h.arm_many(0, bad)
        with pytest.raises(TypeError):
            h.disarm_many(0, "nope")
        h.pop_due(I64_MAX)

    for _ in range(20):
        cycle()
    gc.collect()
    import tracemalloc

    tracemalloc.start()
    rss0 = _rss_kib()
    snap0 = tracemalloc.take_snapshot()
    for _ in range(300):
        cycle()
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    assert grown < 64 * 1024, grown
    assert _rss_kib() - rss0 < 4096


# ---------------------------------------------------------------------------
# the timer role on top of the heap
# ---------------------------------------------------------------------------


class FakeEndpoint:
    def __init__(self):
        self.sent = []

    def send(self, dst, record):
        self.sent.append((dst, time.monotonic_ns(), bytes(record)))


def make_timer(ring_capacity, impl):
    import uvloop

    from nsqmp.timer import role

    plan = SimpleNamespace(
        timer_slot=9,
        ring_capacity=ring_capacity,
        routers=2,
        router_slot=lambda j: 2 + j,
    )
    timer = role.Timer(None, plan, 0, [], "")
    timer.heap = make(impl)
    timer.loop = uvloop.new_event_loop()
    timer.endpoint = FakeEndpoint()
    return timer


def test_timer_role_fires_in_chunks_per_owner(impl):
    from nsqmp.timer import role

    timer = make_timer(4096, impl)  # max record 1024 bytes: 119 tokens per FIRE
    chunk_tokens = role.fire_chunk_bytes(4096) // 8
    assert 1 + chunk_tokens * 8 <= 4096 // 4 - 64
    loop = timer.loop
    try:
        t0 = time.monotonic_ns()
        deadlines = {}
        for owner in (2, 3):
            pairs = [
                (tok, t0 + 20_000_000 + (tok % 7) * 1_000_000) for tok in range(1000)
            ]
            deadlines.update({(owner, tok): d for tok, d in pairs})
            for start in range(0, len(pairs), 300):
                timer.on_record(
                    owner, records.arm_packed(arm_buf(pairs[start : start + 300]))
                )
        timer.on_record(2, records.disarm_packed(tok_buf(list(range(0, 1000, 10)))))
        timer.on_record(
            3, records.arm_packed(arm_buf([(5, t0 + 1_000_000_000)]))
        )  # TOUCH
        timer.on_record(3, records.arm_packed(b"\0" * 15))  # malformed: ignored
        timer.on_record(3, bytes(records.fin(0)))  # unexpected kind: ignored
        del deadlines[(3, 5)]
        for tok in range(0, 1000, 10):
            del deadlines[(2, tok)]

        def done():
            got = sum(len(r) - 1 for _, _, r in timer.endpoint.sent) // 8
            if got >= len(deadlines) or time.monotonic_ns() - t0 > 5e9:
                loop.stop()
            else:
                loop.call_later(0.005, done)

        loop.call_later(0.005, done)
        loop.run_forever()
    finally:
        timer.close_wake()
        loop.close()
    fired = {}
    for dst, at, rec in timer.endpoint.sent:
        assert rec[0] == records.FIRE
        assert len(rec) <= 4096 // 4 - 64
        for tok in records.parse_fire(rec):
            assert (dst, tok) not in fired
            fired[(dst, tok)] = at
    assert set(fired) == set(deadlines)
    for key, at in fired.items():
        assert at >= deadlines[key]
    assert len(timer.heap) == 1 and timer.heap.get(3, 5) == t0 + 1_000_000_000


def test_timer_role_continues_big_batches(impl, monkeypatch):
    from nsqmp.timer import role

    monkeypatch.setattr(role, "FIRE_BATCH", 100)
    timer = make_timer(1 << 20, impl)
    loop = timer.loop
    try:
        t0 = time.monotonic_ns()
        timer.on_record(
            2, records.arm_packed(arm_buf([(tok, t0 - tok) for tok in range(1050)]))
        )
        loop.call_later(0.2, loop.stop)
        loop.run_forever()
    finally:
        timer.close_wake()
        loop.close()
    sizes = [(len(rec) - 1) // 8 for _, _, rec in timer.endpoint.sent]
    assert sizes == [100] * 10 + [50]
    toks = [t for _, _, rec in timer.endpoint.sent for t in records.parse_fire(rec)]
    assert toks == list(range(1049, -1, -1))
    assert len(timer.heap) == 0
