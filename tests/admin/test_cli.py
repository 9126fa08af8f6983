"""`nsqmp-nsqadmin` takes nsqadmin 1.3.0's command line (Go flag syntax) and `nsqmp admin` its own."""
from __future__ import annotations

import subprocess
import sys

from nsqmp.admin import gocli

_ENTRY = [sys.executable, "-c", "from nsqmp.admin.cli import nsqadmin_main; nsqadmin_main()"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_ENTRY, *args], capture_output=True, text=True, timeout=60)


def test_version_usage_and_errors_as_nsqadmin():
    done = _run("--version")
    assert done.returncode == 0 and done.stdout.startswith("nsqadmin v1.3.0 (built w/nsqmp-")
    done = _run("-bogus")
    assert done.returncode == 2 and done.stderr.startswith("flag provided but not defined: -bogus\nUsage of nsqadmin:")
    done = _run()
    assert done.returncode == 1
    assert "FATAL: failed to instantiate nsqadmin - --nsqd-http-address or --lookupd-http-address required" in done.stderr
    done = _run("-nsqd-http-address=a:1", "--lookupd-http-address", "b:2")
    assert "use --nsqd-http-address or --lookupd-http-address not both" in done.stderr


def test_every_nsqadmin_flag_parses():
    flags = gocli.parse_flags([
        "-lookupd-http-address=127.0.0.1:4161", "--lookupd-http-address", "127.0.0.1:4162",
        "-admin-user", "alice", "-admin-user=bob", "-proxy-graphite", "-graphite-url=http://g",
        "-statsd-interval=30s", "-http-client-request-timeout", "250ms", "-log-level=WARN", "-verbose",
        "-dev-static-dir", "/x", "-http-client-tls-insecure-skip-verify=false", "-allow-config-from-cidr=10.0.0.0/8",
        "-http-client-tls-root-ca-file=a", "-http-client-tls-cert=b", "-http-client-tls-key=c",
        "-statsd-prefix=p", "-statsd-counter-format=c", "-statsd-gauge-format=g", "-base-path=/a",
        "-notification-http-endpoint=http://n", "-acl-http-header=X-U", "-log-prefix=[x] ",
        "-http-client-connect-timeout=1s", "-http-address=127.0.0.1:0"])
    opts, ignored = gocli.resolve(flags)
    assert opts.lookupd_http_addresses == ["127.0.0.1:4161", "127.0.0.1:4162"]
    assert opts.admin_users == ["alice", "bob"] and opts.proxy_graphite and opts.statsd_interval == 30
    assert opts.http_client_request_timeout == 0.25 and opts.log_level == "warn"
    assert len(ignored) == 5 and all("ignored" in line for line in ignored)
    assert opts.allow_config_from_cidr == "10.0.0.0/8"
    assert {f.name for f in gocli.FLAGS} >= {
        "config", "version", "log-level", "log-prefix", "verbose", "http-address", "base-path", "dev-static-dir",
        "graphite-url", "proxy-graphite", "statsd-counter-format", "statsd-gauge-format", "statsd-prefix",
        "statsd-interval", "notification-http-endpoint", "http-client-connect-timeout",
        "http-client-request-timeout", "http-client-tls-insecure-skip-verify", "http-client-tls-root-ca-file",
        "http-client-tls-cert", "http-client-tls-key", "allow-config-from-cidr", "acl-http-header",
        "lookupd-http-address", "nsqd-http-address", "admin-user"}


def test_go_command_line_and_config_file_serve(cluster, make_admin, tmp_path):
    conf = tmp_path / "nsqadmin.cfg"
    conf.write_text(f'nsqd_http_addresses = ["{cluster.nsqd_http(0)}"]\nbase_path = "/cfg"\n')
    admin = make_admin(f"-config={conf}", "-dev-static-dir", "/nowhere", go=True)
    assert admin.get("/cfg/api/config")["nsqd"] == [cluster.nsqd_http(0)]
    assert "nsqadmin v1.3.0 (built w/nsqmp-" in admin.log_text()
    assert "-dev-static-dir: accepted for nsqadmin compatibility and ignored" in admin.log_text()
    flagged = make_admin(f"-lookupd-http-address={cluster.lookupd_http}", go=True)
    assert flagged.get("/api/topics")["message"] == ""


def test_nsqmp_admin_help_and_errors():
    done = subprocess.run([sys.executable, "-m", "nsqmp", "admin", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "--lookupd-http-address" in done.stdout and "stats.gauges.%s" in done.stdout
    done = subprocess.run([sys.executable, "-m", "nsqmp", "admin"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--nsqd-http-address or --lookupd-http-address required" in done.stderr
