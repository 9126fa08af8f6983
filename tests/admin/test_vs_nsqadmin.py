"""Against real NSQ: nsqd 1.3.0 x2 + nsqlookupd, our admin beside Go's nsqadmin on the same
cluster, every read route compared field by field; our actions checked on the real nsqd.

Needs the Go binaries (nsqd, nsqlookupd, nsqadmin) in $NSQ_BIN or on PATH (build them with
../shared/tools/build-nsq.sh); skipped without them (CI has no Go toolchain).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import pytest

from nsqmp.client import Connection
from tests.harness import wait_for


def _bin(name: str) -> str | None:
    where = os.environ.get("NSQ_BIN")
    if where and (Path(where) / name).exists():
        return str(Path(where) / name)
    return shutil.which(name)


GO = {n: _bin(n) for n in ("nsqd", "nsqlookupd", "nsqadmin")}
pytestmark = pytest.mark.skipif(not all(GO.values()), reason="nsqd/nsqlookupd/nsqadmin 1.3.0 not found ($NSQ_BIN)")

# change with every run (clock, ephemeral ports)
VOLATILE = {"connected", "connect_ts", "remote_address", "remote_addresses", "timestamp"}
# Go's E2eProcessingLatencyAggregate.Add leaves "min" = the max of the node added last, and Go
# adds nodes in the order their answers arrive: not comparable between two runs, let alone two admins.
ORDER_DEPENDENT = ".e2e_processing_latency.percentiles"
# Go's TopicStats.Add adopts the first node's channel object (a shared pointer): its aggregated
# channels keep that node's "node"/"hostname"/e2e fields and list only the other nodes, and the
# first node's own row is summed into. Ours aggregates into a fresh object; the sums agree.
TOPIC_CHANNEL_SUMS = ("depth", "memory_depth", "backend_depth", "in_flight_count", "deferred_count",
                      "requeue_count", "timeout_count", "message_count", "client_count", "paused")


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(port: int, method: str, path: str, body: bytes | None = None,
          headers: dict | None = None) -> tuple[int, object]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return status, raw


def diff(go, ours, path: str = "") -> list[str]:
    """Field-by-field differences (lists of objects matched by channel/node/topic name or port:
    Go orders equal hostnames as its answers or map iteration happen to come)."""
    out: list[str] = []
    if isinstance(go, dict) and isinstance(ours, dict):
        for k in sorted(set(go) | set(ours)):
            if k in VOLATILE or (k == "min" and ORDER_DEPENDENT in path):
                continue
            if k not in ours:
                out.append(f"{path}.{k}: only in Go")
            elif k not in go:
                out.append(f"{path}.{k}: only in ours")
            else:
                out += diff(go[k], ours[k], f"{path}.{k}")
    elif isinstance(go, list) and isinstance(ours, list):
        for key in ("channel_name", "node", "topic_name", "topic", "tcp_port"):
            if go and ours and all(isinstance(x, dict) and key in x for x in go + ours) and len(
                    {x[key] for x in go}) == len(go):
                go, ours = sorted(go, key=lambda x: str(x[key])), sorted(ours, key=lambda x: str(x[key]))
                break
        if len(go) != len(ours):
            out.append(f"{path}: {len(go)} items in Go, {len(ours)} in ours")
        for i, (a, b) in enumerate(zip(go, ours)):
            out += diff(a, b, f"{path}[{i}]")
    elif go != ours:
        out.append(f"{path}: Go {go!r} ours {ours!r}")
    return out


@pytest.fixture
def nsq_cluster(tmp_path, make_admin):
    procs: list[subprocess.Popen] = []

    def spawn(*cmd: str, log: str) -> None:
        with open(tmp_path / log, "wb") as out:
            procs.append(subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, start_new_session=True))

    lt, lh = _free(), _free()
    spawn(GO["nsqlookupd"], f"-tcp-address=127.0.0.1:{lt}", f"-http-address=127.0.0.1:{lh}",
          "-broadcast-address=127.0.0.1", log="nsqlookupd.log")
    nsqds = []
    for i in range(2):
        t, h = _free(), _free()
        (tmp_path / f"d{i}").mkdir()
        spawn(GO["nsqd"], f"-tcp-address=127.0.0.1:{t}", f"-http-address=127.0.0.1:{h}",
              "-broadcast-address=127.0.0.1", f"-lookupd-tcp-address=127.0.0.1:{lt}",
              f"-data-path={tmp_path}/d{i}", "-e2e-processing-latency-percentile=0.99,0.5", log=f"nsqd{i}.log")
        nsqds.append((t, h))
    gp = _free()
    spawn(GO["nsqadmin"], f"-http-address=127.0.0.1:{gp}", f"-lookupd-http-address=127.0.0.1:{lh}",
          log="nsqadmin.log")
    for port in (lh, gp, *(h for _, h in nsqds)):
        wait_for(lambda: _ping(port), what=f"Go daemon on {port}")
    ours = make_admin("--lookupd-http-address", f"127.0.0.1:{lh}")
    yield {"lookupd": lh, "nsqds": nsqds, "go": gp, "ours": ours}
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        p.wait(15)


def _ping(port: int) -> bool:
    try:
        return _http(port, "GET", "/ping")[0] == 200
    except OSError:
        return False


def test_same_answers_as_go_nsqadmin_and_actions_on_real_nsqd(nsq_cluster):
    (t0, h0), (_, h1) = nsq_cluster["nsqds"]
    for i, h in enumerate((h0, h1)):
        _http(h, "POST", "/topic/create?topic=orders")
        _http(h, "POST", "/channel/create?topic=orders&channel=billing")
        for _ in range(5 + 2 * i):
            _http(h, "POST", "/pub?topic=orders", b"x")
    _http(h1, "POST", "/channel/create?topic=orders&channel=audit")
    c = Connection("127.0.0.1", t0)
    c.identify(user_agent="<img src=x onerror=alert(1)>", client_id="w1", hostname="w.local")
    c.sub("orders", "billing", rdy=2)
    c.fin(c.read_message().id)
    c.read_message()
    ours = nsq_cluster["ours"]
    wait_for(lambda: len(ours.get("/api/nodes")["nodes"]) == 2, what="both nsqd registered")
    time.sleep(0.3)
    try:
        for path in ("/api/topics", "/api/topics?inactive=true", "/api/topics/orders/billing",
                     "/api/topics/orders/nochan", "/api/nodes", f"/api/nodes/127.0.0.1:{h0}",
                     "/api/nodes/1.2.3.4:5", "/api/counter", "/api/topics/nothere", "/api/topics/orders"):
            gs, go = _http(nsq_cluster["go"], "GET", path)
            status, mine = _http(ours.port, "GET", path)
            assert status == gs, path
            if isinstance(mine, dict):
                mine.pop("errors", None)
            if path == "/api/topics/orders":  # see TOPIC_CHANNEL_SUMS
                gch, och = go.pop("channels"), mine.pop("channels")
                for d in (go, mine):
                    for n in d["nodes"]:
                        n.pop("channels")
                assert {c["channel_name"]: [c[k] for k in TOPIC_CHANNEL_SUMS] for c in gch} == {
                    c["channel_name"]: [c[k] for k in TOPIC_CHANNEL_SUMS] for c in och}
            assert diff(go, mine) == [], path
    finally:
        c.close()

    for opt in ("log_level", "nsqlookupd_http_addresses", "nsqd_http_addresses", "statsd_interval",
                "http_client_request_timeout", "base_path", "acl_http_header", "admin_users", "graphite_url",
                "allow_config_from_cidr", "bogus"):
        assert _http(ours.port, "GET", f"/config/{opt}") == _http(nsq_cluster["go"], "GET", f"/config/{opt}"), opt

    headers = {"X-NSQMP-CSRF-Token": ours.token(), "Content-Type": "application/json"}
    assert _http(ours.port, "POST", "/api/topics/orders/billing", b'{"action": "pause"}', headers) == (
        200, {"message": ""})
    for h in (h0, h1):
        chans = _http(h, "GET", "/stats?format=json&topic=orders")[1]["topics"][0]["channels"]
        assert [c["paused"] for c in chans if c["channel_name"] == "billing"] == [True]
    assert _http(ours.port, "DELETE", "/api/topics/orders", None, headers)[0] == 200
    assert all(_http(h, "GET", "/stats?format=json&topic=orders")[1]["topics"] in (None, []) for h in (h0, h1))
