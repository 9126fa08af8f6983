"""The busy poll's spin on the last publisher's socket (native/spin.c,
nsqmp/acceptor/hotspin.py): spin_read on real sockets and a real epoll set, the loop's
epoll fd found in a real uvloop, and a broker whose one acceptor spins on a publisher
while it serves a consumer and TLS on other connections."""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import select
import socket
import threading
import time

import uvloop

from nsqmp._native import spin_read
from nsqmp.acceptor.hotspin import HotSpin, loop_epoll_fd
from nsqmp.client import Connection, wire

MS = 1_000_000


def _send_later(sock: socket.socket, data: bytes, delay: float = 0.05) -> mp.Process:
    """data on sock from another process after delay: spin_read holds the GIL (the
    acceptor's loop thread is its only caller), so no thread of ours could send it."""
    def send() -> None:
        time.sleep(delay)
        sock.sendall(data)

    p = mp.get_context("fork").Process(target=send)
    p.start()
    return p


def _pair() -> tuple[socket.socket, socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(listener.getsockname())
    b, _ = listener.accept()
    listener.close()
    b.setblocking(False)
    return a, b


def test_it_returns_what_the_peer_sends_while_it_spins():
    a, b = _pair()
    with a, b:
        sender = _send_later(a, b"NOP\n")
        t0 = time.monotonic()
        assert spin_read(b.fileno(), -1, 5_000 * MS) == b"NOP\n"
        assert time.monotonic() - t0 < 4.0  # it came back with the bytes, not at the end
        sender.join(10)


def test_nothing_within_the_time_gives_none_and_takes_nothing():
    a, b = _pair()
    with a, b:
        t0 = time.monotonic()
        assert spin_read(b.fileno(), -1, 20 * MS) is None
        assert time.monotonic() - t0 >= 0.02
        a.sendall(b"x")
        assert spin_read(b.fileno(), -1, 5_000 * MS) == b"x"


def test_end_of_stream_is_left_for_the_loop_to_see():
    a, b = _pair()
    with b:
        a.sendall(b"last")
        a.close()
        assert spin_read(b.fileno(), -1, 1_000 * MS) == b"last"
        assert spin_read(b.fileno(), -1, 1_000 * MS) is None
        assert b.recv(10) == b""  # still there for whoever reads next


def test_another_ready_fd_of_the_loop_ends_the_spin_at_once():
    a, b = _pair()
    r, w = os.pipe()
    ep = select.epoll()
    try:
        ep.register(b.fileno(), select.EPOLLIN)  # the hot socket is in the set too
        ep.register(r, select.EPOLLIN)
        # the hot socket's own readiness does not end it: its bytes are read
        sender = _send_later(a, b"one")
        assert spin_read(b.fileno(), ep.fileno(), 5_000 * MS) == b"one"
        sender.join(10)
        os.write(w, b"!")
        t0 = time.monotonic()
        assert spin_read(b.fileno(), ep.fileno(), 5_000 * MS) is None
        assert time.monotonic() - t0 < 4.0
        # level-triggered: the loop still sees the pipe
        assert ep.poll(0) == [(r, select.EPOLLIN)]
    finally:
        ep.close()
        os.close(r)
        os.close(w)
        a.close()
        b.close()


def test_a_publish_whose_body_comes_in_pieces_is_read_whole():
    a, b = _pair()
    with a, b:
        a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = wire.mpub("t", [b"x" * 300] * 40)  # 12 KB
        a.sendall(data[:4096])
        sender = _send_later(a, data[4096:], delay=0.01)
        assert spin_read(b.fileno(), -1, 5_000 * MS) == data
        sender.join(10)
        # its size cut in two, its line with a \r: read whole too
        pub = wire.pub("t", b"y" * 5000).replace(b"\n", b"\r\n", 1)
        cut = pub.index(b"\n") + 3
        a.sendall(pub[:cut])
        sender = _send_later(a, pub[cut:], delay=0.01)
        assert spin_read(b.fileno(), -1, 5_000 * MS) == pub
        sender.join(10)
        # not a publish, or one that has all come: what there is, at once
        a.sendall(b"NOP\n" + data[:100])
        assert spin_read(b.fileno(), -1, 5_000 * MS) == b"NOP\n" + data[:100]
        # a body that does not all come within the time: what came, for the parser to wait on
        a.sendall(data[:4096])
        assert spin_read(b.fileno(), -1, 20 * MS) == data[:4096]


def test_the_loops_epoll_fd_is_found_in_a_uvloop():
    async def main() -> str:
        fd = loop_epoll_fd()
        assert fd >= 0
        return os.readlink(f"/proc/self/fd/{fd}")

    assert uvloop.run(main()) == "anon_inode:[eventpoll]"


def test_a_second_epoll_set_makes_it_give_up():
    ep = select.epoll()
    try:
        async def main() -> int:
            return loop_epoll_fd()

        assert uvloop.run(main()) == -1
    finally:
        ep.close()


def test_one_acceptor_spinning_on_a_publisher_serves_a_consumer_meanwhile(make_broker):
    broker = make_broker("--acceptors", "1")
    n = 2000
    got: list[bytes] = []
    with Connection.connect(broker.tcp_address) as pub, Connection.connect(broker.tcp_address) as sub:
        pub.pub("hs", b"first")
        sub.sub("hs", "ch", rdy=n + 1)
        pub.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        done = threading.Event()

        def consume() -> None:
            while len(got) < n + 1:
                m = sub.read_message()
                got.append(m.body)
                sub.fin(m.id)
            done.set()

        t = threading.Thread(target=consume, daemon=True)
        t.start()
        for i in range(n):  # one at a time: each PUB waits for its OK
            pub.pub("hs", b"%05d" % i)
        assert done.wait(60), f"the consumer got {len(got)} of {n + 1}"
    assert got == [b"first"] + [b"%05d" % i for i in range(n)]


class _Conn:
    """The attributes HotSpin reads of a V2Connection, on a real uvloop transport."""

    class _Flow:
        reading = True

    def __init__(self) -> None:
        self.closed = False
        self.tls = False
        self.waiting_for = ""
        self.flow = self._Flow()
        self.transport = None
        self.got: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got.append(data)

    def connection_lost(self, exc) -> None:
        self.closed = True

    def eof_received(self) -> None:
        pass


def test_it_reads_only_for_the_connection_its_transport_reads_for():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        conn = _Conn()
        server = await loop.create_server(lambda: conn, "127.0.0.1", 0)
        client = socket.create_connection(server.sockets[0].getsockname())
        try:
            await asyncio.sleep(0.05)
            errors: list = []
            spin = HotSpin(loop_epoll_fd(), lambda c, e: errors.append(e))
            assert spin.loop_fd >= 0
            spin.published(conn)
            client.sendall(b"a")
            await asyncio.sleep(0.02)  # uvloop reads it itself
            assert conn.got == [b"a"]
            # paused: the spin leaves the bytes where they are; resumed, uvloop reads them
            conn.transport.pause_reading()
            client.sendall(b"b")
            await asyncio.sleep(0.02)
            spin(5 * MS)
            assert conn.got == [b"a"] and spin.reads == 0
            conn.transport.resume_reading()
            await asyncio.sleep(0.02)
            assert conn.got == [b"a", b"b"]
            # a transport reading for another protocol (a TLS handshake's): not ours to read
            other = _Conn()
            conn.transport.set_protocol(other)
            client.sendall(b"c")  # in the socket's buffer before the loop turns again
            spin(5 * MS)
            await asyncio.sleep(0.02)
            assert conn.got == [b"a", b"b"] and other.got == [b"c"]
            conn.transport.set_protocol(conn)
            # our own, reading: the spin hands the bytes to data_received
            client.sendall(b"d")  # in our socket's buffer before the loop turns again
            spin(2_000 * MS)
            assert conn.got[-1] == b"d" and spin.reads == 1 and not errors
            assert spin.fd >= 0  # found by that spin, the first that read
            # closing: no spin (its fd may be reused); the paused and the lent one spun neither
            conn.transport.close()
            spin(5 * MS)
            assert spin.spins == 1
        finally:
            client.close()
            server.close()
            await server.wait_closed()

    uvloop.run(main())
