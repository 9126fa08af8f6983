"""Full disk: publishing fails cleanly, /ping says NOK, nothing accepted is lost, and the
broker recovers by itself when space returns. On a small tmpfs the test mounts itself."""
from __future__ import annotations

import os

import pytest

from nsqmp.client import Connection, NSQError
from tests.harness import Broker, wait_for


def test_full_disk(small_fs, tmp_path):
    small_fs = small_fs("16m")
    filler = small_fs / "filler"
    b = Broker(small_fs / "data", "--max-bytes-per-file", str(1 << 20), "--sync-every", "1",
               log_path=tmp_path / "broker.log").start()
    try:
        with Connection.connect(b.tcp_address) as c:
            c.identify()
            c.sub("full", "ch")
        # leave ~2 MiB free, then publish until the disk says no
        st = os.statvfs(small_fs)
        with open(filler, "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - (2 << 20)))
        accepted: list[bytes] = []
        error = None
        conn = Connection.connect(b.tcp_address)
        for i in range(10_000):
            try:
                conn.mpub("full", [b"%06d-%d" % (i, k) + b"x" * 4000 for k in range(8)])
                accepted += [b"%06d-%d" % (i, k) + b"x" * 4000 for k in range(8)]
            except NSQError as exc:
                error = str(exc)
                break
        conn.close()
        assert error is not None and error.startswith("E_MPUB_FAILED"), error
        with pytest.raises(NSQError, match="^E_PUB_FAILED"):
            with Connection.connect(b.tcp_address) as p:
                p.pub("full", b"y" * 300_000)
        for _ in range(8):  # new connections land on either acceptor: health is broker-wide
            status, body, _ = b.http("GET", "/ping")
            assert status == 500 and body.startswith(b"NOK - "), body
        status, body, _ = b.http("POST", "/pub?topic=full", b"z" * 300_000)
        assert status == 500, body
        # nothing accepted is lost: every OK'd message is delivered
        got = set()
        with Connection.connect(b.tcp_address, timeout=20) as c:
            c.identify()
            c.sub("full", "ch", rdy=500)
            while len(got) < len(set(accepted)):
                m = c.read_message()
                got.add(m.body)
                c.fin(m.id)
        assert got == set(accepted)
        # space returns: publishing works again by itself, and /ping is OK again
        os.unlink(filler)
        with Connection.connect(b.tcp_address) as p:
            p.pub("full", b"after")
        wait_for(lambda: b.http("GET", "/ping")[0] == 200, what="/ping OK again")
        print(f"\nfull disk: {len(accepted)} messages accepted before ENOSPC, all delivered")
    finally:
        assert b.stop() == 0
