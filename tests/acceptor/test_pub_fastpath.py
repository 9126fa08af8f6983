"""The publish run (native/pubrun.c and its twin nsqmp/diskqueue/pubrun.py): a run of
PUB/MPUB from a read buffer to a segment file in one call.

The function first, both implementations on the same cases (what it takes, where it
stops, the bytes it writes); then the broker: a bad command in the middle of a run, a run
cut across reads, a full ring, and kill -9 of the acceptor in the middle of runs.
"""
from __future__ import annotations

import mmap
import os
import random
import signal
import socket
import struct
import time

import pytest

from nsqmp.client import Connection, wire
from nsqmp.diskqueue import pubrun as twin
from nsqmp.diskqueue.segment import iter_blob
from nsqmp.layouts import MESSAGE_HEAD
from tests.harness import native_module, wait_for

END, MORE, OTHER, ROOM = (twin.PUB_RUN_END, twin.PUB_RUN_MORE, twin.PUB_RUN_OTHER,
                          twin.PUB_RUN_ROOM)
MAX_MSG, MAX_BODY = 1024, 8192
TS = 1_700_000_000_123_456_789
EPOCH_MS = 1288834974657
NOW_MS = TS // 1_000_000 - EPOCH_MS


def _native():
    return native_module("pub_run").pub_run


@pytest.fixture(params=["native", "python"])
def pub_run(request):
    return _native() if request.param == "native" else twin.pub_run


def run(fn, buf, topic=b"t", room=1 << 20, ms=0, seq=0, pos=0, path=None):
    """(result, bytes written) of one call, into a fresh file at offset 64."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644) if path else -1
    try:
        result = fn(buf, pos, topic, fd, 64, room, MAX_MSG, MAX_BODY, TS, 5, ms, seq)
        written = os.pread(fd, result[3], 64) if path else b""
    finally:
        if fd >= 0:
            os.close(fd)
    return result, written


def bodies_of(written: bytes) -> list[bytes]:
    return [msg[MESSAGE_HEAD.size:] for _, msg, _ in iter_blob(written)]


def ids_of(written: bytes) -> list[int]:
    return [int(MESSAGE_HEAD.unpack_from(msg)[2], 16) for _, msg, _ in iter_blob(written)]


GOOD_COMMANDS = [wire.pub("t", b"one"), wire.mpub("t", [b"two", b"three"]), wire.pub("t", b"four")]
GOOD = b"".join(GOOD_COMMANDS)


def test_a_run_is_framed_stamped_and_written_once(pub_run, tmp_path):
    (end, commands, messages, size, ms, seq, status), written = run(pub_run, bytearray(GOOD),
                                                                    path=tmp_path / "s")
    assert (end, commands, messages, status) == (len(GOOD), 3, 4, END)
    assert bodies_of(written) == [b"one", b"two", b"three", b"four"]
    assert size == len(written) == sum(8 + 26 + len(b) for b in (b"one", b"two", b"three", b"four"))
    ids = ids_of(written)
    assert ids == [NOW_MS << 22 | 5 << 12 | k for k in range(4)]
    assert (ms, seq) == (NOW_MS, 4)
    assert all(MESSAGE_HEAD.unpack_from(m)[:2] == (TS, 0) for _, m, _ in iter_blob(written))


def test_both_write_the_same_bytes(tmp_path):
    cases = [GOOD, GOOD + wire.pub("u", b"x"), wire.mpub("t", [bytes([i]) * i for i in range(1, 60)])]
    for buf in cases:
        assert run(_native(), bytearray(buf), path=tmp_path / "a") == \
            run(twin.pub_run, bytearray(buf), path=tmp_path / "b")


@pytest.mark.parametrize("bad", [
    wire.pub("u", b"other topic"),
    wire.pub("tt", b"longer topic"),
    wire.dpub("t", 10, b"deferred"),
    b"PUB t\r\n" + struct.pack(">i", 1) + b"x",
    b"PUB t extra\n" + struct.pack(">i", 1) + b"x",
    b"PUB t\n" + struct.pack(">i", 0),
    b"PUB t\n" + struct.pack(">i", MAX_MSG + 1) + b"x" * (MAX_MSG + 1),
    b"MPUB t\n" + struct.pack(">ii", 4, 0),
    b"MPUB t\n" + struct.pack(">i", 2) + b"xx",
    b"MPUB t\n" + struct.pack(">ii", 8, 1) + struct.pack(">i", 5),  # message past the body
    b"MPUB t\n" + struct.pack(">iii", 12, 1, 0) + b"xxxx",  # an empty message
    wire.mpub("t", [b"x" * (MAX_MSG + 1)]),
    b"NOP\n",
    b"FIN 0123456789abcdef\n",
])
def test_it_stops_before_what_the_handlers_must_answer(pub_run, bad):
    buf = bytearray(GOOD + bad + GOOD)
    (end, commands, messages, _, _, _, status), written = run(pub_run, buf)
    assert (end, commands, messages, status) == (len(GOOD), 3, 4, OTHER)


def test_a_run_cut_anywhere_takes_the_whole_commands_and_waits(pub_run):
    ends = [sum(len(c) for c in GOOD_COMMANDS[:k]) for k in range(4)]  # where commands end
    for cut in range(len(GOOD) + 1):
        (end, commands, _, _, _, _, status), _ = run(pub_run, bytearray(GOOD[:cut]))
        taken = max(k for k in range(4) if ends[k] <= cut)
        assert (end, commands) == (ends[taken], taken), cut
        assert status == (END if cut == end else MORE), cut


def test_room_and_pos(pub_run):
    (end, commands, _, size, _, _, status), _ = run(pub_run, bytearray(GOOD), room=50)
    first = len(GOOD_COMMANDS[0])
    assert (end, commands, size, status) == (first, 1, 8 + 26 + 3, ROOM)
    (end, commands, _, _, _, _, status), _ = run(pub_run, bytearray(GOOD), room=0)
    assert (end, commands, status) == (0, 0, ROOM)
    (end, commands, messages, _, _, _, _), _ = run(pub_run, bytearray(b"junk" + GOOD), pos=4)
    assert (end, commands, messages) == (4 + len(GOOD), 3, 4)
    with pytest.raises(ValueError):
        pub_run(bytearray(GOOD), len(GOOD) + 1, b"t", -1, 64, 100, MAX_MSG, MAX_BODY, TS, 5, 0, 0)


def test_a_call_encodes_at_most_1_mib_and_the_next_one_goes_on(pub_run):
    buf = bytearray(wire.pub("t", b"b" * 400) * 3000)  # 1.3 MB of records
    (end, commands, _, size, _, _, status), _ = run(pub_run, buf, room=1 << 30)
    assert status == ROOM and size <= 1 << 20 and commands == (1 << 20) // (8 + 26 + 400)
    (end2, commands2, _, _, _, _, status2), _ = run(pub_run, buf, room=1 << 30, pos=end)
    assert (end2, commands + commands2, status2) == (len(buf), 3000, END)


def test_a_small_run_is_copied_into_the_window_and_a_long_one_written(pub_run, tmp_path):
    """Up to PUB_RUN_MAPPED_MAX bytes go into the window (a mapping of the file at file_pos)
    and not through the descriptor; more, or what does not fit the window, by pwrite."""
    path = tmp_path / "s"
    with open(path, "w+b") as f:
        f.truncate(1 << 16)
        window = mmap.mmap(f.fileno(), 1 << 14, offset=1 << 13)  # the file's [8192, 24576)
        fd = f.fileno()
        small = bytearray(wire.pub("t", b"s" * 100) * 3)
        # the descriptor is read-only here: had it been written through, pwrite would fail
        ro = os.open(path, os.O_RDONLY)
        try:
            result = pub_run(small, 0, b"t", ro, 8192 + 100, 1 << 20, MAX_MSG, MAX_BODY, TS, 5, 0, 0,
                             window, 100)
        finally:
            os.close(ro)
        size = result[3]
        assert result[1] == 3 and size == 3 * (8 + 26 + 100) <= twin.PUB_RUN_MAPPED_MAX
        assert bodies_of(os.pread(fd, size, 8192 + 100)) == [b"s" * 100] * 3
        # a longer run goes by pwrite: the window is left as it was
        long = bytearray(wire.mpub("t", [b"l" * 1000] * 5))
        result = pub_run(long, 0, b"t", fd, 30000, 1 << 20, MAX_MSG, MAX_BODY, TS, 5, 0, 0, window, 0)
        assert result[3] > twin.PUB_RUN_MAPPED_MAX and not any(window[:100])
        assert bodies_of(os.pread(fd, result[3], 30000)) == [b"l" * 1000] * 5
        # a small one past the window's end: pwrite too
        result = pub_run(small, 0, b"t", fd, 40000, 1 << 20, MAX_MSG, MAX_BODY, TS, 5, 0, 0,
                         window, len(window) - 10)
        assert not any(window[-10:]) and bodies_of(os.pread(fd, result[3], 40000)) == [b"s" * 100] * 3
        with pytest.raises(ValueError):
            pub_run(small, 0, b"t", fd, 0, 100, MAX_MSG, MAX_BODY, TS, 5, 0, 0, window, len(window) + 1)
        with pytest.raises(BufferError):  # not writable
            pub_run(small, 0, b"t", fd, 0, 100, MAX_MSG, MAX_BODY, TS, 5, 0, 0, bytes(100), 0)
        window.close()


def test_ids_borrow_the_next_millisecond_and_never_go_back(pub_run, tmp_path):
    buf = bytearray(wire.pub("t", b"a") * 3)
    (_, _, _, _, ms, seq, _), written = run(pub_run, buf, ms=NOW_MS, seq=4095, path=tmp_path / "s")
    assert ids_of(written) == [NOW_MS << 22 | 5 << 12 | 4095, (NOW_MS + 1) << 22 | 5 << 12,
                               (NOW_MS + 1) << 22 | 5 << 12 | 1]
    assert (ms, seq) == (NOW_MS + 1, 2)
    # a generator ahead of the clock (it borrowed) keeps counting from where it is
    (_, _, _, _, ms, seq, _), _ = run(pub_run, buf, ms=NOW_MS + 7, seq=10)
    assert (ms, seq) == (NOW_MS + 7, 13)


def test_random_buffers_give_the_same_answer_from_both():
    rng = random.Random(24)
    pieces = [GOOD, wire.pub("t", b"z" * 300), wire.mpub("t", [b"q"] * 40), wire.pub("u", b"y"),
              b"PUB t\n" + struct.pack(">i", 0), b"NOP\n", b"MPUB t\n" + struct.pack(">i", 3)]
    native = _native()
    for _ in range(300):
        buf = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        buf = bytearray(buf[:rng.randint(0, len(buf))])
        room = rng.choice([1 << 20, rng.randint(0, 600)])
        assert run(native, buf, room=room) == run(twin.pub_run, buf, room=room)


# -- the broker ----------------------------------------------------------------------------

def _drain(broker, topic: str, count: int, timeout: float = 30.0) -> list[bytes]:
    got = []
    with Connection.connect(broker.tcp_address) as consumer:
        consumer.sub(topic, "ch", rdy=2500)
        deadline = time.monotonic() + timeout
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} arrived"
            m = consumer.read_message()
            got.append(m.body)
            consumer.fin(m.id)
    return got


@pytest.mark.parametrize("impl", ["native", "python"])
def test_a_bad_command_in_a_run_gets_its_error_after_the_good_ones_are_kept(make_broker, monkeypatch, impl):
    if impl == "python":  # the broker's acceptors run the twin
        monkeypatch.setenv("NSQMP_PURE_PYTHON", "1")
    broker = make_broker()
    with Connection.connect(broker.tcp_address) as c:
        c.pub("fp_bad", b"first")  # the handler's publish: later ones may go by the run
        good = [b"g%d" % i for i in range(5)]
        c.send(b"".join(wire.pub("fp_bad", b) for b in good) + b"PUB fp_bad\n" + struct.pack(">i", 0)
               + wire.pub("fp_bad", b"never"))
        for _ in good:
            c.expect_ok()
        frame = c.read_frame()
        assert (frame.type, frame.data) == (wire.FRAME_ERROR, b"E_BAD_MESSAGE PUB invalid message body size 0")
        with pytest.raises((EOFError, ConnectionResetError)):
            c.read_frame()
    assert sorted(_drain(broker, "fp_bad", 6)) == sorted([b"first"] + good)
    assert broker.stats(topic="fp_bad")["topics"][0]["message_count"] == 6


def test_a_run_cut_across_reads_is_answered_whole(broker):
    with Connection.connect(broker.tcp_address) as c:
        c.mpub("fp_cut", [b"first"])
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        bodies = [b"m%03d" % i + b"x" * (i % 17) for i in range(60)]
        data = b"".join(wire.pub("fp_cut", b) if i % 3 else wire.mpub("fp_cut", [b])
                        for i, b in enumerate(bodies))
        rng = random.Random(7)
        pos = 0
        while pos < len(data):
            step = rng.randint(1, 40)
            c.send(data[pos:pos + step])
            pos += step
            time.sleep(0.001)
        for _ in bodies:
            c.expect_ok()
    assert sorted(_drain(broker, "fp_cut", 61)) == sorted([b"first"] + bodies)


def test_a_full_ring_holds_the_publisher_until_the_router_reads(make_broker):
    broker = make_broker("--ring-size", "65536", "--max-msg-size", "8192", "--acceptors", "1")
    routers = [pid for title, pid in broker.children().items() if title.startswith("nsqmp router")]
    with Connection.connect(broker.tcp_address) as c:
        c.pub("fp_full", b"first")
        for pid in routers:
            os.kill(pid, signal.SIGSTOP)
        sent, oks = 0, 0
        try:
            c.sock.settimeout(0.5)
            # each round trip is one PUBLISH_AT record: far more than 64 KiB of them
            while True:
                c.send(wire.pub("fp_full", b"%06d" % sent))
                sent += 1
                try:
                    c.expect_ok()
                except socket.timeout:
                    break  # held: reading stopped while the ring is full
                oks += 1
                assert oks < 20_000, "never held"
        finally:
            for pid in routers:
                os.kill(pid, signal.SIGCONT)
        c.sock.settimeout(30)
        c.expect_ok()  # the held PUB is answered once the router has read
    assert len(_drain(broker, "fp_full", oks + 2, timeout=60)) == oks + 2


def test_kill_9_of_the_acceptor_in_runs_loses_nothing_answered(make_broker):
    broker = make_broker("--acceptors", "1")
    (acceptor,) = [pid for title, pid in broker.children().items() if title.startswith("nsqmp acceptor")]
    answered: list[bytes] = []
    c = Connection.connect(broker.tcp_address)
    c.pub("fp_kill", b"first")
    answered.append(b"first")
    try:
        for k in range(100_000):
            batch = [b"k%06d-%d" % (k, i) for i in range(8)]
            c.send(b"".join(wire.pub("fp_kill", b) for b in batch))
            for b in batch:
                c.expect_ok()
                answered.append(b)
            if k == 200:
                os.kill(acceptor, signal.SIGKILL)
    except (EOFError, ConnectionResetError, BrokenPipeError, OSError):
        pass
    c.close()
    assert len(answered) > 200 * 8
    wait_for(lambda: any(t.startswith("nsqmp acceptor") and p != acceptor
                         for t, p in broker.children().items()), what="a new acceptor")
    broker.wait_ping()
    got = set(_drain(broker, "fp_kill", len(answered), timeout=60))
    assert not set(answered) - got


def test_the_twin_shares_the_constants():
    from nsqmp.protocol import ids

    native = native_module("pub_run")
    assert (native.PUB_RUN_END, native.PUB_RUN_MORE, native.PUB_RUN_OTHER, native.PUB_RUN_ROOM) == \
        (END, MORE, OTHER, ROOM)
    assert native.PUB_RUN_MAPPED_MAX == twin.PUB_RUN_MAPPED_MAX
    assert twin._EPOCH_MS == ids._EPOCH_MS


def test_a_read_that_starts_with_a_run_is_taken_from_the_read_itself():
    """A publisher's read is handed to the run as it came (nothing copied into the
    connection's buffer); what the run leaves goes to the buffer and the parse loop."""
    from tests.acceptor.seams import connect, responses

    conn, transport, host = connect()
    calls: list[type] = []

    class Tail:  # a segment tail that writes nothing: twin.pub_run's framing and counts
        def run(self, buf, pos):
            calls.append(type(buf))
            end, commands, messages, *_ = twin.pub_run(buf, pos, b"t", -1, 0, 1 << 20, MAX_MSG, MAX_BODY,
                                                       TS, 5, 0, 0)
            return end, commands, messages, b"at" if commands else None

    host.run_tail = lambda topic: (Tail(), 7) if topic == b"t" else None
    conn.data_received(wire.pub("t", b"first"))  # its handler: the run may take the next ones
    assert responses(transport) == [b"OK"] and host.publishes[0][:2] == (b"t", [b"first"])
    conn.data_received(wire.pub("t", b"a") * 3)
    assert responses(transport) == [b"OK"] * 3 and calls == [bytes] and not conn.buf
    third = wire.pub("t", b"cut")
    conn.data_received(wire.pub("t", b"b") * 2 + third[:5])
    # the read's run took two; the parse loop's run looked at the cut one in the buffer
    assert responses(transport) == [b"OK"] * 2 and bytes(conn.buf) == third[:5]
    assert calls == [bytes, bytes, bytearray]
    conn.data_received(third[5:])  # the buffer is not empty: the parse loop's run takes it
    assert responses(transport) == [b"OK"] and calls[3:] == [bytearray] and not conn.buf
    assert conn.pub_counts == {b"t": 7}
    # each run that took commands sent its PUBLISH_AT to the topic's slot
    assert [rec for slot, rec in host.records if slot == 7] == [b"at"] * 3
