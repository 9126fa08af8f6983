"""--acceptor-steering: new TCP connections packed onto the first ready acceptor that is
not busy (nsqmp/supervisor/steering.py), or spread by the kernel's hash (spread)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from nsqmp.client.sync import Connection
from nsqmp.reuseport import PACK_MAX_CONNECTIONS, STORM_CONNECTIONS, STORM_SECONDS, attach_index
from nsqmp.supervisor.steering import MIN_INTERVAL, Steering
from tests.harness import wait_for


def _consumer(broker, topic: str, channel: str) -> Connection:
    c = Connection.connect(broker.tcp_address)
    c.identify()
    c.sub(topic, channel)
    return c


def _acceptors_of(broker, conns: list[Connection], topic: str, channel: str) -> list[int]:
    """The acceptor of each connection, from /stats (nsqmp_acceptor), once all are listed."""
    ports = [c.sock.getsockname()[1] for c in conns]

    def listed():
        found = {}
        for t in broker.stats(topic=topic)["topics"]:
            for ch in t["channels"]:
                for client in ch["clients"] if ch["channel_name"] == channel else []:
                    found[client["remote_address"]] = client["nsqmp_acceptor"]
        got = [found.get(f"127.0.0.1:{p}") for p in ports]
        return got if None not in got else None

    return wait_for(listed, timeout=10, what="every consumer in /stats")


def test_pack_puts_new_connections_on_the_first_acceptor(make_broker):
    broker = make_broker("--acceptors", "2")
    conns = [_consumer(broker, "steer", "ch") for _ in range(8)]
    try:
        assert _acceptors_of(broker, conns, "steer", "ch") == [0] * 8
    finally:
        for c in conns:
            c.close()


def test_spread_leaves_them_to_the_kernels_hash(make_broker):
    broker = make_broker("--acceptors", "2", "--acceptor-steering", "spread")
    conns = [_consumer(broker, "steer", "ch") for _ in range(16)]
    try:
        # 16 hashed connections all on one of two acceptors: 1 chance in 32,768
        assert set(_acceptors_of(broker, conns, "steer", "ch")) == {0, 1}
    finally:
        for c in conns:
            c.close()


def test_a_stuck_acceptor_gets_no_new_connections_until_it_beats_again(make_broker):
    broker = make_broker("--acceptors", "2")
    stuck = broker.children()["nsqmp acceptor 0"]
    os.kill(stuck, signal.SIGSTOP)
    try:
        time.sleep(1.6)  # its heartbeat is over a second old by the supervisor's next tick
        c = Connection.connect(broker.tcp_address, timeout=5)
        c.identify()  # answered: acceptor 1 took it (acceptor 0 answers nothing while stopped)
        c.sub("steer", "ch")
    finally:
        os.kill(stuck, signal.SIGCONT)
    try:
        assert _acceptors_of(broker, [c], "steer", "ch") == [1]

        def back_on_zero():  # beating again: new connections go to acceptor 0 again
            d = _consumer(broker, "steer", "ch")
            on = _acceptors_of(broker, [d], "steer", "ch")[0]
            d.close()
            return on == 0 or None

        wait_for(back_on_zero, timeout=10, interval=0.3, what="a new connection on acceptor 0")
    finally:
        c.close()


def test_an_acceptor_full_of_connections_passes_new_ones_on_at_once(make_broker):
    """PACK_MAX_CONNECTIONS + 16 consumers connecting one after another, slower than a
    storm (STORM_CONNECTIONS within STORM_SECONDS). The acceptor that took its
    PACK_MAX_CONNECTIONS-th hands the next to the kernel's hash itself, and the
    supervisor, once it looks, to the next acceptor: acceptor 1 gets some of them,
    acceptor 0 not all."""
    broker = make_broker("--acceptors", "2")
    conns = []
    pace = 2 * STORM_SECONDS / STORM_CONNECTIONS  # half a storm's rate
    try:
        for _ in range(PACK_MAX_CONNECTIONS + 16):
            started = time.monotonic()
            conns.append(_consumer(broker, "storm", "ch"))
            time.sleep(max(0.0, pace - (time.monotonic() - started)))
        where = _acceptors_of(broker, conns, "storm", "ch")
        assert where[:PACK_MAX_CONNECTIONS] == [0] * PACK_MAX_CONNECTIONS
        assert 1 in where[PACK_MAX_CONNECTIONS:], where[PACK_MAX_CONNECTIONS:]
    finally:
        for c in conns:
            c.close()


def test_a_burst_of_connections_lands_on_one_acceptor_only_so_deep(make_broker):
    """A burst (every consumer of a deploy starting at once): the first acceptor takes
    STORM_CONNECTIONS of it, then hands the rest to the kernel's hash itself, and the
    supervisor, once it looks, to the next acceptor. Afterwards new connections are
    packed onto the first again."""
    broker = make_broker("--acceptors", "2")
    conns = []
    try:
        # back to back, each answered before the next (a few ms each): a burst, but each
        # one accepted before the next arrives (in a burst faster than the acceptor takes
        # connections, the kernel queues them all to its socket before it can react)
        for _ in range(3 * STORM_CONNECTIONS):
            conns.append(_consumer(broker, "burst", "ch"))
        where = _acceptors_of(broker, conns, "burst", "ch")
        assert where[:STORM_CONNECTIONS] == [0] * STORM_CONNECTIONS, where
        assert where.count(1) > 0, where
        # the storm is over: the supervisor's next looks pack new connections again
        time.sleep(1.0)
        late = [_consumer(broker, "burst", "late") for _ in range(3)]
        conns += late
        assert _acceptors_of(broker, late, "burst", "late") == [0, 0, 0]
    finally:
        for c in conns:
            c.close()


def _group(n: int) -> list[socket.socket]:
    socks = []
    port = 0
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", port))
        s.listen(16)
        s.setblocking(False)
        port = s.getsockname()[1]
        socks.append(s)
    return socks


def _taker(socks: list[socket.socket]) -> int:
    """Connect once; the index of the listening socket the kernel gave it to."""
    c = socket.create_connection(socks[0].getsockname(), timeout=5)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for i, s in enumerate(socks):
                try:
                    conn, _ = s.accept()
                except BlockingIOError:
                    continue
                conn.close()
                return i
            time.sleep(0.005)
        raise AssertionError("no listening socket got the connection")
    finally:
        c.close()


def test_a_busy_acceptor_passes_new_connections_to_the_next_then_to_the_hash():
    """Real sockets in one SO_REUSEPORT group and real processes standing in for the
    acceptors: one spinning on a core, one asleep."""
    socks = _group(2)
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        steering = Steering(socks[0], 2)
        steering.start()
        assert [_taker(socks) for _ in range(6)] == [0] * 6

        def steered(pids, want, conns=None):
            time.sleep(MIN_INTERVAL + 0.05)  # shares are read over at least MIN_INTERVAL
            steering.update(pids, time.monotonic(), conns)
            return steering.target == want or None

        # the spinner uses a whole core (if the machine gives it one; a few tries)
        wait_for(lambda: steered([spin.pid, idle.pid], 1), timeout=20, what="the busy first acceptor passed over")
        assert [_taker(socks) for _ in range(6)] == [1] * 6
        # every acceptor busy: past the end of the group, the kernel's hash
        wait_for(lambda: steered([spin.pid, spin.pid], 2), timeout=20, what="the hash once all are busy")
        assert {_taker(socks) for _ in range(40)} == {0, 1}
        assert steered([idle.pid, spin.pid], 0)
        # a missing acceptor (0: not ready) is passed over, and a full one
        assert steered([0, idle.pid], 1)
        assert steered([idle.pid, idle.pid], 1, [PACK_MAX_CONNECTIONS, 3])
        assert steered([idle.pid, idle.pid], 0, [PACK_MAX_CONNECTIONS - 1, 3])
        # and one in a storm (here 16 new connections in a quarter second), for that reading
        assert steered([idle.pid, idle.pid], 0, [2, 3])
        assert steered([idle.pid, idle.pid], 1, [2 + 2 * STORM_CONNECTIONS, 3])
        assert steered([idle.pid, idle.pid], 0, [2 + 2 * STORM_CONNECTIONS, 3])
        # the hash attached by someone else (an acceptor in a storm) lasts until the next reading
        attach_index(socks[0], 2)
        assert steered([idle.pid, idle.pid], 0, [2 + 2 * STORM_CONNECTIONS, 3])
        assert [_taker(socks) for _ in range(6)] == [0] * 6
    finally:
        for p in (spin, idle):
            p.kill()
            p.wait()
        for s in socks:
            s.close()


@pytest.mark.parametrize("index", [0, 1])
def test_the_program_picks_the_socket_by_its_place_in_the_group(index):
    socks = _group(2)
    try:
        Steering(socks[0], 2)._attach(index)
        assert {_taker(socks) for _ in range(8)} == {index}
    finally:
        for s in socks:
            s.close()
