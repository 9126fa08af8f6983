"""The `make bench` failure (issue 21): a writer met a heartbeat where it waited for an
OK and the suite ended in a traceback. A heartbeat comes every interval however busy the
connection (nsqd's messagePump does the same), so the writer answers it with NOP and goes
on waiting; a workload that does fail is reported by name with its error, and the suite
goes on with the next."""
from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import orjson
import pytest

from nsqmp.bench import floor, tool
from nsqmp.bench.tool import BenchFailed, run
from nsqmp.client import Connection, wire
from tests.bench.conftest import bench_client


@pytest.mark.parametrize("impl", ["native", "twin"])
def test_publish_loop_goes_on_across_heartbeats(broker, impl):
    """A publisher with 1 s heartbeats publishes for 2.5 s: the heartbeats that come
    between an MPUB and its OK are answered (NOP) and skipped, every MPUB is counted."""
    with Connection.connect(broker.tcp_address) as c:
        c.send(wire.identify({"heartbeat_interval": 1000}))
        c.expect_ok()
        cmd = wire.mpub("hb_bench", [b"m" * 100] * 20)
        c.sock.settimeout(None)  # blocking, as the writer has it
        until = time.monotonic() + 2.5
        if impl == "native":
            oks, error, slowest = bench_client("publish_loop").publish_loop(c.sock.fileno(), cmd, until)
        else:
            oks, error, slowest = tool.py_publish_loop(c.sock, cmd, until)
    assert error is None
    assert oks > 0 and 0 < slowest < 2.5
    topic = broker.stats(topic="hb_bench")["topics"][0]
    assert topic["message_count"] == oks * 20


def test_a_writer_reports_its_slowest_answer(broker):
    """The longest wait for an OK, over every connection: where a broker stall would show."""
    wrote = run("writer", SimpleNamespace(nsqd_tcp_address=broker.tcp_address, topic="slow_t", runfor=0.5,
                                          size=100, conns=2, batch_size=10))
    assert wrote["messages"] > 0
    assert 0 < wrote["slowest_answer_ms"] < 5000


def test_a_failed_writer_raises_with_its_error(make_broker):
    """Messages over --max-msg-size: the writer's error frame comes back as BenchFailed."""
    b = make_broker("--max-msg-size", "100")
    with pytest.raises(BenchFailed, match="E_BAD_MESSAGE"):
        run("writer", SimpleNamespace(nsqd_tcp_address=b.tcp_address, topic="too_big", runfor=0.5, size=200,
                                      conns=2, batch_size=10))


def test_the_suite_names_a_failed_workload_and_goes_on(tmp_path):
    """Every broker refuses the 200-byte messages: the broker workload fails and is named
    with its error in the table, the next workload (the answer-only floor) still runs,
    no traceback, exit code 1."""
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "nsqmp.bench.suite", "--reps", "1", "--runfor", "0.5", "--out", str(out),
         "--only", "writer MPUB 200, 1 conn", "--only", "round-trip floor", "--broker-args", "--max-msg-size 100"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "rep 1/1 writer MPUB 200, 1 conn: FAILED: BenchFailed: 1 of 1 writer connections failed: " \
           "publish failed: b'E_BAD_MESSAGE" in proc.stdout
    assert "| writer MPUB 200, 1 conn | failed (see below) |" in proc.stdout
    assert "(after 0 OKs; slowest answer 0.0 ms)" in proc.stdout
    assert "- rep 1, writer MPUB 200, 1 conn: BenchFailed:" in proc.stdout
    rates, _, cpu = proc.stdout.partition("CPU per message moved")
    floor_rows = [line for line in rates.splitlines() if line.startswith("| writer PUB, 1 conn, answer-only")]
    assert len(floor_rows) == 2 and not any("failed" in line for line in floor_rows)  # blocking, polling
    assert f"floor (C, polling {floor.POLL_US} us server)" in floor_rows[1]
    # the CPU table has the floor's rows, and none for the failed workload
    cpu_rows = [line for line in cpu.splitlines() if line.startswith("| writer")]
    assert any(line.startswith("| writer PUB, 1 conn, answer-only") for line in cpu_rows), cpu
    assert not any(line.startswith("| writer MPUB 200, 1 conn |") for line in cpu_rows), cpu
    (raw,) = out.glob("*.json")
    figures = orjson.loads(raw.read_bytes())
    assert figures["writer MPUB 200, 1 conn"] == []
    assert figures["failed"][0][:2] == [1, "writer MPUB 200, 1 conn"]
    assert figures["writer PUB, 1 conn, answer-only server (the round-trip floor, no broker)"][0]["msgs_per_sec"] > 0


def test_bench_help_lists_every_benchmark_with_defaults():
    """`nsqmp bench --help`: one line per benchmark; a benchmark's --help shows its defaults."""
    from nsqmp.bench.commands import BENCHMARKS

    listing = subprocess.run([sys.executable, "-m", "nsqmp", "bench", "--help"], capture_output=True,
                             text=True, timeout=60)
    assert listing.returncode == 0
    for name, (_, line) in BENCHMARKS.items():
        assert f"  {name}" in listing.stdout and line in listing.stdout
    writer = subprocess.run([sys.executable, "-m", "nsqmp", "bench", "writer", "--help"], capture_output=True,
                            text=True, timeout=60)
    assert "(default: 127.0.0.1:4150)" in writer.stdout and "(default: 200)" in writer.stdout


def test_a_run_the_hypervisor_stole_from_is_run_again():
    """_unstolen: again while steal is over STEAL_MAX, at most `tries` runs; the runs set
    aside are kept; a clean or failed run ends it; the last counts if none was clean."""
    from nsqmp.bench.suite import STEAL_MAX, _unstolen

    def runs(*steals):
        seq = iter([{"msgs_per_sec": i, "sched": {"steal": st}} for i, st in enumerate(steals)])
        return lambda: next(seq)

    said: list[dict] = []
    r = _unstolen(runs(0.3, STEAL_MAX / 2, 0.0), said.append, 3)
    assert r["msgs_per_sec"] == 1 and [x["msgs_per_sec"] for x in r["stolen_runs"]] == [0]
    assert [x["again"] for x in said] == [True]
    r = _unstolen(runs(0.3, 0.2, 0.1, 0.0), said.append, 3)
    assert r["msgs_per_sec"] == 2 and len(r["stolen_runs"]) == 2  # no clean one in 3: the last
    assert _unstolen(runs(0.0), said.append, 3) == {"msgs_per_sec": 0, "sched": {"steal": 0.0}}
    assert "stolen_runs" not in _unstolen(runs(0.5), said.append, 1)  # tries 1: never again
    failed = iter([{"error": "BenchFailed: x"}])
    assert _unstolen(lambda: next(failed), said.append, 3) == {"error": "BenchFailed: x"}
