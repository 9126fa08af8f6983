"""deploy/Dockerfile built and run as a user would, with Debian's podman (slow, root only).

No image registry is reachable here, so deploy/base-image.sh makes the FROM image out of
Debian's packages with debootstrap (once per machine: it keeps an image that is already
there). Then podman builds deploy/Dockerfile unchanged, and the test runs the image on the
host's network on ports that are not the defaults, publishes and consumes through it with
the project's client, asks podman for the HEALTHCHECK, stops the container as Docker would
(SIGTERM, 45 s) and starts it again on the same volume: every published message that was
not finished comes back, and nothing else. docs/deploy.md says how to do the same by hand.
The images stay for the next run (the base and the build cache); the container and its
volume are removed.
"""
from __future__ import annotations

import configparser
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from nsqmp.client import Connection, wire

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a cold run debootstraps the base image (~2 min here)

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/nsqmp:test"
TOPIC, CHANNEL = "deploy", "c"
# pip's configuration files, as `pip config list -v` names them for root
PIP_CONFIGS = ["/etc/pip.conf", "/etc/xdg/pip/pip.conf", "~/.pip/pip.conf", "~/.config/pip/pip.conf"]
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# tools/containers.md's run options: crun cannot raise rlimits above the host's hard limits
# here, and podman's default nofile is above them: runc with limits it can set
RUN_OPTS = ["--runtime", "runc", "--network", "host", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]


def _run(*argv: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _pip_mounts() -> list[str]:
    """`-v PATH:PATH:ro` for the host's pip configuration, the CA bundle and the local
    indexes (with the folder their pages link into), certificates, wheel folders and
    constraint files that configuration names (a machine whose pip.conf caps packages
    with `constraint = FILE` failed the build without it): pip inside the build reaches the same indexes as the host's, and
    nothing of it is baked into the image."""
    files = [os.path.expanduser(p) for p in PIP_CONFIGS + [os.environ.get("PIP_CONFIG_FILE", "")]]
    paths = {p for p in files if p and os.path.isfile(p)} | ({CA_BUNDLE} if os.path.isfile(CA_BUNDLE) else set())
    for conf in [p for p in files if p and os.path.isfile(p)]:
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(conf)
        for section in parser.sections():
            for key in ("cert", "client-cert", "find-links", "index-url", "extra-index-url", "constraint",
                        "requirement"):
                for value in parser.get(section, key, fallback="").split():
                    local = value.removeprefix("file://").rstrip("/")
                    if key.endswith("index-url"):  # a local index's pages link to files beside it
                        local = os.path.dirname(local)
                    if local.startswith("/") and os.path.exists(local):
                        paths.add(local)
    return [arg for p in sorted(paths) for arg in ("-v", f"{p}:{p}:ro")]


@pytest.fixture(scope="module")
def image() -> str:
    """The image built from deploy/Dockerfile, on the base deploy/base-image.sh makes."""
    if os.geteuid() != 0:
        pytest.fail("the container test runs as root (podman's root storage, debootstrap): run the suite as root")
    missing = [t for t in ("podman", "buildah", "debootstrap", "runc") if shutil.which(t) is None]
    assert not missing, f"install Debian's {' '.join(missing)} (`make test` does, as root)"
    _run("sh", str(ROOT / "deploy" / "base-image.sh"), timeout=330)
    previous = _run("podman", "image", "inspect", IMAGE, "--format", "{{.Id}}", check=False).stdout.strip()
    # --layers=false: buildah 1.28 cannot bind-mount from a builder stage it took from its
    # cache ("couldn't find .../merged/wheels"), and no 580 MB of builder layers stay behind
    _run("podman", "build", "--format", "docker", "--isolation", "chroot", "--network", "host", "--pull=never",
         "--layers=false", *_pip_mounts(), "-f", str(ROOT / "deploy" / "Dockerfile"), "-t", IMAGE, str(ROOT),
         timeout=210)
    if previous and previous != _run("podman", "image", "inspect", IMAGE, "--format", "{{.Id}}").stdout.strip():
        _run("podman", "rmi", previous, check=False)  # the last run's image, untagged by this one
    return IMAGE


def _free_ports(n: int) -> list[int]:
    """n free loopback ports, none of them nsqd's defaults."""
    socks = []
    try:
        while len(socks) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            if s.getsockname()[1] not in (4150, 4151, 4152):
                socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _channel(http_port: int) -> dict:
    """The test channel's /stats entry."""
    url = f"http://127.0.0.1:{http_port}/stats?format=json&topic={TOPIC}&channel={CHANNEL}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        topics = orjson.loads(resp.read())["topics"] or []
    return next(c for t in topics for c in t["channels"] if c["channel_name"] == CHANNEL)


def _wait_ready(name: str, http_port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/ping", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        state = _run("podman", "inspect", name, "--format", "{{.State.Status}}").stdout.strip()
        assert state == "running", f"{name} is {state}:\n{_logs(name)}"
        time.sleep(0.2)
    raise AssertionError(f"{name}: /ping did not answer in {timeout}s:\n{_logs(name)}")


def _logs(name: str) -> str:
    proc = _run("podman", "logs", name, check=False)
    return proc.stdout + proc.stderr


def _wait_for_channel(http_port: int, want: dict, timeout: float = 20) -> None:
    """Until the channel's /stats has the values in want (FIN has no answer to wait for)."""
    deadline = time.monotonic() + timeout
    while {k: (c := _channel(http_port))[k] for k in want} != want:
        assert time.monotonic() < deadline, f"timed out waiting for {want}: {c}"
        time.sleep(0.05)


def _stop(name: str) -> None:
    """`docker stop` as the Dockerfile's comments ask for it: SIGTERM, 45 s; exit code 0."""
    _run("podman", "stop", "-t", "45", name, timeout=90)
    code = _run("podman", "inspect", name, "--format", "{{.State.ExitCode}}").stdout.strip()
    logs = _logs(name)
    assert code == "0", f"{name} exited {code}:\n{logs[-4000:]}"
    assert "Traceback" not in logs and "did not stop in time" not in logs, logs[-4000:]


def test_the_image_serves_stops_gracefully_and_keeps_what_it_acknowledged(image):
    tcp_port, http_port = _free_ports(2)
    name = f"nsqmp-test-{os.getpid()}"
    volume = f"{name}-data"
    _run("podman", "volume", "create", volume)
    try:
        _run("podman", "run", "-d", "--name", name, *RUN_OPTS, "--shm-size=256m",
             "-e", f"NSQMP_TCP_ADDRESS=127.0.0.1:{tcp_port}", "-e", f"NSQMP_HTTP_ADDRESS=127.0.0.1:{http_port}",
             "-v", f"{volume}:/data", image, "--acceptors", "2")
        _wait_ready(name, http_port)

        # the HEALTHCHECK probes the HTTP port the environment gave, not 4151
        health = _run("podman", "healthcheck", "run", name, check=False)
        assert health.returncode == 0, health.stdout + health.stderr + _logs(name)
        last = _run("podman", "inspect", name, "--format", "{{json .State.Health.Log}}").stdout
        assert f"127.0.0.1:{http_port}/ping: OK" in last, last

        bodies = [b"m%04d" % i for i in range(200)]
        with Connection("127.0.0.1", tcp_port) as pub:
            pub.mpub(TOPIC, bodies[:150])  # each answered OK: acknowledged
            for body in bodies[150:]:
                pub.pub(TOPIC, body)
        consumer = Connection("127.0.0.1", tcp_port)
        consumer.identify(msg_timeout=60_000)
        consumer.sub(TOPIC, CHANNEL, rdy=50)
        got = [consumer.read_message() for _ in range(50)]
        consumer.send(wire.rdy(0))  # no more: the 30 FINs below must not make room for others
        for msg in got[:30]:
            consumer.fin(msg.id)
        finished = {m.body for m in got[:30]}
        _wait_for_channel(http_port, {"in_flight_count": 20, "depth": 150})  # 20 stay in flight

        _stop(name)
        consumer.close()

        # the same container, the same volume: what was not finished comes back, once each
        _run("podman", "start", name)
        _wait_ready(name, http_port)
        drained = []
        with Connection("127.0.0.1", tcp_port) as again:
            again.sub(TOPIC, CHANNEL, rdy=200)
            while len(drained) < len(bodies) - len(finished):
                msg = again.read_message()
                drained.append(msg.body)
                again.fin(msg.id)
            _wait_for_channel(http_port, {"in_flight_count": 0, "depth": 0})
        assert sorted(drained) == sorted(set(bodies) - finished)
        _stop(name)
    finally:
        _run("podman", "rm", "-f", "-t", "0", name, check=False)
        _run("podman", "volume", "rm", "-f", volume, check=False)


def test_too_small_a_dev_shm_stops_start_up_with_one_line(image):
    """What the Dockerfile's --shm-size comment promises: no SIGBUS later, a refusal now."""
    tcp_port, http_port = _free_ports(2)
    proc = _run("podman", "run", "--rm", *RUN_OPTS, "--shm-size=64m",
                "-e", f"NSQMP_TCP_ADDRESS=127.0.0.1:{tcp_port}", "-e", f"NSQMP_HTTP_ADDRESS=127.0.0.1:{http_port}",
                image, "--acceptors", "2", check=False, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    line = "/dev/shm has 64 MiB free but the rings need 97 MiB (12 rings of 8 MiB): enlarge it (docker run --shm-size)"
    assert line in out, out
