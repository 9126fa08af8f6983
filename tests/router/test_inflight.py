"""A channel's messages in flight: InFlightMap, native (native/inflight.c) and its
pure-Python twin (nsqmp.router.pyinflight), against a plain dict model written here.

Each map holds its own kind of objects, as the router pairs them: the native map the
native Message and Flight (it reads their structs and refuses anything else), the twin
map the twin's (nsqmp.router.pyreadback.Message, nsqmp.router.pyinflight.Flight). The
differential test runs random sequences of every operation on each map and on a model
holding the same kind of objects, and requires the same results (or the same error)
after each step.
"""
from __future__ import annotations

import gc
import sys
import weakref
from collections import deque
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqmp.router import channel as router_channel, delivery as router_delivery
from nsqmp.router import inflight as chooser
from nsqmp.router import pyinflight, pyreadback, readback
from tests.harness import native_module

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
IMPLS = ["native", "python"]


@dataclass(frozen=True)
class Kit:
    """One InFlightMap with the Message and Flight types it holds."""
    map: Any
    message: Any
    flight: Any


@cache
def kit(name: str) -> Kit:
    if name == "native":
        native = native_module("InFlightMap")
        return Kit(native.InFlightMap, native.Message, native.Flight)
    return Kit(pyinflight.InFlightMap, pyreadback.Message, pyinflight.Flight)


def make(name: str):
    return kit(name).map()


def message(k: int, name: str = "native"):
    return kit(name).message(f"{k:016x}".encode(), k, b"body", None, k)


def flight(label: object, name: str = "native"):
    """A Flight of `name`'s kind; the map only compares flights by identity, and the
    tests tell them apart by their consumer, `label`."""
    return kit(name).flight(0, label, 0, 0)


def label(f) -> object:
    return f.consumer


@cache
def msgs(name: str, n: int = 24) -> list:
    """n messages of `name`'s kind, the same ones every time."""
    return [message(k, name) for k in range(n)]


def flights(name: str) -> list:
    return [flight(f"f{i}", name) for i in range(3)]


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


ids = st.integers(0, 23)  # msgs(name)
fl_ids = st.integers(0, 2)  # flights(name)
ops = st.one_of(
    st.tuples(st.just("put"), ids, st.integers(0, 70000), fl_ids),
    st.tuples(st.just("remove"), ids),
    st.tuples(st.just("remove_bad"), st.binary(max_size=20)),
    st.tuples(st.just("move"), ids, fl_ids),
    st.tuples(st.just("get"), ids),
    st.tuples(st.just("contains"), st.one_of(ids, st.binary(max_size=20))),
    st.tuples(st.just("fly"), st.lists(st.tuples(ids, st.integers(0, 5)), max_size=12), st.integers(0, 14), fl_ids),
    st.tuples(st.just("land"), st.lists(ids, max_size=30), fl_ids),
    st.tuples(st.just("expire"), fl_ids),
    st.tuples(st.just("forget"), st.lists(ids, max_size=30)),
    st.tuples(st.just("alive"), st.lists(ids, max_size=30), fl_ids),
    st.just(("clear",)),
)


def flat(model, ks, flight=None, pool=()):
    """The flat members list (message, attempts, ...) of messages ks: their attempts as held
    in `flight` (the model's), 1 for those not held."""
    out = []
    for k in ks:
        e = model.held.get(pool[k].id)
        out += [pool[k], e[1] if e is not None and e[2] is flight else 1]
    return out


def apply(target, op, model, fl, pool):
    """The visible result of one operation: a value, or the type of the error. `model`
    says which members a flight has (expire is asked only of a whole flight, as the
    router does: every member still in it); fl is the flights of the test, one replaced
    after it expires (a flight that timed out takes no new member); pool its messages
    (fl and pool of the kind the target holds)."""
    kind = op[0]
    try:
        if kind == "put":
            return target.put(pool[op[1]], op[2], fl[op[3]])
        if kind == "remove":
            return target.remove(pool[op[1]].id)
        if kind == "remove_bad":
            return target.remove(op[1])
        if kind == "move":
            return target.move(pool[op[1]].id, fl[op[2]])
        if kind == "get":
            return target.get(pool[op[1]].id)
        if kind == "contains":
            key = pool[op[1]].id if isinstance(op[1], int) else op[1]
            return key in target
        if kind == "fly":
            ready = deque((pool[k], a) for k, a in op[1])
            members, out = [], []
            took = target.fly(ready, op[2], fl[op[3]], members, out)
            return took, list(ready), members, out
        if kind == "land":
            ready = deque([("already", 0)])
            landed = target.land(flat(model, op[1], fl[op[2]], pool), fl[op[2]], ready)
            return landed, list(ready)
        if kind == "expire":
            f = fl[op[1]]
            whole = sorted(k for k, m in enumerate(pool) if (e := model.held.get(m.id)) and e[2] is f)
            ready = deque([("already", 0)])
            return target.expire(flat(model, whole, f, pool), f, ready), list(ready)
        if kind == "forget":
            return target.forget([pool[k] for k in op[1]])
        if kind == "alive":
            return target.alive(flat(model, op[1], fl[op[2]], pool), fl[op[2]])
        if kind == "clear":
            return target.clear()
    except Exception as exc:  # noqa: BLE001 - the error's type is the result compared
        return type(exc)
    raise AssertionError(op)


def state(target) -> tuple:
    return len(target), sorted(((m.id, a, label(f)) for m, a, f in target.entries()))


class World:
    """One map, a model of it, and the messages and flights they share (of the map's kind)."""

    def __init__(self, name: str, n: int = 24) -> None:
        self.name, self.target, self.model = name, make(name), Model()
        self.msgs, self.fl = msgs(name, n), flights(name)

    def expired(self, i: int) -> None:
        """Flight i timed out: a flight that timed out takes no new member."""
        self.fl[i] = flight(label(self.fl[i]), self.name)


@FUZZ
@given(st.lists(ops, max_size=60))
def test_native_and_twin_do_what_the_model_does(sequence):
    worlds = [World(name) for name in IMPLS]
    for op in sequence:
        for w in worlds:
            got = apply(w.target, op, w.model, w.fl, w.msgs)
            want = apply(w.model, op, w.model, w.fl, w.msgs)
            if op[0] == "expire":
                w.expired(op[1])
            assert got == want, (w.name, op)
            assert state(w.target) == state(w.model), (w.name, op)
            for m in w.msgs:
                assert w.target.get(m.id) == w.model.get(m.id) and (m.id in w.target) == (m.id in w.model)
        assert worlds[0].target.stale == len(worlds[0].model.stale), op  # the native map's, kept exactly
        assert worlds[1].target.stale == 0


bulk_ops = st.one_of(  # over msgs(name, 3000)
    st.tuples(st.just("fly"), st.integers(0, 2999), st.integers(0, 1500), fl_ids),
    st.tuples(st.just("remove"), st.integers(0, 2999), st.integers(0, 1500), st.integers(1, 5)),
    st.tuples(st.just("land"), st.integers(0, 2999), st.integers(0, 1500), fl_ids),
    st.tuples(st.just("move"), st.integers(0, 2999), st.integers(0, 300), fl_ids),
    st.tuples(st.just("expire"), st.just(0), st.just(0), fl_ids),
    st.tuples(st.just("forget"), st.integers(0, 2999), st.integers(0, 1500)),
)


def bulk_members(model, msgs, flight):
    """Flat members (message, attempts, ...) with the attempts the model holds in flight."""
    out = []
    for m in msgs:
        e = model.held.get(m.id)
        out += [m, e[1] if e is not None and e[2] is flight else 1]
    return out


def apply_bulk(target, op, model, fl, BIG):
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
    worlds = [World(name, 3000) for name in IMPLS]
    for op in sequence:
        for w in worlds:
            got = apply_bulk(w.target, op, w.model, w.fl, w.msgs)
            want = apply_bulk(w.model, op, w.model, w.fl, w.msgs)
            if op[0] == "expire":  # a flight that timed out takes no new member
                w.expired(op[3])
            assert got == want, (w.name, op)
            assert state(w.target) == state(w.model), (w.name, op)
            for m in w.msgs[op[1]:op[1] + 50]:  # lookups right where the operation was
                assert w.target.get(m.id) == w.model.get(m.id)
        assert worlds[0].target.stale == len(worlds[0].model.stale), op


@pytest.mark.parametrize("name", IMPLS)
def test_a_hundred_thousand_in_flight_time_out_and_go_again(name):
    """Growth, removals that shift runs back, shrinking: nothing lost on the way."""
    held = make(name)
    msgs = [message(k, name) for k in range(100_000)]
    ready = deque((m, 0) for m in msgs)
    first, second = flight("first", name), flight("second", name)
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
    held, MSGS, FLIGHTS = make(name), msgs(name), flights(name)
    with pytest.raises(ValueError):
        held.put(kit(name).message(b"short", 0, b"", None, 0), 1, FLIGHTS[0])
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
    held, f = make(name), flight("f", name)
    msgs = [message(k, name) for k in range(200)]
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
    m, f = message(7), flight("f")
    before = sys.getrefcount(m)
    for _ in range(1000):
        held.put(m, 3, f)
        held.move(m.id, f)
        held.remove(m.id)
        held.fly(deque([(m, 1)]), 1, f, [], [])
        held.land([m, 2], f, deque())
        g = flight("g")
        held.put(m, 1, g)
        held.expire([m, 1], g, deque())  # stale: the map holds m and g until...
        held.fly(deque([(m, 1)]), 1, f, [], [])  # ...this takes the slot over
        held.expire([m, 2], f, deque())
        held.forget([m])  # ...or this empties it
        f = flight("f")
        held.put(m, 1, f)
        held.expire([m, 1], f, deque())
        held.clear()  # ...or this
        f = flight("f")
    assert sys.getrefcount(m) == before and held.stale == 0 and len(held) == 0
    probe = flight("probe")
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
    f = flight(ch, name)  # flight -> consumer -> channel, in the router
    ch.in_flight.put(message(1, name), 1, f)
    g = flight(ch, name)  # a flight timed out whole: its slot stale, the map holding it twice
    m2 = message(2, name)
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


def test_the_router_pairs_each_map_with_its_own_message_and_flight():
    """All native or all twin: the native map refuses the twin's objects."""
    assert readback.NATIVE == chooser.NATIVE
    assert router_channel.Flight is router_delivery.Flight is chooser.Flight  # what the router makes flights of
    name = "native" if chooser.NATIVE else "python"
    assert (chooser.InFlightMap, readback.Message, chooser.Flight) == (kit(name).map, kit(name).message,
                                                                       kit(name).flight)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_flight_has_the_twins_fields_and_constructor(impl):
    cls = native_module("Flight").Flight if impl == "native" else pyinflight.Flight
    consumer = object()
    f = cls(7, consumer, 100, 90)
    assert (f.token, f.consumer, f.deadline, f.delivered, f.live, f.members) == (7, consumer, 100, 90, 0, [])
    assert f.members is not cls(7, consumer, 100, 90).members  # a new list each
    m = [message(1, impl), 1]
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


def fin_flight(name: str, consumer: str, live: int):
    """A Flight of the kind map `name` holds (the native map's finish reads its struct)."""
    return kit(name).flight(0, consumer, 0, 0, live)


SEGMENTS = [Segment(), Segment(), None]


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=40),
       st.lists(st.integers(0, 45), max_size=60))
def test_finish_takes_what_the_consumer_owns_and_reports_the_rest(held_spec, fin_spec):
    """held_spec: per message k, (its flight 0-3 or not held, its segment); flights 0-2
    belong to consumer "me", flight 3 to "other". fin_spec: message numbers FIN'd, in
    order (above len(held_spec): ids never delivered)."""
    ids = b"".join(f"{k:016x}".encode() for k in fin_spec)
    results = []
    for name in IMPLS:
        msgs = [kit(name).message(f"{k:016x}".encode(), k, b"", SEGMENTS[seg], 100 + k)
                for k, (_, seg) in enumerate(held_spec)]
        held = make(name)
        flights = [fin_flight(name, c, 0) for c in ("me", "me", "me", "other")]
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
    assert results == [want] * len(IMPLS)


def test_native_finish_keeps_no_stray_references():
    held = make("native")
    seg = Segment()
    m = kit("native").message(b"%016x" % 9, 9, b"", seg, 9)
    f = fin_flight("native", "me", 0)
    before = sys.getrefcount(m), sys.getrefcount(f), sys.getrefcount(seg)
    for _ in range(1000):
        held.put(m, 1, f)
        f.live = 1
        bad, emptied = [], []
        got, runs = held.finish(m.id + m.id + b"x" * 16, 0, "me", bad, emptied)
        assert got == [m] and emptied == [f] and len(bad) == 2 and runs == [[seg, [9]]]
        del got, runs, bad, emptied
    assert (sys.getrefcount(m), sys.getrefcount(f), sys.getrefcount(seg)) == before


@pytest.mark.parametrize("name", ["native", "python"])
def test_fly_without_out_makes_no_pairs_and_the_same_members(name):
    """The delivery pass flies with out None and frames the flight's members."""
    held, other = make(name), make(name)
    msgs = [message(k, name) for k in range(5)]
    f, g = flight("f", name), flight("g", name)
    with_out: list = []
    without: list = []
    out: list = []
    assert held.fly(deque((m, k % 3) for k, m in enumerate(msgs)), 5, f, with_out, out) == 5
    assert other.fly(deque((m, k % 3) for k, m in enumerate(msgs)), 5, g, without, None) == 5
    assert without == with_out == [x for pair in out for x in pair]
    assert [other.get(m.id)[:2] for m in msgs] == [held.get(m.id)[:2] for m in msgs]
    assert not gc.is_tracked(without) or name == "python"


def test_native_pairs_of_messages_are_not_tracked_by_the_cycle_collector():
    """fly's frames and land's ready entries hold a Message and an int: no cycle can
    pass through them, so the young collections never walk them."""
    held, f, out, ready = make("native"), flight("f"), [], deque()
    msgs = [message(k) for k in range(3)]
    members: list = []
    held.fly(deque((m, 0) for m in msgs), 3, f, members, out)
    assert [a for _, a in out] == [1, 1, 1] and not any(gc.is_tracked(p) for p in out)
    assert held.land(members, f, ready) == 3
    assert [a for _, a in ready] == [1, 1, 1] and not any(gc.is_tracked(p) for p in ready)
    g, members = flight("g"), []
    held.fly(ready, 3, g, members, [])
    assert held.expire(members, g, ready) == 3
    assert [a for _, a in ready] == [2, 2, 2] and not any(gc.is_tracked(p) for p in ready)
    # a flight's members (Messages and ints) reach nothing the collector sees: a young
    # collection does not look at each of them for the flight's whole life
    h, members = flight("h"), []
    held.fly(ready, 2, h, members, [])
    held.fly(ready, 1, h, members, [])
    assert len(members) == 6 and not gc.is_tracked(members)
    assert not gc.is_tracked(held.alive(members, h))
    # an object of another type, which may refer to anything, never gets in: the
    # members stay Messages and ints

    class Loose:  # .id, .segment and .offset, as a Message has: not enough
        def __init__(self, k):
            self.id, self.segment, self.offset = f"{k:016x}".encode(), None, k
    members = []
    held.fly(deque([(message(10), 0)]), 1, f, members, [])
    assert not gc.is_tracked(members)
    with pytest.raises(TypeError):
        held.fly(deque([(Loose(11), 0)]), 1, f, members, [])
    assert len(members) == 2 and not gc.is_tracked(members)
    # a members list that already held something else stays tracked
    members = [[], 1]
    held.fly(deque([(message(12), 0)]), 1, f, members, [])
    assert len(members) == 4 and gc.is_tracked(members)


def test_the_native_map_refuses_the_twins_message_and_flight():
    """The native map reads a Message's and a Flight's structs: the twin's (or anything
    else) raises TypeError where it comes in, takes no reference, and leaves the map as
    it was and usable."""
    held, m, f = make("native"), message(1), flight("me")
    tm, tf = message(1, "python"), flight("me", "python")
    other, g = message(2), flight("me")
    held.put(m, 1, f)
    held.put(other, 1, g)
    assert held.expire([other, 1], g, deque()) == 1  # a stale slot, for forget to look at
    ready = deque([(m, 0)])
    gc.collect()
    before = sys.getrefcount(tm), sys.getrefcount(tf), sys.getrefcount(m), sys.getrefcount(f)
    calls = [
        lambda: held.put(tm, 1, f),
        lambda: held.put(m, 1, tf),
        lambda: held.move(m.id, tf),
        lambda: held.fly(ready, 1, tf, [], []),  # refused before it pops anything
        lambda: held.fly(deque([(tm, 0)]), 1, f, [], []),
        lambda: held.land([tm, 1], f, deque()),
        lambda: held.land([m, 1], tf, deque()),
        lambda: held.expire([tm, 1], f, deque()),
        lambda: held.expire([m, 1, tm, 1], f, deque()),  # the first one good: still nothing done
        lambda: held.expire([m, 1], tf, deque()),
        lambda: held.alive([m, 1, tm, 1], f),
        lambda: held.alive([m, 1], tf),
        lambda: held.forget([tm]),
    ]
    for k, call in enumerate(calls):
        with pytest.raises(TypeError, match=r"InFlightMap holds nsqmp\._native\.(Message|Flight) only"):
            call()
        assert held.get(m.id) == (m, 1, f) and len(held) == 1 and held.stale == 1, k
    assert list(ready) == [(m, 0)]
    del calls
    gc.collect()
    assert (sys.getrefcount(tm), sys.getrefcount(tf), sys.getrefcount(m), sys.getrefcount(f)) == before
    # still usable: FIN, forget, a delivery pass and a time-out as usual
    bad, emptied = [], []
    f.live = 1
    assert held.finish(m.id, 0, "me", bad, emptied) == ([m], []) and emptied == [f] and not bad
    held.forget([other])
    assert held.stale == 0 and len(held) == 0
    h, members = flight("me"), []
    assert held.fly(ready, 1, h, members, []) == 1 and held.get(m.id) == (m, 1, h)
    assert held.land(members, h, ready) == 1 and list(ready) == [(m, 1)] and len(held) == 0
