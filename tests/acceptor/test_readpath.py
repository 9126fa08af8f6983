"""The read path of a V2 connection (native/readpath.c and its twin in
nsqmp/acceptor/pyreadpath.py): the same reads, cut anywhere, through a connection on each
implementation give the same answers, ring records, publishes, buffers and counts.

A publisher's run goes to a real segment tail (native/segtail.c) on a file of its own per
connection, a consumer's FINs to the real parser's fins()."""
from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqmp.acceptor import readpath
from nsqmp.acceptor.publishing import _DELIVER_FIRST
from nsqmp.acceptor.pyreadpath import ReadPath as PyReadPath
from nsqmp.acceptor.session import FIN_STATES, STATE_INIT
from nsqmp.acceptor.tcp import V2Connection
from nsqmp.acceptor.upgrade import compression
from nsqmp.client import wire
from nsqmp.diskqueue.encoder import SegmentTail  # the native one unless NSQMP_PURE_PYTHON=1
from nsqmp.ipc import records
from nsqmp.protocol.frames import OK_FRAME
from nsqmp.protocol.ids import IdGenerator
from tests.acceptor.seams import MemoryTransport, RecordingAcceptor
from tests.harness import memory_kept_by, native_module

SLOT = 9  # the run topic's router slot the tail is handed with
IDS = [bytes(f"{i:016d}", "ascii") for i in range(8)]


NativeReadPath = native_module("ReadPath").ReadPath

# a connection on each implementation, whichever V2Connection derives from (NSQMP_PURE_PYTHON):
# the other one first in the MRO, its state in the same attributes, so only the read path differs
if issubclass(V2Connection, NativeReadPath):
    class TwinConnection(PyReadPath, V2Connection):
        """V2Connection with the twin's data_received first in its MRO."""
    NativeConnection: type = V2Connection
else:
    class NativeConnection(NativeReadPath, V2Connection):  # type: ignore[no-redef]
        """V2Connection on the native read path (its state in the native members)."""
    TwinConnection = V2Connection  # type: ignore[misc]
for _impl in (NativeReadPath, PyReadPath):  # as nsqmp.acceptor.tcp does for the one in use
    _impl.configure(STATE_INIT, FIN_STATES, OK_FRAME, _DELIVER_FIRST)


def test_the_native_read_path_is_the_one_in_use():
    if os.environ.get("NSQMP_PURE_PYTHON") != "1":
        assert readpath.ReadPath is NativeReadPath and V2Connection.data_received is NativeReadPath.data_received
        # the runs below go to a native tail: the read path calls it in C (segtail.h)
        assert SegmentTail is native_module("SegmentTail").SegmentTail
    else:
        assert readpath.ReadPath is PyReadPath


class Side:
    """One connection, on one implementation, with its recording acceptor and its tail."""

    def __init__(self, kind: type, path: str) -> None:
        self.host = RecordingAcceptor()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.posix_fallocate(fd, 0, 1 << 20)
        self.fd = fd
        self.tail = SegmentTail(b"t", IdGenerator(5), 1024, 8192, records.PUBLISH_AT_FIELDS, 64 << 10)
        self.tail.attach(fd, 64, (1 << 20) - 8, records.publish_at(1, 3, 0, 0, 0, b"t"))
        self.host.run_tail = lambda topic: (self.tail, SLOT) if topic == b"t" else None
        self.calls: list[str] = []
        self.conn = kind(self.host)
        # a SUB record carries it: the two sides must not differ by the second they were made in
        self.conn.connect_ts = 1_795_000_000
        self.transport = MemoryTransport()
        self.conn.connection_made(self.transport)
        self.conn.data_received(wire.MAGIC)

    def feed(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            if not self.conn.closed:
                self.conn.data_received(chunk)

    def seen(self) -> tuple:
        c = self.conn
        return (bytes(self.transport.out), [(s, bytes(r)) for s, r in self.host.records],
                self.host.publishes, bytes(c.buf), dict(c.pub_counts), c.closed, c.state,
                self.tail.pos, self.tail.unsynced)

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def pair(tmp_path):
    sides = [Side(NativeConnection, str(tmp_path / "native")), Side(TwinConnection, str(tmp_path / "twin"))]
    yield sides
    for side in sides:
        side.close()


def cut(stream: bytes, points: list[int]) -> list[bytes]:
    """stream in reads, cut at the given points."""
    edges = sorted({p % (len(stream) + 1) for p in points} | {0, len(stream)})
    return [stream[a:b] for a, b in zip(edges, edges[1:]) if b > a]


def same_on_both(tmp, setup: list, reads: list[bytes]) -> None:
    """A connection on each implementation: the setup (reads, or calls on the side), then
    the reads; everything either did is the same."""
    sides = [Side(NativeConnection, str(tmp / "native")), Side(TwinConnection, str(tmp / "twin"))]
    try:
        for side in sides:
            for step in setup:
                if isinstance(step, bytes):
                    side.feed([step])
                else:
                    step(side)
            side.feed(reads)
        assert sides[0].seen() == sides[1].seen()
    finally:
        for side in sides:
            side.close()


publisher_commands = st.sampled_from([
    wire.pub("t", b"a"), wire.pub("t", b"bb" * 40), wire.mpub("t", [b"x", b"yy"]),
    wire.pub("u", b"other topic"), wire.NOP, wire.pub("t", b""),  # an empty body: E_BAD_MESSAGE
    wire.dpub("t", 5, b"deferred"),
])


@settings(max_examples=60, deadline=None)
@given(st.lists(publisher_commands, min_size=1, max_size=12), st.lists(st.integers(0, 4000), max_size=6))
def test_a_publisher_s_reads_give_the_same_everything_on_both(tmp_path_factory, commands, points):
    # the first publish goes by its handler and hands the connection its tail
    same_on_both(tmp_path_factory.mktemp("pub"), [wire.pub("t", b"first")], cut(b"".join(commands), points))


def test_a_run_is_taken_from_the_read_and_the_rest_goes_to_the_parse_loop(pair):
    for side in pair:
        side.feed([wire.pub("t", b"first")])  # by the handler
        side.feed([wire.pub("t", b"a") * 3])  # one run: three OKs, one PUBLISH_AT for slot 9
        side.feed([wire.mpub("t", [b"x", b"y"]) + wire.NOP + wire.pub("t", b"z")[:6]])
    native, twin = pair
    assert native.seen() == twin.seen()
    runs = [records.parse_publish_at(r) for s, r in native.host.records if s == SLOT]
    assert [(count, topic) for _, _, _, count, _, topic in runs] == [(3, b"t"), (2, b"t")]
    assert bytes(native.conn.buf) == wire.pub("t", b"z")[:6] and native.conn.pub_counts == {b"t": 6}


def test_a_failed_write_leaves_the_command_to_its_handler(pair):
    """The tail's OSError: nothing taken; the handler publishes it (here: the recording
    acceptor's publish, which fails the same way) and gives nsqd's answer."""
    for side in pair:
        side.feed([wire.pub("t", b"first")])
        os.close(side.fd)
        side.fd = os.open(os.devnull, os.O_RDONLY)  # for close()
        side.host.failure = OSError(5, "Input/output error")
        side.feed([wire.pub("t", b"lost")])
    assert pair[0].seen() == pair[1].seen()
    assert pair[0].conn.closed and b"E_PUB_FAILED PUB failed Input/output error" in pair[0].transport.out


def subscribed(side: Side) -> None:
    """The router's SUB_OK, for a side that sent SUB."""
    side.conn.sub_confirmed()


fin_commands = st.sampled_from([wire.fin(i) for i in IDS] + [
    wire.rdy(3), wire.touch(IDS[1]), wire.req(IDS[2], 0), wire.NOP, b"FIN short\n",
])


@settings(max_examples=60, deadline=None)
@given(st.lists(fin_commands, min_size=1, max_size=16), st.lists(st.integers(0, 600), max_size=6))
def test_a_consumer_s_reads_give_the_same_everything_on_both(tmp_path_factory, commands, points):
    same_on_both(tmp_path_factory.mktemp("fin"), [wire.sub("t", "c") + wire.rdy(8), subscribed],
                 cut(b"".join(commands), points))


def test_a_read_of_fin_lines_becomes_one_fin_record(pair):
    for side in pair:
        side.feed([wire.sub("t", "c") + wire.rdy(8)])
        subscribed(side)
        side.host.records.clear()
        side.feed([b"".join(wire.fin(i) for i in IDS[:5]) + wire.fin(IDS[5])[:7]])
    assert pair[0].seen() == pair[1].seen()
    (slot, rec), = pair[0].host.records
    assert records.parse_fin(rec) == (pair[0].conn.conn, 0, b"".join(IDS[:5]))
    assert bytes(pair[0].conn.buf) == wire.fin(IDS[5])[:7]


def test_a_compressed_stream_is_read_the_same_way(pair):
    """deflate: every read decoded first (the connection's _decode_read), then the same
    paths, and the OKs go out compressed."""
    for side in pair:
        side.feed([wire.pub("t", b"first")])
        side.conn.settings.deflate = True
        deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
        side.conn.encode, side.conn.decode = compression(side.conn.settings)
        data = wire.pub("t", b"a") * 2 + wire.NOP
        packed = deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH)
        side.feed([packed[:5], packed[5:]])
        side.feed([b"\xff\xff garbage"])  # undecodable: closed
    native, twin = pair
    assert native.seen() == twin.seen() and native.conn.closed
    out = zlib.decompressobj(-15).decompress(native.transport.out[len(OK_FRAME):])  # past the plain OK
    assert out == OK_FRAME * 2


def test_reads_that_are_all_run_or_all_fins_never_reach_the_parse_loop(pair):
    """The point of the read path: such a read costs no buffer copy and no process()."""
    for side in pair:
        side.feed([wire.pub("t", b"first")])
        loops: list[int] = []
        process = side.conn.process
        side.conn.process = lambda: (loops.append(len(side.conn.buf)), process())[1]
        side.feed([wire.pub("t", b"a") * 3, wire.mpub("t", [b"b", b"c"])])
        assert loops == [] and not side.conn.buf
        side.feed([wire.pub("t", b"d") + wire.NOP])  # the rest: one look by the parse loop
        assert loops == [len(wire.NOP)]
        loops.clear()
        side.feed([wire.sub("t", "c")])
        side.conn.sub_confirmed()
        loops.clear()
        side.feed([wire.fin(IDS[0]) + wire.fin(IDS[1]), wire.fin(IDS[2])])
        assert loops == []
    assert pair[0].seen() == pair[1].seen()


def test_the_native_read_path_keeps_nothing_per_read(tmp_path):
    """A leak per read would be megabytes after 30,000 of them: runs and FIN reads alike."""
    side = Side(NativeConnection, str(tmp_path / "leak"))
    try:
        os.ftruncate(side.fd, 64 << 20)
        side.tail.attach(side.fd, 64, (64 << 20) - 8, records.publish_at(1, 3, 0, 0, 0, b"t"))
        side.feed([wire.pub("t", b"first")])
        conn = side.conn
        conn._send = conn._send_now = lambda slot, rec: None
        conn.transport.write = lambda data: None  # type: ignore[method-assign]
        read = wire.pub("t", b"x" * 10) * 2 + wire.NOP
        assert memory_kept_by(lambda: conn.data_received(read), times=30_000) < 64 * 1024
        assert conn.pub_counts[b"t"] == 1 + 2 * 31_000
        conn.state = FIN_STATES[0]
        fins = wire.fin(IDS[0]) * 3 + wire.fin(IDS[1])[:5]
        conn.buf.clear()
        conn._fins = bytearray()

        def once() -> None:
            conn.data_received(fins)
            conn.buf.clear()
        assert memory_kept_by(once, times=30_000) < 64 * 1024
    finally:
        side.close()
