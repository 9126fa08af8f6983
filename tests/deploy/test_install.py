"""The runtime-only install (`make run`, `pip install nsqmp`) is enough to run nsqmp (slow).

A fresh virtualenv gets `pip install` of the build inputs the Dockerfile copies (no extras),
then its own console scripts start nsqlookupd and the broker, with no PYTHONPATH: nothing
they import may live only in the test extras. The project's client publishes and consumes
through that broker, which registers with that lookupd.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from nsqmp.client import Connection
from nsqmp.launcher import Broker
from nsqmp.lookupd.launcher import Lookupd

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # pip with a cold cache downloads the dependencies

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "setup.py", "README.md", "LICENSE", "native", "nsqmp"]
# what only the extras bring: none of it may be in the runtime install
EXTRAS_ONLY = {"pytest", "pyspark", "pyarrow", "locust", "selenium", "pynsq", "gnsq", "ansq", "hypothesis", "tornado"}


class InstalledBroker(Broker):
    """The broker started by a virtualenv's `nsqmp` console script instead of this Python."""

    def __init__(self, bin_dir: Path, data_path: Path, *args: str) -> None:
        super().__init__(data_path, *args)
        self.bin_dir = bin_dir

    def command(self) -> list[str]:
        argv = super().command()
        assert argv[:3] == [sys.executable, "-m", "nsqmp"], argv
        return [str(self.bin_dir / "nsqmp"), *argv[3:]]


@pytest.fixture(scope="module")
def lean_venv(tmp_path_factory) -> Path:
    """A virtualenv with `pip install .` only, built from a copy of the build inputs (the
    checkout's own build/ and compiled modules stay out of it)."""
    base = tmp_path_factory.mktemp("lean")
    src = base / "src"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src)], env=env,
                          capture_output=True, text=True, timeout=540, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return venv


def test_the_runtime_install_has_the_commands_and_none_of_the_extras(lean_venv):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    listed = subprocess.run([str(lean_venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                            env=env, capture_output=True, check=True, timeout=60).stdout
    names = {p["name"].lower() for p in orjson.loads(listed)}
    assert "nsqmp" in names and not names & EXTRAS_ONLY, sorted(names)
    for script in ("nsqmp", "nsqmp-nsqd", "nsqmp-nsqlookupd"):
        assert (lean_venv / "bin" / script).exists(), script
    where = subprocess.run([str(lean_venv / "bin" / "python"), "-c", "import nsqmp._native as n; print(n.__file__)"],
                           env=env, cwd=lean_venv, capture_output=True, text=True, check=True, timeout=60)
    assert where.stdout.startswith(str(lean_venv)), where.stdout
    version = subprocess.run([str(lean_venv / "bin" / "nsqmp-nsqd"), "--version"], env=env,
                             capture_output=True, text=True, check=True, timeout=60)
    assert version.stdout.startswith("nsqd v") and "(built w/nsqmp-0." in version.stdout, version.stdout


# every module imports with the runtime dependencies alone, except the Spark connector's
SWEEP = """
import importlib, pkgutil, sys, nsqmp
failed = {}
for m in pkgutil.walk_packages(nsqmp.__path__, "nsqmp."):
    if m.name.startswith("nsqmp.spark.") or m.name.endswith(".__main__"):
        continue
    try:
        importlib.import_module(m.name)
    except Exception as exc:
        failed[m.name] = repr(exc)
print(failed)
"""


def test_every_module_but_sparks_imports_from_the_runtime_install(lean_venv):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(lean_venv / "bin" / "python"), "-c", SWEEP], env=env, cwd=lean_venv,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "{}", proc.stdout + proc.stderr


def test_the_runtime_install_runs_the_broker_and_lookupd(lean_venv, tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)  # the daemons import the venv's nsqmp only
    bin_dir = lean_venv / "bin"
    lookupd = Lookupd(program=[str(bin_dir / "nsqmp"), "lookupd"], log_path=tmp_path / "lookupd.log").start()
    try:
        broker = InstalledBroker(bin_dir, tmp_path / "data", "--acceptors", "2",
                                 "--lookupd-tcp-address", lookupd.tcp_address).start()
        try:
            with Connection("127.0.0.1", broker.tcp_port) as c:
                c.mpub("lean", [b"a", b"b"])
                c.pub("lean", b"c")
                c.sub("lean", "ch", rdy=3)
                got = [c.read_message() for _ in range(3)]
                for msg in got:
                    c.fin(msg.id)
            assert sorted(m.body for m in got) == [b"a", b"b", b"c"]
            assert broker.stats(topic="lean")["topics"][0]["message_count"] == 3
            url = f"http://{lookupd.http_address}/lookup?topic=lean"
            deadline = time.monotonic() + 20
            while True:  # the broker registers the topic with lookupd over TCP
                try:
                    with urllib.request.urlopen(url, timeout=5) as resp:
                        producers = orjson.loads(resp.read())["producers"]
                    if [p["tcp_port"] for p in producers] == [broker.tcp_port]:
                        break
                except OSError:  # 404 until the topic is registered
                    pass
                assert time.monotonic() < deadline, "lookupd never listed the broker for 'lean'"
                time.sleep(0.1)
        finally:
            assert broker.stop() == 0, broker.log_text()
        assert "Traceback" not in broker.log_text(), broker.log_text()
    finally:
        assert lookupd.stop() == 0, lookupd.log_text()
    assert "Traceback" not in lookupd.log_text(), lookupd.log_text()
