"""`python -m nsqmp.health`, the container's HEALTHCHECK, against a running broker: it finds
the broker's address where `nsqmp serve` would (flags, NSQMP_<KEY> environment, config
file) and exits 0 when /ping answers, 1 when nothing does, 2 on a configuration error."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

from nsqmp.config import load
from nsqmp.health import probe_target
from tests.harness import Broker


def _health(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NSQMP_")}
    return subprocess.run([sys.executable, "-m", "nsqmp.health", *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=60, check=False)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("health") / "data", "--acceptors", "1").start()
    yield b
    assert b.stop() == 0, b.log_text()


def test_healthy_on_the_address_from_the_environment_flags_or_file(broker, tmp_path):
    http = f"127.0.0.1:{broker.http_port}"
    by_env = _health(NSQMP_HTTP_ADDRESS=http)
    assert by_env.returncode == 0 and by_env.stdout.strip() == f"nsqmp health: http://{http}/ping: OK", by_env
    assert _health("--http-address", http).returncode == 0
    conf = tmp_path / "nsqmp.toml"
    conf.write_text(f'http_address = "{http}"\n')
    assert _health(NSQMP_CONFIG=str(conf)).returncode == 0
    # flags outrank the environment, as for the broker
    assert _health("--http-address", f"127.0.0.1:{_closed_port()}", NSQMP_HTTP_ADDRESS=http).returncode == 1


def test_http_disabled_probes_the_tcp_port(broker):
    ok = _health("--http-address", "", "--tcp-address", f"127.0.0.1:{broker.tcp_port}")
    assert ok.returncode == 0 and "accepts connections" in ok.stdout, ok


def test_http_disabled_and_tls_configured_probes_https(tmp_path):
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True, timeout=60)
    tls = ["--tls-cert", str(crt), "--tls-key", str(key)]
    b = Broker(tmp_path / "data", "--acceptors", "1", *tls).start()
    try:
        port = re.search(r"HTTPS: listening on [\d.]+:(\d+)", b.log_text()).group(1)
        ok = _health("--http-address", "", "--https-address", f"127.0.0.1:{port}", *tls)
        assert ok.returncode == 0 and ok.stdout.strip() == f"nsqmp health: https://127.0.0.1:{port}/ping: OK", ok
    finally:
        assert b.stop() == 0, b.log_text()


def test_unhealthy_when_nothing_answers_and_config_errors_are_2():
    down = _health(NSQMP_HTTP_ADDRESS=f"127.0.0.1:{_closed_port()}")
    assert down.returncode == 1 and "unhealthy" in down.stderr and "refused" in down.stderr, down
    bad = _health("--http-address", "nowhere")
    assert bad.returncode == 2 and bad.stderr.startswith("nsqmp health: "), bad


@pytest.mark.parametrize("address, url", [
    ("0.0.0.0:5151", "http://127.0.0.1:5151/ping"),
    (":5151", "http://127.0.0.1:5151/ping"),
    ("[::]:5151", "http://[::1]:5151/ping"),
    ("10.1.2.3:5151", "http://10.1.2.3:5151/ping"),
])
def test_all_interfaces_are_probed_on_loopback(address, url):
    assert probe_target(load(["--http-address", address], environ={})) == ("http", url)


def test_nsqmp_health_is_the_same_command(broker):
    proc = subprocess.run([sys.executable, "-m", "nsqmp", "health", "--http-address", f"127.0.0.1:{broker.http_port}"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.endswith(": OK\n"), proc
