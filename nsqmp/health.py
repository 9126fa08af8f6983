"""`python -m nsqmp.health` (`nsqmp health`): is the broker on this machine answering?

The container's HEALTHCHECK. It resolves the broker's addresses from the same flags,
``NSQMP_<KEY>`` environment variables and ``--config`` file as ``nsqmp serve`` (so a
container started with ``-e NSQMP_HTTP_ADDRESS=0.0.0.0:5151`` is probed on 5151), then asks
``GET /ping`` on the HTTP address; with HTTP disabled, on the HTTPS address when TLS is
configured (the certificate is not checked: it is our own broker on loopback); with neither,
it only connects to the TCP address. Exit 0 when healthy, 1 when not (Docker's meaning),
2 on a configuration error. Only the config package is imported: a probe every ten
seconds must stay cheap (0.1 s of CPU here, Python's start-up included).
"""
from __future__ import annotations

import socket
import ssl
import sys
import urllib.error
import urllib.request

from nsqmp.config import Config, ConfigError, build_parser, from_namespace, parse_address

#: the host to probe for a listener bound to all interfaces
_LOOPBACK = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def probe_target(opts: Config) -> tuple[str, str]:
    """("http"|"https"|"tcp", the URL or host:port to probe) for a resolved configuration."""
    if opts.http_address:
        return "http", f"http://{_local(opts.http_address)}/ping"
    if opts.https_address and opts.tls_cert and opts.tls_key:
        return "https", f"https://{_local(opts.https_address)}/ping"
    return "tcp", _local(opts.tcp_address)


def _local(address: str) -> str:
    """host:port to connect to for a listen address (all interfaces -> loopback)."""
    host, port = parse_address(address)
    host = _LOOPBACK.get(host, host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def probe(kind: str, target: str, timeout: float) -> str:
    """Probe once; the answer's text when healthy, or raise OSError saying why not."""
    if kind == "tcp":
        host, _, port = target.rpartition(":")
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return "accepts connections"
    context = None
    if kind == "https":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(target, timeout=timeout, context=context) as resp:
            return resp.read(200).decode("utf-8", "replace").strip()
    except urllib.error.HTTPError as exc:  # /ping answers 500 when a publish failed on disk
        body = exc.read(200).decode("utf-8", "replace").strip()
        raise OSError(f"HTTP {exc.code}: {body}") from None
    except urllib.error.URLError as exc:  # refused, timed out: the cause without urllib's wrapper
        raise OSError(str(exc.reason)) from None


def main(argv: list[str] | None = None) -> int:
    """Command line: the broker's own options (flags, environment, --config) and --timeout."""
    parser = build_parser("nsqmp health", "Exit 0 if the broker configured by these options "
                          "(flags, NSQMP_<KEY> environment, --config) answers /ping, 1 if not.")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for the answer (default: 2)")
    try:
        ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
        opts = from_namespace(ns)
        kind, target = probe_target(opts)
    except ConfigError as exc:
        print(f"nsqmp health: {exc}", file=sys.stderr)
        return 2
    try:
        answer = probe(kind, target, ns.timeout)
    except OSError as exc:  # refused, timed out, reset, an HTTP error status
        print(f"nsqmp health: {target}: unhealthy: {exc}", file=sys.stderr)
        return 1
    print(f"nsqmp health: {target}: {answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
