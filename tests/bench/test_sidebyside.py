"""`make bench` side by side (issue 24): brokers alternated run by run, one table with a
column per broker, the ratios and the floor.

CI has no nsqd, so the "nsqd" here is nsqmp's own nsqd-compatible entry point
(`nsqmp-nsqd`, which takes nsqd's Go flags) driven by nsqmp's bench client; one test runs
nsq 1.3.0's real nsqd, bench_writer and bench_reader when $NSQ_BIN has them."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from nsqmp.bench import floor
from nsqmp.bench.nsqtools import go_duration, parse_result
from nsqmp.bench.proc import autogroup
from nsqmp.bench.sidebyside import Baseline, Target
from nsqmp.client import wire

ROOT = Path(__file__).resolve().parents[2]
NSQMP_NSQD = shutil.which("nsqmp-nsqd", path=str(Path(sys.executable).parent))
FLOOR_PUB1 = "writer PUB, 1 conn, answer-only server (the round-trip floor, no broker)"


def _nsq_bin(name: str) -> str | None:
    where = os.environ.get("NSQ_BIN")
    path = Path(where) / name if where else None
    return str(path) if path and path.exists() else None


def suite(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Run `python -m nsqmp.bench.suite` with args; its output and its JSON."""
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "nsqmp.bench.suite", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    (raw,) = out.glob("*.json")
    return proc, orjson.loads(raw.read_bytes())


def row(stdout: str, name: str, table: str = "rates") -> list[str]:
    """The cells of the row for name in the rates table, or (table="cpu") in the CPU table,
    (table="held") in the table of what held the runs back, or (table="cores") in the
    table of the cores each process used."""
    rates, _, rest = stdout.partition("CPU per message moved")
    cpu, _, rest = rest.partition("What held the runs back")
    held, _, cores = rest.partition("Cores used over the run")
    text = {"rates": rates, "cpu": cpu, "held": held, "cores": cores}[table]
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"| {name} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def held_cell(cell: str) -> None:
    """`idle N%[, steal N%]; <thread> ran N%, waited N%`, the shares between 0 and 100."""
    machine, _, thread = cell.partition("; ")
    idle, _, steal = machine.partition(", steal ")
    assert idle.startswith("idle ") and 0 <= int(idle[5:].rstrip("%")) <= 100, cell
    assert not steal or 0 <= int(steal.rstrip("%")) <= 100, cell
    name, _, shares = thread.rpartition(" ran ")
    ran, _, waited = shares.partition(", waited ")
    assert name and 0 <= int(ran.rstrip("%")) <= 105 and 0 <= int(waited.rstrip("%")) <= 100, cell


@pytest.mark.slow
@pytest.mark.skipif(NSQMP_NSQD is None, reason="the nsqmp-nsqd entry point is not installed beside python")
def test_side_by_side_alternates_and_prints_both_columns(tmp_path):
    """nsqmp-nsqd as the "nsqd", 2 reps: both columns, the ratio, every run, the reader's
    memory rows, the floor row and the distances; nsqd first on rep 1, nsqmp on rep 2."""
    proc, raw = suite(tmp_path, "--reps", "2", "--runfor", "1", "--nsqd", NSQMP_NSQD,
                      "--only", "writer PUB, 1 conn", "--only", "reader, 2 conns")
    assert proc.returncode == 0, proc.stdout
    assert "| workload | nsqd | nsqmp | nsqmp / nsqd | runs |" in proc.stdout
    assert "--mem-queue-size=10000 --sync-every=2500" in proc.stdout  # nsqd's flags, said
    for name in ("writer PUB, 1 conn", "reader, 2 conns, draining",
                 "broker memory after the reader, PSS (MiB, all processes)"):
        cells = row(proc.stdout, name)
        ratio, rounds = cells[3].split(" ")  # the medians' ratio, the rounds' range
        assert ratio.endswith("x") and float(ratio[:-1]) > 0 and rounds.startswith("("), cells
        assert cells[4].startswith("nsqd ") and "; nsqmp " in cells[4]
    floor_cells = row(proc.stdout, FLOOR_PUB1)
    assert floor_cells[1] == floor_cells[2] and "floor (C server)" in floor_cells[4]
    distances = [ln for ln in proc.stdout.splitlines() if ln.startswith("- writer PUB, 1 conn: the answer-only")]
    assert [d.split("floor (")[1].split(")")[0] for d in distances] == ["blocking", f"polling {floor.POLL_US} us"]
    for distance in distances:  # their fractions of each floor
        assert "of it: nsqd " in distance and ", nsqmp " in distance
    for name in ("writer PUB, 1 conn", "reader, 2 conns, draining"):  # broker / client CPU per message
        for cell in row(proc.stdout, name, "cpu")[1:]:
            broker_us, slash, client_us, allowed = cell.split(" ")
            assert float(broker_us) > 0 and slash == "/" and float(client_us) >= 0 and allowed.startswith("("), cell
        for cell in row(proc.stdout, name, "held")[1:]:  # what held the runs back
            held_cell(cell)
        for label, cell in zip(("nsqd", "nsqmp"), row(proc.stdout, name, "cores")[1:]):
            procs, _, tools = cell.partition("; tools ")  # each process's cores, the tools'
            assert 0 < float(tools) <= os.cpu_count() + 0.5, cell
            shares = dict(p.rsplit(" ", 1) for p in procs.split(", "))
            assert all(0 <= float(c) <= 1.05 for c in shares.values()), cell
            # nsqmp-nsqd is nsqmp too: its acceptor took the connections
            assert "acceptor 0" in shares, (label, cell)
    pub = [(r["rep"], r["position"], r["target"]) for r in raw["runs"] if r["workload"] == "writer PUB, 1 conn"]
    assert pub == [(1, 0, "nsqd"), (1, 1, "nsqmp"), (2, 0, "nsqmp"), (2, 1, "nsqd")]
    readers = [r for r in raw["runs"] if r["workload"] == "reader, 2 conns, draining"]
    assert all(r["backlog"] == 500_000 and r["msgs_per_sec"] > 0 for r in readers)
    assert raw["meta"]["targets"] == ["nsqd", "nsqmp"] and raw["summary"]["writer PUB, 1 conn"]["nsqd"] > 0
    on = autogroup()  # the header says when the scheduler halves the machine
    assert raw["meta"]["autogroup"] is on
    assert ("The kernel's autogroup is on" in proc.stdout) == bool(on), proc.stdout[:2000]


def test_every_broker_runs_in_a_session_of_its_own(tmp_path):
    """What the header's autogroup sentence rests on: a broker started for a run (nsqmp
    here; nsqd and a baseline start the same way) leads a session that is not ours."""
    broker = Target("nsqmp").start(tmp_path, ())
    try:
        assert os.getsid(broker.proc.pid) == broker.proc.pid != os.getsid(0)
    finally:
        broker.stop()


def test_without_nsqd_it_says_so_and_a_baseline_is_a_third_broker(tmp_path):
    """No --nsqd: nsqmp's figures and a plain sentence that no side-by-side ran, no ratio to
    nsqd; --baseline (here this very checkout) adds a column and nsqmp / baseline."""
    proc, raw = suite(tmp_path, "--reps", "2", "--runfor", "0.5", "--baseline", str(ROOT),
                      "--only", "writer MPUB 200, 1 conn")
    assert proc.returncode == 0, proc.stdout
    assert "No side-by-side ran: no nsqd was given" in proc.stdout
    assert "| workload | nsqmp | baseline | nsqmp / baseline | runs |" in proc.stdout
    assert "nsqd" not in row(proc.stdout, "writer MPUB 200, 1 conn")[3]
    order = [(r["rep"], r["target"]) for r in raw["runs"]]
    assert order == [(1, "nsqmp"), (1, "baseline"), (2, "baseline"), (2, "nsqmp")]
    assert [r["msgs_per_sec"] > 0 for r in raw["writer MPUB 200, 1 conn"]] == [True, True]
    nsqmp_cell, baseline_cell = row(proc.stdout, "writer MPUB 200, 1 conn", "held")[1:]
    held_cell(nsqmp_cell)
    held_cell(baseline_cell)
    assert "acceptor" in nsqmp_cell  # a publisher's acceptor: the broker's busiest thread


@pytest.mark.parametrize("native, poll_us, kind", [(True, 0, "C"), (True, floor.POLL_US, f"C, polling {floor.POLL_US} us"),
                                                   (False, 0, "Python")],
                         ids=["C", "C polling", "Python fallback"])
def test_the_floor_answers_what_bench_writer_sends(native, poll_us, kind):
    """magic, IDENTIFY, a one-message MPUB (bench_writer's "PUB"), PUB, NOP: an OK for each
    command with a body, nothing for NOP, all in one piece of stream; then, a pause past
    the polling server's look (its thread blocks), one more PUB answered."""
    server = floor.Server(native, poll_us)
    try:
        assert server.kind == kind
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            s.sendall(wire.MAGIC + wire.identify({"client_id": "writer"}) + wire.mpub("t", [b"a" * 200])
                      + wire.NOP + wire.pub("t", b"b" * 200))
            got = b""
            while len(got) < 30:
                got += s.recv(100)
            assert got == b"\x00\x00\x00\x06\x00\x00\x00\x00OK" * 3
            time.sleep(0.05)
            s.sendall(wire.pub("t", b"c"))
            assert s.recv(100) == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    finally:
        server.stop()


def _frames(s: socket.socket, reader: wire.FrameReader, count: int) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    while len(got) < count:
        data = s.recv(65536)
        assert data, "the floor closed the connection"
        got += reader.feed(data)
    return got


@pytest.mark.parametrize("native, poll_us, kind", [(True, 0, "C"), (True, floor.POLL_US, f"C, polling {floor.POLL_US} us"),
                                                   (False, 0, "Python")],
                         ids=["C", "C polling", "Python fallback"])
def test_the_floor_feeds_a_reader_up_to_its_rdy_and_one_more_per_fin(native, poll_us, kind):
    """What bench_reader sends (magic, IDENTIFY, SUB, RDY 3): OK, OK, then three messages of
    the server's body size with IDs counting up, and no more until a FIN, which lets one
    more go; a reader that closes while it is fed does not take the server down."""
    server = floor.Server(native, poll_us, size=50)
    try:
        assert server.kind == kind
        reader = wire.FrameReader()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            s.sendall(wire.MAGIC + wire.identify({"client_id": "reader"}) + wire.sub("t", "c") + wire.rdy(3))
            got = _frames(s, reader, 5)
            assert got[:2] == [(0, b"OK"), (0, b"OK")]
            messages = [wire.decode_message(data) for ftype, data in got[2:] if ftype == 2]
            assert [m.id for m in messages] == [b"%016x" % i for i in range(3)]
            assert all(m.body == b"m" * 50 and m.attempts == 1 for m in messages)
            s.settimeout(0.2)
            with pytest.raises(socket.timeout):  # three in flight: nothing more
                _frames(s, reader, 1)
            s.settimeout(5)
            s.sendall(wire.fin(messages[0].id))
            (ftype, data), = _frames(s, reader, 1)
            assert ftype == 2 and wire.decode_message(data).id == b"%016x" % 3
            s.sendall(wire.rdy(1_000_000))  # more than the socket's buffers hold: fed while it closes
            s.recv(65536)
        if server.proc is not None:  # a write to a closed reader fails; it does not kill the server
            status = Path(f"/proc/{server.proc.pid}/status").read_text()
            ignored = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigIgn:")), 16)
            assert ignored & (1 << (signal.SIGPIPE - 1))
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:  # still serving
            s.sendall(wire.MAGIC + wire.pub("t", b"x"))
            assert s.recv(100) == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
    finally:
        server.stop()


def test_nsq_tool_lines_are_parsed():
    """bench_writer's and bench_reader's result line, Go durations included."""
    assert go_duration("8.000154s") == pytest.approx(8.000154)
    assert go_duration("1m0.5s") == 60.5 and go_duration("950ms") == pytest.approx(0.95)
    r = parse_result("writer", "[bench_writer] 2026/11/24 21:00:00 duration: 8.0001s - 34.332mb/s - "
                               "180000.000ops/s - 5.555us/op\n")
    assert r["msgs_per_sec"] == 180000.0 and r["messages"] == 1440018 and r["seconds"] == 8.0


NSQ = {n: _nsq_bin(n) for n in ("nsqd", "bench_writer", "bench_reader")}


@pytest.mark.skipif(not all(NSQ.values()),
                    reason="nsq 1.3.0's nsqd, bench_writer and bench_reader not in $NSQ_BIN "
                           "(../shared/tools/build-nsq.sh builds them; CI has no copy of their sources)")
def test_one_real_row_with_nsqs_own_tools(tmp_path):
    """The real nsqd and nsq's tools: the PUB row and its floor, both brokers, a ratio."""
    proc, raw = suite(tmp_path, "--reps", "1", "--runfor", "1", "--nsqd", NSQ["nsqd"],
                      "--bench-writer", NSQ["bench_writer"], "--bench-reader", NSQ["bench_reader"],
                      "--only", "writer PUB, 1 conn")
    assert proc.returncode == 0, proc.stdout
    assert "client: nsq 1.3.0's bench_writer/bench_reader" in proc.stdout
    cells = row(proc.stdout, "writer PUB, 1 conn")
    assert cells[3].endswith("x")
    assert raw["summary"][FLOOR_PUB1]["floor"] > 0


def test_a_baseline_runs_the_code_of_its_own_checkout(tmp_path, monkeypatch):
    """The baseline broker loads its checkout's modules, even when the suite runs from
    this checkout (``python -m`` puts the current directory first on the path: until
    2026-11-25 the "baseline" ran this checkout's code)."""
    other = tmp_path / "other"
    shutil.copytree(ROOT / "nsqmp", other / "nsqmp", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(ROOT)
    b = Baseline(str(other), tmp_path / "data").start()
    try:
        child = b.children()["nsqmp acceptor 0"]
        natives = {line.split()[-1] for line in Path(f"/proc/{child}/maps").read_text().splitlines()
                   if "_native" in line}
        assert natives == {str(other / "nsqmp" / Path(n).name) for n in natives}, natives
        assert natives and os.readlink(f"/proc/{b.proc.pid}/cwd") == str(other)
    finally:
        assert b.stop() == 0, b.log_text()
