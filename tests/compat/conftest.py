"""Fixtures shared by the client-compatibility tests: one broker for the session (with a
TLS certificate, so plain, TLS, snappy and deflate clients all use it) and the checks."""
from __future__ import annotations

import subprocess

import pytest

from tests.harness import Broker


@pytest.fixture(scope="session")
def compat_cert(tmp_path_factory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 made by openssl: (cert, key) paths."""
    d = tmp_path_factory.mktemp("compat-cert")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(crt), "-days", "1", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    return str(crt), str(key)


@pytest.fixture(scope="session")
def compat_broker(tmp_path_factory, compat_cert):
    """The broker every library talks to; each test uses its own topic."""
    d = tmp_path_factory.mktemp("compat-broker")
    b = Broker(d / "data", "--tls-cert", compat_cert[0], "--tls-key", compat_cert[1]).start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        code = b.stop()
        assert code == 0, b.log_text()[-4000:]
