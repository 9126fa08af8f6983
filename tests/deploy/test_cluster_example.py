"""deploy/cluster/run.sh: one command starts two lookupds and three brokers on 127.0.0.1;
SIGTERM stops every process it started (and the brokers stop their own children)."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.harness import wait_for

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "deploy" / "cluster" / "run.sh"
OFFSETS = (0, 1, 10, 11, 100, 101, 110, 111, 200, 201)  # every port run.sh takes from BASE_PORT


def _free_block() -> int:
    """A BASE_PORT whose ten ports are free now (below the kernel's ephemeral range, where
    the other tests' port-0 listeners never land)."""
    for base in range(21150, 31150, 500):
        socks = []
        try:
            for off in OFFSETS:
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + off))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    pytest.fail("no free block of ports for the cluster example")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
            except (FileNotFoundError, IndexError, ValueError):
                pass
    return out


def _post(port: int, path: str, body: bytes) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _get(port: int, path: str) -> dict:
    """A lookupd's JSON answer, or {} while it answers anything but 200 (not registered yet)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        return orjson.loads(body) if resp.status == 200 else {}
    finally:
        conn.close()


def test_run_sh_starts_the_cluster_and_stops_all_of_it(tmp_path):
    base = _free_block()
    out_path = tmp_path / "run.out"
    env = {**os.environ, "BASE_PORT": str(base), "CLUSTER_DIR": str(tmp_path / "cluster"),
           "NSQMP": str(Path(sys.executable).parent / "nsqmp")}
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(["bash", str(RUN)], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        wait_for(lambda: "nsqmp cluster ready" in out_path.read_text() or proc.poll() is not None,
                 timeout=90, what="the cluster")
        text = out_path.read_text()
        assert proc.poll() is None, text
        pids = [int(p) for p in re.search(r"^pids: ([\d ]+)$", text, re.MULTILINE).group(1).split()]
        assert len(pids) == 5
        brokers = [base, base + 100, base + 200]
        for lookupd_http in (base + 11, base + 111):
            wait_for(lambda port=lookupd_http: sorted(p["tcp_port"] for p in _get(port, "/nodes").get("producers", []))
                     == brokers, what="three producers on each lookupd")
        # a publish to one broker is found through either lookupd
        assert _post(base + 201, "/pub?topic=tried", b"hello") == (200, b"OK")
        for lookupd_http in (base + 11, base + 111):
            wait_for(lambda port=lookupd_http: [p["tcp_port"] for p in _get(port, "/lookup?topic=tried").get("producers", [])]
                     == [base + 200], what="the topic registered")
        family = pids + [c for pid in pids for c in _children(pid)]
        assert len(family) > 5  # the brokers' acceptors, routers and timers too

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, out_path.read_text()
        wait_for(lambda: not any(_alive(p) for p in family), 10, interval=0.1,
                 what=lambda: f"the cluster's processes to exit: {out_path.read_text()}")
        assert not [p for p in family if _alive(p)], out_path.read_text()
        assert "stopped" in out_path.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
