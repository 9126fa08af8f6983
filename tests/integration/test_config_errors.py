"""Start-up failures: one clear line on stderr, a non-zero exit, at once (no respawn loop).

And `nsqmp check-config FILE`: the resolved options for a good file, exit 0.
"""
from __future__ import annotations

import glob
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "nsqmp.toml.example"
# the only other line a failed start may print: it cleaned up after an earlier crashed run
_STALE = re.compile(r"removed \d+ stale shared-memory segments")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NSQMP_")}


def _nsqmp(*args: str, timeout: float = 20.0) -> tuple[subprocess.CompletedProcess, float]:
    """Run the command to its end; the result carries its pid as `.pid`."""
    started = time.monotonic()
    with subprocess.Popen([sys.executable, "-m", "nsqmp", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env()) as popen:
        try:
            out, err = popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.communicate()
            raise
    proc = subprocess.CompletedProcess(popen.args, popen.returncode, out, err)
    proc.pid = popen.pid  # type: ignore[attr-defined]
    return proc, time.monotonic() - started


def _serve_fails(tmp_path: Path, *args: str, data_path: Path | None = None) -> str:
    """Run `nsqmp serve` expecting a start-up failure; returns its one stderr line."""
    data = data_path or tmp_path / "data"
    cmd = ["serve", "--data-path", str(data), *args]
    if not any(a.startswith("--tcp-address") for a in args):
        cmd += ["--tcp-address", "127.0.0.1:0"]
    if not any(a.startswith("--http-address") for a in args):
        cmd += ["--http-address", "127.0.0.1:0"]
    proc, elapsed = _nsqmp(*cmd)
    print(f"\nexit {proc.returncode} after {elapsed:.2f}s: {proc.stderr.strip()}")
    assert proc.returncode != 0, proc.stderr
    assert elapsed < 5.0, f"took {elapsed:.1f}s to give up: a respawn loop?"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not _STALE.search(ln)]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "spawned" not in proc.stderr  # failed before any child was forked
    assert proc.stdout == ""
    assert glob.glob(f"/dev/shm/nsqmp.{proc.pid}.*") == []  # nothing left behind
    return lines[0]


# -- the config file -----------------------------------------------------------------------------

def test_unknown_key_in_config_file(tmp_path):
    conf = tmp_path / "nsqmp.toml"
    conf.write_text('mem_queue_size = 100\nmem_queue_sise = 200\n')
    line = _serve_fails(tmp_path, "--config", str(conf))
    assert "unknown option 'mem_queue_sise'" in line
    assert str(conf) in line
    assert "did you mean 'mem_queue_size'" in line


def test_wrong_type_in_config_file(tmp_path):
    conf = tmp_path / "nsqmp.toml"
    conf.write_text('mem_queue_size = "lots"\n')
    line = _serve_fails(tmp_path, "--config", str(conf))
    assert "mem_queue_size" in line and "expected an integer" in line and '"lots"' in line


def test_invalid_toml_syntax(tmp_path):
    conf = tmp_path / "nsqmp.toml"
    conf.write_text('mem_queue_size = = 3\n')
    line = _serve_fails(tmp_path, "--config", str(conf))
    assert str(conf) in line


def test_missing_config_file(tmp_path):
    line = _serve_fails(tmp_path, "--config", str(tmp_path / "nowhere.toml"))
    assert "nowhere.toml" in line and "not found" in line


# -- the machine -------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["tcp", "http"])
def test_address_already_in_use(tmp_path, which):
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        line = _serve_fails(tmp_path, f"--{which}-address", f"127.0.0.1:{port}")
    finally:
        holder.close()
    assert f"{which.upper()}: cannot listen on 127.0.0.1:{port}: Address already in use" in line


def test_unwritable_data_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a regular file, not a directory")
    data = blocker / "data"
    line = _serve_fails(tmp_path, data_path=data)
    assert f"data path '{data}' is not writable" in line
    assert blocker.read_text() == "a regular file, not a directory"


def test_data_path_in_use_by_another_broker(tmp_path, make_broker):
    running = make_broker("--acceptors", "1", "--routers", "1")
    line = _serve_fails(tmp_path, data_path=running.data_path)
    assert "is in use by another nsqmp or nsqd" in line
    assert running.proc.poll() is None and running.http("GET", "/ping")[:2] == (200, b"OK")


def test_ring_too_small_for_max_msg_size(tmp_path):
    line = _serve_fails(tmp_path, "--ring-size", "65536", "--max-msg-size", "1048576")
    assert "ring_size 65536 is too small for max_msg_size 1048576" in line
    assert "ring_size >= 8388608" in line


def test_flag_wins_over_the_file(tmp_path, make_broker):
    conf = tmp_path / "nsqmp.toml"
    conf.write_text("acceptors = 3\nrouters = 1\n")
    b = make_broker("--config", str(conf), "--acceptors", "1")
    titles = set(b.children())
    assert titles == {"nsqmp router 0", "nsqmp timer", "nsqmp acceptor 0"}, titles


# -- check-config ---------------------------------------------------------------------------------------

def test_check_config_prints_the_resolved_options(tmp_path):
    conf = tmp_path / "nsqmp.toml"
    conf.write_text('mem_queue_size = 5000\nmsg_timeout = "30s"\nacceptors = 3\n')
    proc, _ = _nsqmp("check-config", str(conf))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    resolved = tomllib.loads(proc.stdout)
    assert resolved["mem_queue_size"] == 5000
    assert resolved["msg_timeout"] == "30s"
    assert resolved["acceptors"] == 3
    assert resolved["max_msg_size"] == 1048576  # defaults are listed too
    assert resolved["routers"] >= 1 and "ring_size" in resolved
    # what it prints is itself a good config file that resolves to the same thing
    again = tmp_path / "again.toml"
    again.write_text(proc.stdout)
    proc2, _ = _nsqmp("check-config", str(again))
    assert proc2.returncode == 0, proc2.stderr
    assert tomllib.loads(proc2.stdout) == resolved


@pytest.mark.parametrize("content, words", [
    ("bogus_key = 1\n", "unknown option 'bogus_key'"),
    ('max_msg_size = "big"\n', "max_msg_size"),
    ("ring_size = 65536\n", "too small for max_msg_size"),
])
def test_check_config_rejects_a_bad_file(tmp_path, content, words):
    conf = tmp_path / "bad.toml"
    conf.write_text(content)
    proc, _ = _nsqmp("check-config", str(conf))
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr


def test_example_config_passes_check_config():
    proc, _ = _nsqmp("check-config", str(EXAMPLE))
    assert proc.returncode == 0, proc.stderr
    resolved = tomllib.loads(proc.stdout)
    assert resolved["tcp_address"] == "127.0.0.1:4150"


def test_a_dev_shm_too_small_for_the_rings_stops_start_up(tmp_path):
    """Docker's default 64 MiB /dev/shm is smaller than the default rings: say so at start
    instead of dying of SIGBUS at the first traffic. Runs the broker in its own mount
    namespace with a 32 MiB /dev/shm."""
    import shutil

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("needs root and unshare (util-linux) to give the broker its own /dev/shm")
    script = (f"mount -t tmpfs -o size=32m tmpfs /dev/shm && exec {sys.executable} -m nsqmp serve "
              f"--tcp-address 127.0.0.1:0 --http-address 127.0.0.1:0 --data-path {tmp_path / 'data'}")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "ERROR" in ln]
    assert len(lines) == 1 and "/dev/shm has" in lines[0] and "--shm-size" in lines[0], proc.stderr
