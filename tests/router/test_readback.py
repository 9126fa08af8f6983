"""The router's read-back path: native (nsqmp._native.Message, read_messages, pack_frames,
native/readback.c) and its pure-Python twin (nsqmp.router.pyreadback), against a plain
reference written here from segment.encode() / iter_blob() and frames.message_frame().

Differential tests give every implementation the same input and require the same
results, byte for byte (or the same error).
"""
from __future__ import annotations

import gc
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqmp.diskqueue.segment import HEADER, HEADER_SIZE, MAGIC, VERSION, encode, iter_blob
from nsqmp.protocol.frames import MESSAGE_HEADER, message_frame
from nsqmp.router import filequeue
from nsqmp.router import pyreadback as py
from nsqmp.router import readback as chooser
from nsqmp.router.topic import Segment
from tests.harness import memory_kept_by, native_module

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def native():
    return native_module("read_messages")


IMPLS = ["native", "python"]


def impl(name):
    return native() if name == "native" else py


# -- the reference ---------------------------------------------------------------

def make_id(k: int) -> bytes:
    return f"{k:016x}".encode()


def records_of(items) -> bytes:
    """items: (ts, id, body, due) -> the segment records (DEFER when due != 0)."""
    return b"".join(encode([MESSAGE_HEADER.pack(ts, 0, mid) + body], due) for ts, mid, body, due in items)


def reference_read(buf: bytes, base: int, want: int):
    """(id, ts, body, offset, due) of the whole records at the start of buf; consumed."""
    out, pos = [], 0
    while len(out) < want and len(buf) - pos >= 8:
        length = int.from_bytes(buf[pos:pos + 4], "little") & 0x7FFFFFFF
        if pos + 8 + length > len(buf):
            break
        for rel, payload, due in iter_blob(buf[pos:pos + 8 + length]):
            assert rel == 0
            ts = int.from_bytes(payload[:8], "big", signed=True)
            out.append((payload[10:26], ts, payload[26:], base + pos, due))
        pos += 8 + length
    return out, pos


def fields(entries):
    return [(m.id, m.ts, m.body, m.offset, due) for m, due in entries]


def reference_pack(head, entries, start, max_bytes):
    frames, size, i = [], 0, start
    while i < len(entries):
        m, attempts = entries[i]
        f = message_frame(m.ts, attempts, m.id, m.body)
        if frames and size + len(f) > max_bytes:
            break
        frames.append(f)
        size += len(f)
        i += 1
    return head + b"".join(frames), i


item = st.tuples(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**64 - 1).map(make_id),
    st.one_of(st.just(b""), st.binary(max_size=300), st.binary(min_size=2000, max_size=5000)),
    st.one_of(st.just(0), st.integers(-(2**63), 2**63 - 1)),
)


# -- read_messages -----------------------------------------------------------------

@FUZZ
@given(items=st.lists(item, max_size=12), cut=st.integers(0, 10**6), base=st.integers(0, 2**40),
       want=st.integers(-1, 15), kind=st.sampled_from(["bytes", "bytearray", "memoryview"]))
def test_read_messages_equals_the_reference(items, cut, base, want, kind):
    full = records_of(items)
    buf = full[:cut % (len(full) + 1)]  # often a partial record at the end
    data = {"bytes": buf, "bytearray": bytearray(buf), "memoryview": memoryview(b"xx" + buf)[2:]}[kind]
    seg = object()
    expected, consumed = reference_read(buf, base, want)
    for name in IMPLS:
        entries, got_consumed, deferred = impl(name).read_messages(data, base, want, seg)
        assert fields(entries) == expected, name
        assert got_consumed == consumed, name
        assert deferred == sum(1 for e in expected if e[4]), name
        assert all(m.segment is seg for m, _ in entries)
        assert all(type(e) is tuple and len(e) == 2 for e in entries)
        assert all(type(m) is impl(name).Message for m, _ in entries)


@FUZZ
@given(items=st.lists(item, max_size=6), garbage=st.integers(0, 2**31 - 1), base=st.integers(0, 2**40))
def test_a_zero_length_word_is_an_error_at_its_offset(items, garbage, base):
    head = records_of(items)
    buf = head + (garbage & 0x80000000).to_bytes(4, "little") + b"\0" * 40  # length 0, DEFER or not
    for name in IMPLS:
        with pytest.raises(ValueError, match=f"^no record at offset {base + len(head)}$"):
            impl(name).read_messages(buf, base, 100, None)
        # stopping before it is no error
        entries, consumed, _ = impl(name).read_messages(buf, base, len(items), None)
        assert consumed == len(head) and len(entries) == len(items)


@pytest.mark.parametrize("name", IMPLS)
@pytest.mark.parametrize("word", [1, 25, 0x80000000 | 26, 0x80000000 | 33])
def test_a_record_shorter_than_a_message_header_is_an_error(name, word):
    buf = word.to_bytes(4, "little") + b"\0" * 100
    with pytest.raises(ValueError, match="^record too short at offset 7$"):
        impl(name).read_messages(buf, 7, 1, None)


@pytest.mark.parametrize("name", IMPLS)
def test_one_record_larger_than_the_buffer_reads_nothing(name):
    rec = records_of([(1, make_id(1), b"x" * 5000, 0)])
    for n in (0, 3, 8, 100, len(rec) - 1):
        assert impl(name).read_messages(rec[:n], 0, 10, None) == ([], 0, 0)
    entries, consumed, deferred = impl(name).read_messages(rec, 0, 10, None)
    assert consumed == len(rec) and deferred == 0 and entries[0][0].body == b"x" * 5000


@pytest.mark.parametrize("name", IMPLS)
def test_read_messages_argument_errors(name):
    f = impl(name).read_messages
    with pytest.raises(TypeError):
        f("text", 0, 1, None)
    with pytest.raises(TypeError):
        f(records_of([(1, make_id(1), b"x", 0)]), "0", 1, None)


# -- Message ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", IMPLS)
def test_message_attributes_read_and_write(name):
    Message = impl(name).Message
    seg = object()
    m = Message(b"0123456789abcdef", 123, b"body", seg, 64)
    assert (m.id, m.ts, m.body, m.segment, m.offset) == (b"0123456789abcdef", 123, b"body", seg, 64)
    m2 = Message(msg_id=b"fedcba9876543210", ts=-5, body=b"", segment=None, offset=0)
    assert (m2.id, m2.ts, m2.body, m2.segment, m2.offset) == (b"fedcba9876543210", -5, b"", None, 0)
    m.ts, m.segment, m.offset = 2**62, None, 2**40
    assert (m.id, m.ts, m.body, m.segment, m.offset) == (b"0123456789abcdef", 2**62, b"body", None, 2**40)
    assert not hasattr(m, "__dict__")
    for name in ("id", "body", "other"):  # id and body live in the message: read-only
        with pytest.raises(AttributeError):
            setattr(m, name, b"aaaaaaaaaaaaaaaa")
    body = bytearray(b"mutable")
    m3 = Message(memoryview(b"0123456789abcdef"), 1, body, None, 0)
    body[:] = b"changed"
    assert m3.body == b"mutable" and type(m3.body) is bytes and type(m3.id) is bytes
    with pytest.raises(TypeError):
        Message(b"x", 1, b"")  # type: ignore[call-arg]
    for bad_id in (b"", b"0123", b"0123456789abcdef0"):
        with pytest.raises(ValueError):
            Message(bad_id, 1, b"", None, 0)
    with pytest.raises(TypeError):
        Message(b"0123456789abcdef", 1, "str", None, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", IMPLS)
def test_messages_are_keys_by_identity(name):
    Message = impl(name).Message
    a = Message(b"0123456789abcdef", 1, b"b", None, 8)
    b = Message(b"0123456789abcdef", 1, b"b", None, 8)  # same fields, another message
    assert a == a and a != b and hash(a) != hash(b)
    tries = {a: 3}
    assert tries.get(a, 0) == 3 and tries.get(b, 0) == 0


def test_the_chooser_takes_native_unless_pure_python():
    from nsqmp.router.channel import Message as channel_message
    assert channel_message is chooser.Message
    if os.environ.get("NSQMP_PURE_PYTHON", "") == "1":
        assert chooser.read_messages is py.read_messages and chooser.Message is py.Message
    else:
        assert chooser.read_messages is native().read_messages and chooser.Message is native().Message
        assert chooser.pack_frames is native().pack_frames
        assert chooser.pack_members is native().pack_members


# -- pack_frames -----------------------------------------------------------------------

frame_item = st.tuples(item, st.one_of(st.integers(0, 70000), st.integers(-(2**70), 2**70)))


@FUZZ
@given(items=st.lists(frame_item, max_size=10), head=st.binary(max_size=20), start=st.integers(0, 11),
       max_bytes=st.one_of(st.integers(-10, 200), st.integers(0, 30000)))
def test_pack_frames_equals_the_reference(items, head, start, max_bytes):
    for name in IMPLS:
        Message = impl(name).Message
        entries = [(Message(mid, ts, body, None, 0), attempts) for (ts, mid, body, _), attempts in items]
        expected = reference_pack(head, entries, start, max_bytes)
        got = impl(name).pack_frames(head, entries, start, max_bytes)
        assert got == expected, name
        assert type(got[0]) is bytes


@FUZZ
@given(items=st.lists(frame_item, min_size=1, max_size=20), max_bytes=st.integers(0, 12000))
def test_pack_frames_in_a_loop_sends_every_frame_once(items, max_bytes):
    """The router's loop: records of at most max_bytes of frames (or one frame bigger)."""
    head = b"\x14" + bytes(8)
    for name in IMPLS:
        Message = impl(name).Message
        entries = [(Message(mid, ts, body, None, 0), attempts) for (ts, mid, body, _), attempts in items]
        frames = [message_frame(m.ts, a, m.id, m.body) for m, a in entries]
        sent, i = [], 0
        while i < len(entries):
            data, nxt = impl(name).pack_frames(head, entries, i, max_bytes)
            assert data[:len(head)] == head and nxt > i
            body = data[len(head):]
            assert body == b"".join(frames[i:nxt])
            assert len(body) <= max_bytes or nxt == i + 1
            sent.append(nxt)
            i = nxt
        assert i == len(entries)


@pytest.mark.parametrize("name", IMPLS)
def test_attempts_are_masked_to_16_bits(name):
    m = impl(name).Message(b"0123456789abcdef", 7, b"x", None, 0)
    for attempts in (65535, 65536, 65537, 2**40 + 3, -1):
        data, _ = impl(name).pack_frames(b"", [(m, attempts)], 0, 1 << 20)
        assert data == message_frame(7, attempts, m.id, m.body)
        assert int.from_bytes(data[16:18], "big") == attempts & 0xFFFF


@pytest.mark.parametrize("name", IMPLS)
def test_pack_frames_past_the_end_and_errors(name):
    mod = impl(name)
    m = mod.Message(b"0123456789abcdef", 7, b"x", None, 0)
    assert mod.pack_frames(b"HD", [(m, 1)], 1, 100) == (b"HD", 1)
    assert mod.pack_frames(bytearray(b"HD"), [], 0, 100) == (b"HD", 0)
    with pytest.raises(ValueError):
        mod.pack_frames(b"", [(m, 1)], -1, 100)


@FUZZ
@given(items=st.lists(frame_item, max_size=10), start=st.integers(0, 11),
       max_bytes=st.one_of(st.integers(-10, 200), st.integers(0, 30000)))
def test_pack_members_frames_a_flat_list_as_pack_frames_frames_its_pairs(items, start, max_bytes):
    """A flight's members (message, attempts, ...), as fly appends them: the same record
    as pack_frames of the pairs, and the same next index (in messages)."""
    head = b"\x14" + bytes(8)
    for name in IMPLS:
        Message = impl(name).Message
        entries = [(Message(mid, ts, body, None, 0), attempts) for (ts, mid, body, _), attempts in items]
        members = [x for pair in entries for x in pair]
        assert impl(name).pack_members(head, members, start, max_bytes) == \
            reference_pack(head, entries, start, max_bytes), name


@pytest.mark.parametrize("name", IMPLS)
def test_pack_members_refuses_a_list_that_is_not_pairs(name):
    mod = impl(name)
    m = mod.Message(b"0123456789abcdef", 7, b"x", None, 0)
    with pytest.raises(TypeError):
        mod.pack_members(b"", [m, 1, m], 0, 100)
    assert mod.pack_members(b"HD", [m, 1], 1, 100) == (b"HD", 1)


def test_native_pack_frames_checks_its_entries():
    n = native()
    m = n.Message(b"0123456789abcdef", 7, b"x", None, 0)
    for bad in ([(m,)], [[m, 1]], [(object(), 1)], [(m, 1.5)]):
        with pytest.raises(TypeError):
            n.pack_frames(b"", bad, 0, 100)
    for bad in ([object(), 1], [m, 1.5]):
        with pytest.raises(TypeError):
            n.pack_members(b"", bad, 0, 100)
    with pytest.raises(AttributeError):
        del m.segment
    assert m.segment is None


# -- references and memory -------------------------------------------------------------

def test_no_reference_or_memory_is_leaked():
    """The C code's reference counting, error paths included (the twin is plain Python)."""
    mod = native()
    seg = Segment(0, 0, "/nonexistent")
    buf = records_of([(k, make_id(k), b"b" * (k * 7 % 50), (k * 977) if k % 3 == 0 else 0) for k in range(8)])
    bad = buf + bytes(16)  # ends in a zero length word
    head = b"\x14" + bytes(8)

    def once():
        entries, _, _ = mod.read_messages(buf, 64, 100, seg)
        mod.pack_frames(head, [(m, 1) for m, _ in entries], 0, 200)
        mod.pack_members(head, [x for m, _ in entries for x in (m, 2)], 0, 200)
        try:
            mod.read_messages(bad, 64, 100, seg)
        except ValueError:
            pass
        try:
            mod.pack_frames(head, [(entries[0][0], 1), (1, 2)], 0, 1 << 20)
        except (TypeError, AttributeError):
            pass
        try:
            mod.pack_members(head, [entries[0][0], 1, 1, 2], 0, 1 << 20)
        except TypeError:
            pass

    once()
    refs = sys.getrefcount(seg)
    grown = memory_kept_by(once)
    assert sys.getrefcount(seg) == refs
    assert grown < 64 * 1024, grown  # a leak of one object per loop would be megabytes


# -- file queue: read_range over a real segment file -----------------------------------

def write_segment(path, items) -> list[int]:
    """A segment file of these records; their offsets."""
    offsets, pos = [], HEADER_SIZE
    blob = b""
    for it in items:
        rec = records_of([it])
        offsets.append(pos)
        pos += len(rec)
        blob += rec
    with open(path, "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, 0, 0).ljust(HEADER_SIZE, b"\0") + blob)
    return offsets


@pytest.mark.parametrize("name", IMPLS)
def test_read_range_over_chunks_and_a_record_larger_than_one(name, tmp_path, monkeypatch):
    monkeypatch.setattr(filequeue, "read_messages", impl(name).read_messages)
    monkeypatch.setattr(filequeue, "_CHUNK", 4096)
    items = [(k, make_id(k), os.urandom(k * 397 % 3000), 0 if k % 4 else 10**18 + k) for k in range(40)]
    items[7] = (7, make_id(7), os.urandom(3 * 4096), 0)  # larger than a chunk
    items[8] = (8, make_id(8), os.urandom(5 * 4096), 5)  # and a deferred one right after
    path = str(tmp_path / "00.00000000.seg")
    offsets = write_segment(path, items)
    end = os.path.getsize(path)
    seg = Segment(0, 0, path)
    q = filequeue.FileQueue()
    q.add(seg, HEADER_SIZE, end, len(items))
    got = []
    for want in (1, 5, 3, 100):
        entries, deferred = q.take(want)
        assert len(entries) == min(want, len(items) - len(got))
        assert deferred == sum(1 for _, due in entries if due)
        got += entries
    assert not q and q.take(10) == ([], 0)
    assert [(m.id, m.ts, m.body, m.offset, due) for m, due in got] == \
        [(mid, ts, body, off, due) for (ts, mid, body, due), off in zip(items, offsets)]
    assert all(m.segment is seg for m, _ in got)
    q.add(seg, HEADER_SIZE, end, len(items))
    assert q.remove_segment(seg) == offsets and not q


@pytest.mark.parametrize("name", IMPLS)
def test_read_range_errors_are_oserrors(name, tmp_path, monkeypatch):
    monkeypatch.setattr(filequeue, "read_messages", impl(name).read_messages)
    path = str(tmp_path / "00.00000000.seg")
    offsets = write_segment(path, [(1, make_id(1), b"a", 0), (2, make_id(2), b"b" * 100, 0)])
    size = os.path.getsize(path)
    seg = Segment(0, 0, path)
    with open(path, "r+b") as f:  # the second record's length word zeroed
        f.seek(offsets[1])
        f.write(bytes(4))
    entries, nxt, _ = filequeue.read_range(seg, offsets[0], offsets[1], 10)
    assert len(entries) == 1 and nxt == offsets[1]
    with pytest.raises(OSError, match=f"no record at offset {offsets[1]}"):
        filequeue.read_range(seg, offsets[0], size, 10)
    q = filequeue.FileQueue()
    q.add(seg, offsets[0], size, 2)
    assert q.take(10) == ([], 0) and not q  # logged; the records stay in the file


@pytest.mark.parametrize("name", IMPLS)
def test_a_record_cut_short_in_the_file_is_an_oserror(name, tmp_path, monkeypatch):
    monkeypatch.setattr(filequeue, "read_messages", impl(name).read_messages)
    monkeypatch.setattr(filequeue, "_CHUNK", 16)  # every record is larger than a chunk
    path = str(tmp_path / "00.00000000.seg")
    offsets = write_segment(path, [(1, make_id(1), b"a", 0), (2, make_id(2), b"b" * 100, 0)])
    size = os.path.getsize(path)
    seg = Segment(0, 0, path)
    entries, nxt, _ = filequeue.read_range(seg, offsets[0], size, 10)
    assert [m.body for m, _ in entries] == [b"a", b"b" * 100] and nxt == size
    os.truncate(path, size - 1)
    with pytest.raises(OSError, match=f"record at offset {offsets[1]} cut short"):
        filequeue.read_range(seg, offsets[0], size, 10)


_GUARD_CHECK = r"""
import ctypes, mmap, sys
from nsqmp import _native
from nsqmp.diskqueue.segment import encode
from nsqmp.protocol.frames import MESSAGE_HEADER

page = mmap.PAGESIZE
area = mmap.mmap(-1, 2 * page)
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
base = ctypes.addressof(ctypes.c_char.from_buffer(area))
if libc.mprotect(base + page, page, 0) != 0:  # PROT_NONE
    sys.exit("mprotect failed")
recs = encode([MESSAGE_HEADER.pack(7, 0, b"0123456789abcdef") + b"x" * 40])
recs += encode([MESSAGE_HEADER.pack(8, 0, b"fedcba9876543210") + b"y" * 3], 12345)
view = memoryview(area)
checked = 0
for cut in range(len(recs) + 1):
    data = recs[:cut]
    view[page - cut:page] = data  # the buffer ends where the protected page begins
    got = _native.read_messages(view[page - cut:page], 0, 10, None)
    assert got[1] in (0, 74, len(recs)), (cut, got[1])
    checked += 1
for word in (b"\x00\x00\x00\x00", b"\x05\x00\x00\x00", b"\xff\xff\xff\x7f", b"\xff\xff\xff\xff"):
    for tail in range(0, 8):
        data = word + bytes(tail)
        view[page - len(data):page] = data
        try:
            _native.read_messages(view[page - len(data):page], 0, 10, None)
        except ValueError:
            pass
        checked += 1
print(checked)
"""


def test_read_messages_never_reads_past_the_buffer():
    """Every prefix of some records, and some odd length words, placed so the buffer ends
    right before a PROT_NONE page: a read past its end would kill the process."""
    native()
    import subprocess
    proc = subprocess.run([sys.executable, "-c", _GUARD_CHECK], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) > 100


def test_native_entries_are_not_tracked_by_the_cycle_collector():
    """A Message refers to no object that could refer back, so the (message, due) entries
    the router makes by the million are left out of every collection from the start."""
    entries, _, _ = native().read_messages(records_of([(1, make_id(1), b"a", 0), (2, make_id(2), b"b", 5)]),
                                          0, 10, None)
    assert len(entries) == 2 and not any(gc.is_tracked(e) for e in entries)
