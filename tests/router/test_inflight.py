"""A channel's messages in flight: InFlightMap, native (native/inflight.c) and its
pure-Python twin (nsqmp.router.pyinflight), against a plain dict model written here.

The differential test runs random sequences of every operation on all three and
requires the same results (or the same error) after each step.
"""
from __future__ import annotations

import gc
import sys
import weakref
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqmp.router import inflight as chooser
from nsqmp.router import pyinflight
from nsqmp.router.readback import Message
from tests.harness import native_module

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
IMPLS = ["native", "python"]


def make(name: str):
    return native_module("InFlightMap").InFlightMap() if name == "native" else pyinflight.InFlightMap()


def message(k: int) -> Message:
    return Message(f"{k:016x}".encode(), k, b"body", None, k)


class Flight:  # stands in for router.inflight.Flight: the map only compares identity
    def __init__(self, name: str) -> None:
        self.name = name


class Model:
    """What the map must do, in the plainest words."""

    def __init__(self) -> None:
        self.held: dict[bytes, tuple] = {}
        self.stale: set[bytes] = set()  # what the native map keeps of expired flights

    def _unstale(self, msg_id):
        self.stale.discard(msg_id)

    def __len__(self) -> int:
        return len(self.held)

    def __contains__(self, msg_id) -> bool:
        return msg_id in self.held

    def get(self, msg_id):
        return self.held.get(msg_id)

    def put(self, m, attempts, flight):
        self._unstale(m.id)
        self.held[m.id] = (m, attempts, flight)

    def remove(self, msg_id):
        del self.held[msg_id]

    def move(self, msg_id, flight):
        m, attempts, _ = self.held[msg_id]
        self.held[msg_id] = (m, attempts, flight)

    def fly(self, ready, n, flight, members, out):
        took = 0
        for _ in range(min(n, len(ready))):
            m, attempts = ready.popleft()
            self.put(m, attempts + 1, flight)
            members.extend([m, attempts + 1])
            out.append((m, attempts + 1))
            took += 1
        return took

    def land(self, members, flight, ready):
        landed = 0
        for m in members[::2]:
            e = self.held.get(m.id)
            if e is not None and e[0] is m and e[2] is flight:
                del self.held[m.id]
                ready.append((m, e[1]))
                landed += 1
        return landed

    def expire(self, members, flight, ready):  # asked only of a flight whose members are all in it
        self.stale.update(m.id for m in members[::2])
        return self.land(members, flight, ready)

    def forget(self, messages):
        for m in messages:
            self._unstale(m.id)

    def alive(self, members, flight):
        out = []
        for m, a in zip(members[::2], members[1::2]):
            if (e := self.held.get(m.id)) is not None and e[0] is m and e[2] is flight:
                out += [m, a]
        return out

    def entries(self):
        return list(self.held.values())

    def clear(self):
        self.held.clear()
        self.stale.clear()


MSGS = [message(k) for k in range(24)]
FLIGHTS = [Flight(f"f{i}") for i in range(3)]
ids = st.integers(0, len(MSGS) - 1)
flights = st.integers(0, len(FLIGHTS) - 1)
ops = st.one_of(
    st.tuples(st.just("put"), ids, st.integers(0, 70000), flights),
    st.tuples(st.just("remove"), ids),
    st.tuples(st.just("remove_bad"), st.binary(max_size=20)),
    st.tuples(st.just("move"), ids, flights),
    st.tuples(st.just("get"), ids),
    st.tuples(st.just("contains"), st.one_of(ids, st.binary(max_size=20))),
    st.tuples(st.just("fly"), st.lists(st.tuples(ids, st.integers(0, 5)), max_size=12), st.integers(0, 14), flights),
    st.tuples(st.just("land"), st.lists(ids, max_size=30), flights),
    st.tuples(st.just("expire"), flights),
    st.tuples(st.just("forget"), st.lists(ids, max_size=30)),
    st.tuples(st.just("alive"), st.lists(ids, max_size=30), flights),
    st.just(("clear",)),
)


def flat(model, ks, flight=None):
    """The flat members list (message, attempts, ...) of messages ks: their attempts as held
    in `flight` (the model's), 1 for those not held."""
    out = []
    for k in ks:
        e = model.held.get(MSGS[k].id)
        out += [MSGS[k], e[1] if e is not None and e[2] is flight else 1]
    return out


def apply(target, op, model, fl):
    """The visible result of one operation: a value, or the type of the error. `model`
    says which members a flight has (expire is asked only of a whole flight, as the
    router does: every member still in it); fl is the flights of the test, one replaced
    after it expires (a flight that timed out takes no new member)."""
    kind = op[0]
    try:
        if kind == "put":
            return target.put(MSGS[op[1]], op[2], fl[op[3]])
        if kind == "remove":
            return target.remove(MSGS[op[1]].id)
        if kind == "remove_bad":
            return target.remove(op[1])
        if kind == "move":
            return target.move(MSGS[op[1]].id, fl[op[2]])
        if kind == "get":
            return target.get(MSGS[op[1]].id)
        if kind == "contains":
            key = MSGS[op[1]].id if isinstance(op[1], int) else op[1]
            return key in target
        if kind == "fly":
            ready = deque((MSGS[k], a) for k, a in op[1])
            members, out = [], []
            took = target.fly(ready, op[2], fl[op[3]], members, out)
            return took, list(ready), members, out
        if kind == "land":
            ready = deque([("already", 0)])
            landed = target.land(flat(model, op[1], fl[op[2]]), fl[op[2]], ready)
            return landed, list(ready)
        if kind == "expire":
            f = fl[op[1]]
            whole = sorted(k for k, m in enumerate(MSGS) if (e := model.held.get(m.id)) and e[2] is f)
            ready = deque([("already", 0)])
            return target.expire(flat(model, whole, f), f, ready), list(ready)
        if kind == "forget":
            return target.forget([MSGS[k] for k in op[1]])
        if kind == "alive":
            return target.alive(flat(model, op[1], fl[op[2]]), fl[op[2]])
        if kind == "clear":
            return target.clear()
    except Exception as exc:  # noqa: BLE001 - the error's type is the result compared
        return type(exc)
    raise AssertionError(op)


def state(target) -> tuple:
    return len(target), sorted(((m.id, a, f.name) for m, a, f in target.entries()))


@FUZZ
@given(st.lists(ops, max_size=60))
def test_native_and_twin_do_what_the_model_does(sequence):
    model, targets = Model(), [make(name) for name in IMPLS]
    fl = list(FLIGHTS)
    for op in sequence:
        results = [apply(target, op, model, fl) for target in targets]
        want = apply(model, op, model, fl)
        if op[0] == "expire":
            fl[op[1]] = Flight(fl[op[1]].name)
        for name, target, got in zip(IMPLS, targets, results):
            assert got == want, (name, op)
            assert state(target) == state(model), (name, op)
            for m in MSGS:
                assert target.get(m.id) == model.get(m.id) and (m.id in target) == (m.id in model)
        assert targets[0].stale == len(model.stale), op  # the native map's, kept exactly
        assert targets[1].stale == 0


BIG = [message(k) for k in range(3000)]
bulk_ops = st.one_of(
    st.tuples(st.just("fly"), st.integers(0, 2999), st.integers(0, 1500), flights),
    st.tuples(st.just("remove"), st.integers(0, 2999), st.integers(0, 1500), st.integers(1, 5)),
    st.tuples(st.just("land"), st.integers(0, 2999), st.integers(0, 1500), flights),
    st.tuples(st.just("move"), st.integers(0, 2999), st.integers(0, 300), flights),
    st.tuples(st.just("expire"), st.just(0), st.just(0), flights),
    st.tuples(st.just("forget"), st.integers(0, 2999), st.integers(0, 1500)),
)


def bulk_members(model, msgs, flight):
    """Flat members (message, attempts, ...) with the attempts the model holds in flight."""
    out = []
    for m in msgs:
        e = model.held.get(m.id)
        out += [m, e[1] if e is not None and e[2] is flight else 1]
    return out


def apply_bulk(target, op, model, fl):
    kind, start, n = op[0], op[1], op[2]
    msgs = BIG[start:start + n]
    if kind == "fly":
        ready = deque((m, 0) for m in msgs)
        members, out = [], []
        return target.fly(ready, n, fl[op[3]], members, out), len(ready), members, out
    if kind == "remove":
        gone = []
        for m in msgs[::op[3]]:
            if m.id in target:
                target.remove(m.id)
                gone.append(m.id)
        return gone
    if kind == "land":
        ready: deque = deque()
        return target.land(bulk_members(model, msgs, fl[op[3]]), fl[op[3]], ready), list(ready)
    if kind == "expire":  # a whole flight, as the router asks it
        f = fl[op[3]]
        whole = [m for m in BIG if (e := model.held.get(m.id)) is not None and e[2] is f]
        ready = deque()
        return target.expire(bulk_members(model, whole, f), f, ready), list(ready)
    if kind == "forget":
        return target.forget(msgs)
    moved = []
    for m in msgs:
        if m.id in target:
            target.move(m.id, fl[op[3]])
            moved.append(m.id)
    return moved


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(bulk_ops, max_size=25))
def test_thousands_through_growing_and_shrinking_tables(sequence):
    """Enough entries that the native table resizes (moving its entries a few at a
    time) in the middle of puts, removals, moves and landings."""
    model, targets = Model(), [make(name) for name in IMPLS]
    fl = list(FLIGHTS)
    for op in sequence:
        results = [apply_bulk(target, op, model, fl) for target in targets]
        want = apply_bulk(model, op, model, fl)
        if op[0] == "expire":  # a flight that timed out takes no new member
            fl[op[3]] = Flight(fl[op[3]].name)
        for name, target, got in zip(IMPLS, targets, results):
            assert got == want, (name, op)
            assert state(target) == state(model), (name, op)
            for m in BIG[op[1]:op[1] + 50]:  # lookups right where the operation was
                assert target.get(m.id) == model.get(m.id)
        assert targets[0].stale == len(model.stale), op


@pytest.mark.parametrize("name", IMPLS)
def test_a_hundred_thousand_in_flight_time_out_and_go_again(name):
    """Growth, removals that shift runs back, shrinking: nothing lost on the way."""
    held = make(name)
    msgs = [message(k) for k in range(100_000)]
    ready = deque((m, 0) for m in msgs)
    first, second = Flight("first"), Flight("second")
    members, out = [], []
    assert held.fly(ready, 60_000, first, members, out) == 60_000
    assert held.fly(ready, 60_000, second, [], out) == 40_000
    assert len(held) == 100_000 and not ready
    for m in msgs[::3]:  # FINs
        held.remove(m.id)
    assert held.land(members, first, ready) == len([k for k in range(60_000) if k % 3])
    assert [m for m, _ in ready] == [m for k, m in enumerate(msgs[:60_000]) if k % 3]
    assert all(a == 1 for _, a in ready)
    assert len(held) == len([k for k in range(60_000, 100_000) if k % 3])
    for m in msgs[60_000:]:
        e = held.get(m.id)
        assert (e is None) == (int(m.id, 16) % 3 == 0)
        if e is not None:
            assert e[0] is m and e[1] == 1 and e[2] is second
            held.remove(m.id)
    assert len(held) == 0 and held.entries() == []
    assert held.get(msgs[1].id) is None


@pytest.mark.parametrize("name", IMPLS)
def test_bad_arguments_raise(name):
    held = make(name)
    with pytest.raises(ValueError):
        held.put(Message(b"short", 0, b"", None, 0), 1, FLIGHTS[0])
    with pytest.raises(OverflowError):
        held.put(MSGS[0], 1 << 40, FLIGHTS[0])
    with pytest.raises(KeyError):
        held.remove(MSGS[0].id)
    for call in (held.land, held.expire):  # members: message, attempts, ...
        with pytest.raises(TypeError):
            call([MSGS[0]], FLIGHTS[0], deque())
    with pytest.raises(TypeError):
        held.alive([MSGS[0], 1, MSGS[1]], FLIGHTS[0])
    with pytest.raises(TypeError):
        held.forget(MSGS[0])
    with pytest.raises(KeyError):
        held.move(MSGS[0].id, FLIGHTS[0])
    with pytest.raises((TypeError, ValueError)):
        held.fly(deque([MSGS[0]]), 1, FLIGHTS[0], [], [])
    assert len(held) == 0 and held.get(b"x" * 40) is None and b"" not in held


@pytest.mark.parametrize("name", IMPLS)
@pytest.mark.parametrize("bad_at", [0, 5, 63, 64, 70, 199])
def test_fly_stops_at_a_bad_entry_and_leaves_the_rest_in_order(name, bad_at):
    """The native fly() pops entries 64 at a time (to prefetch ahead): the ones popped
    after a bad entry go back to the front of the queue, in order, and hold no extra
    reference; the ones before it are in flight; the bad one is dropped."""
    held, f = make(name), Flight("f")
    msgs = [message(k) for k in range(200)]
    before = [sys.getrefcount(m) for m in msgs]
    entries: list = [(m, k % 3) for k, m in enumerate(msgs)]
    entries[bad_at] = None  # not a pair
    ready, members, out = deque(entries), [], []
    with pytest.raises(TypeError):
        held.fly(ready, 1000, f, members, out)
    assert members[::2] == msgs[:bad_at] and len(held) == bad_at
    assert out == [(m, k % 3 + 1) for k, m in enumerate(msgs[:bad_at])]
    assert list(ready) == entries[bad_at + 1:]
    del ready, members, out, entries
    held.clear()
    assert [sys.getrefcount(m) for m in msgs] == before


def test_native_keeps_no_stray_references():
    held = make("native")
    m, f = message(7), Flight("f")
    before = sys.getrefcount(m)
    for _ in range(1000):
        held.put(m, 3, f)
        held.move(m.id, f)
        held.remove(m.id)
        held.fly(deque([(m, 1)]), 1, f, [], [])
        held.land([m, 2], f, deque())
        g = Flight("g")
        held.put(m, 1, g)
        held.expire([m, 1], g, deque())  # stale: the map holds m and g until...
        held.fly(deque([(m, 1)]), 1, f, [], [])  # ...this takes the slot over
        held.expire([m, 2], f, deque())
        held.forget([m])  # ...or this empties it
        f = Flight("f")
        held.put(m, 1, f)
        held.expire([m, 1], f, deque())
        held.clear()  # ...or this
        f = Flight("f")
    assert sys.getrefcount(m) == before and held.stale == 0 and len(held) == 0
    probe = Flight("probe")
    held.put(m, 1, probe)
    held.expire([m, 1], probe, deque())
    refs = sys.getrefcount(probe)
    held.forget([m])
    assert sys.getrefcount(probe) == refs - 2  # the slot's reference and the expired set's


@pytest.mark.parametrize("name", IMPLS)
def test_a_cycle_through_the_map_is_collected(name):
    """channel -> map -> flight -> channel: freed when nothing else holds them."""

    class Channel:
        pass

    ch = Channel()
    ch.in_flight = make(name)
    f = Flight("f")
    f.channel = ch
    ch.in_flight.put(message(1), 1, f)
    g = Flight("g")  # a flight timed out whole: its slot stale, the map holding it twice
    g.channel = ch
    m2 = message(2)
    ch.in_flight.put(m2, 1, g)
    ch.in_flight.expire([m2, 1], g, deque())
    gone = weakref.ref(ch)
    del ch, f, g, m2
    gc.collect()
    assert gone() is None


def test_the_chooser_picks_native_unless_told_otherwise():
    if chooser.NATIVE:
        assert chooser.InFlightMap is native_module("InFlightMap").InFlightMap
        assert chooser.Flight is native_module("Flight").Flight
    else:
        assert chooser.InFlightMap is pyinflight.InFlightMap
        assert chooser.Flight is pyinflight.Flight


@pytest.mark.parametrize("impl", IMPLS)
def test_a_flight_has_the_twins_fields_and_constructor(impl):
    cls = native_module("Flight").Flight if impl == "native" else pyinflight.Flight
    consumer = object()
    f = cls(7, consumer, 100, 90)
    assert (f.token, f.consumer, f.deadline, f.delivered, f.live, f.members) == (7, consumer, 100, 90, 0, [])
    assert f.members is not cls(7, consumer, 100, 90).members  # a new list each
    m = [message(1), 1]
    g = cls(8, consumer, 200, 190, 1, m)
    assert g.members is m and g.live == 1
    g.live -= 1
    g.deadline, g.consumer = 300, "other"
    assert (g.live, g.deadline, g.consumer) == (0, 300, "other")
    assert cls(token=1, consumer=None, deadline=2, delivered=3, live=4).live == 4
    assert f != cls(7, consumer, 100, 90) and len({f, f}) == 1  # identity, as the dataclass (eq=False)
    with pytest.raises(AttributeError):
        f.other = 1  # slots only


def test_a_native_flight_in_a_cycle_is_collected():
    cls = native_module("Flight").Flight

    class Consumer:
        pass

    c = Consumer()
    f = cls(1, c, 0, 0)
    c.flights = {1: f}
    f.members.append(f)
    gone = weakref.ref(c)
    del c, f
    gc.collect()
    assert gone() is None


class Segment:  # stands in for router.topic.Segment: finish() only groups by identity
    pass


def fin_flight(flight_impl: str, consumer: str, live: int):
    """A Flight of the native type (finish reads its struct) or the twin's (attributes)."""
    cls = native_module("Flight").Flight if flight_impl == "native" else pyinflight.Flight
    return cls(0, consumer, 0, 0, live)


# (map, flight): each map with its own Flight, and the native map with the twin's Flight
FIN_PAIRS = [("native", "native"), ("python", "python"), ("native", "python")]


SEGMENTS = [Segment(), Segment(), None]


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=40),
       st.lists(st.integers(0, 45), max_size=60))
def test_finish_takes_what_the_consumer_owns_and_reports_the_rest(held_spec, fin_spec):
    """held_spec: per message k, (its flight 0-3 or not held, its segment); flights 0-2
    belong to consumer "me", flight 3 to "other". fin_spec: message numbers FIN'd, in
    order (above len(held_spec): ids never delivered)."""
    msgs = [Message(f"{k:016x}".encode(), k, b"", SEGMENTS[seg], 100 + k) for k, (_, seg) in enumerate(held_spec)]
    ids = b"".join(f"{k:016x}".encode() for k in fin_spec)
    results = []
    for name, flight_impl in FIN_PAIRS:
        held = make(name)
        flights = [fin_flight(flight_impl, c, 0) for c in ("me", "me", "me", "other")]
        for m, (fl, _) in zip(msgs, held_spec):
            held.put(m, 1, flights[fl])
            flights[fl].live += 1
        bad, emptied = [], []
        got, runs = held.finish(b"head" + ids, 4, "me", bad, emptied)
        results.append(([m.id for m in got], [(SEGMENTS.index(seg), offs) for seg, offs in runs], bad,
                        [flights.index(f) for f in emptied], [f.live for f in flights], len(held)))
    # the model, in the plainest words
    live = [0, 0, 0, 0]
    for fl, _ in held_spec:
        live[fl] += 1
    owner = {f"{k:016x}".encode(): fl for k, (fl, _) in enumerate(held_spec)}
    want_got, want_runs, want_bad, want_emptied = [], [], [], []
    for k in fin_spec:
        mid = f"{k:016x}".encode()
        fl = owner.pop(mid, None) if owner.get(mid, 3) != 3 else None
        if fl is None:
            want_bad.append(mid)
            continue
        want_got.append(mid)
        live[fl] -= 1
        if not live[fl]:
            want_emptied.append(fl)
        seg = held_spec[k][1]
        if SEGMENTS[seg] is not None:
            if want_runs and want_runs[-1][0] == seg:
                want_runs[-1][1].append(100 + k)
            else:
                want_runs.append((seg, [100 + k]))
    want = (want_got, want_runs, want_bad, want_emptied, live, len(held_spec) - len(want_got))
    assert results == [want] * len(FIN_PAIRS)


@pytest.mark.parametrize("flight_impl", IMPLS)
def test_native_finish_keeps_no_stray_references(flight_impl):
    held = make("native")
    seg = Segment()
    m = Message(b"%016x" % 9, 9, b"", seg, 9)
    f = fin_flight(flight_impl, "me", 0)
    before = sys.getrefcount(m), sys.getrefcount(f), sys.getrefcount(seg)
    for _ in range(1000):
        held.put(m, 1, f)
        f.live = 1
        bad, emptied = [], []
        got, runs = held.finish(m.id + m.id + b"x" * 16, 0, "me", bad, emptied)
        assert got == [m] and emptied == [f] and len(bad) == 2 and runs == [[seg, [9]]]
        del got, runs, bad, emptied
    assert (sys.getrefcount(m), sys.getrefcount(f), sys.getrefcount(seg)) == before


def test_native_pairs_of_messages_are_not_tracked_by_the_cycle_collector():
    """fly's frames and land's ready entries hold a Message and an int: no cycle can
    pass through them, so the young collections never walk them."""
    held, f, out, ready = make("native"), Flight("f"), [], deque()
    native_message = native_module("Message").Message  # the map's partner (also under NSQMP_PURE_PYTHON=1)
    msgs = [native_message(f"{k:016x}".encode(), k, b"body", None, k) for k in range(3)]
    members: list = []
    held.fly(deque((m, 0) for m in msgs), 3, f, members, out)
    assert [a for _, a in out] == [1, 1, 1] and not any(gc.is_tracked(p) for p in out)
    assert held.land(members, f, ready) == 3
    assert [a for _, a in ready] == [1, 1, 1] and not any(gc.is_tracked(p) for p in ready)
    g, members = Flight("g"), []
    held.fly(ready, 3, g, members, [])
    assert held.expire(members, g, ready) == 3
    assert [a for _, a in ready] == [2, 2, 2] and not any(gc.is_tracked(p) for p in ready)
    # a flight's members (Messages and ints) reach nothing the collector sees: a young
    # collection does not look at each of them for the flight's whole life
    h, members = Flight("h"), []
    held.fly(ready, 2, h, members, [])
    held.fly(ready, 1, h, members, [])
    assert len(members) == 6 and not gc.is_tracked(members)
    assert not gc.is_tracked(held.alive(members, h))
    # an object of another type may refer to anything: its pairs stay tracked

    class Loose:  # any object with .id, .segment and .offset may be held
        def __init__(self, k):
            self.id, self.segment, self.offset = f"{k:016x}".encode(), None, k
    loose = Loose(9)
    out.clear()
    members = []
    held.fly(deque([(loose, 0)]), 1, f, members, out)
    assert gc.is_tracked(out[0]) and gc.is_tracked(members)
    assert gc.is_tracked(held.alive(members, f))
    members = []
    held.fly(deque([(native_message(b"%016x" % 10, 10, b"body", None, 10), 0)]), 1, f, members, [])
    assert not gc.is_tracked(members)
    held.fly(deque([(Loose(11), 0)]), 1, f, members, [])  # then anything else: tracked again
    assert gc.is_tracked(members)
