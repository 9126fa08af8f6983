"""The admin's options and `nsqmp admin`'s command line (GNU style; see gocli for nsqadmin's)."""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field


@dataclass
class AdminOptions:
    """Everything the admin server needs; defaults are nsqadmin 1.3.0's except the bind address."""

    http_address: str = "127.0.0.1:4171"
    base_path: str = "/"
    nsqd_http_addresses: list[str] = field(default_factory=list)
    lookupd_http_addresses: list[str] = field(default_factory=list)
    admin_users: list[str] = field(default_factory=list)
    acl_http_header: str = "X-Forwarded-User"
    notification_http_endpoint: str = ""
    graphite_url: str = ""
    proxy_graphite: bool = False
    statsd_prefix: str = "nsq.%s"
    statsd_counter_format: str = "stats.counters.%s.count"
    statsd_gauge_format: str = "stats.gauges.%s"
    statsd_interval: float = 60.0
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0
    history_interval: float = 10.0
    history_window: float = 3600.0
    refresh_interval: float = 5.0
    csrf_token: str = ""
    allow_config_from_cidr: str = "127.0.0.1/8"
    log_level: str = "info"
    log_prefix: str = "[nsqadmin] "

    def normalised_base_path(self) -> str:
        """`--base-path` as a prefix with one leading and no trailing slash ("" for "/")."""
        return "/" + self.base_path.strip("/") if self.base_path.strip("/") else ""

    def check(self) -> None:
        """Raise ValueError for combinations nsqadmin refuses."""
        if not self.nsqd_http_addresses and not self.lookupd_http_addresses:
            raise ValueError("--nsqd-http-address or --lookupd-http-address required")
        if self.nsqd_http_addresses and self.lookupd_http_addresses:
            raise ValueError("use --nsqd-http-address or --lookupd-http-address not both")
        if self.admin_users and not self.acl_http_header:
            raise ValueError("--acl-http-header must be set when --admin-user is given")
        if self.history_interval <= 0 or self.history_window < self.history_interval:
            raise ValueError("--history-interval must be > 0 and <= --history-window")
        if self.proxy_graphite and not self.graphite_url:
            raise ValueError("--proxy-graphite needs --graphite-url")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


_HELP = {
    "http_address": "<addr>:<port> to listen on for HTTP clients",
    "base_path": "URL base path (the UI works behind this prefix)",
    "nsqd_http_addresses": "nsqd HTTP address (may be given multiple times)",
    "lookupd_http_addresses": "lookupd HTTP address (may be given multiple times)",
    "admin_users": "admin user (may be given multiple times; if set, actions need it in --acl-http-header)",
    "acl_http_header": "HTTP header to check for the admin user",
    "notification_http_endpoint": "HTTP endpoint (fully qualified) to which POST notifications of admin actions are sent",
    "graphite_url": "graphite HTTP address",
    "proxy_graphite": "proxy HTTP requests to graphite",
    "statsd_prefix": "prefix used for keys sent to statsd (%s for host replacement, must match nsqd)",
    "statsd_counter_format": "the counter stats key formatting applied by the implementation of statsd",
    "statsd_gauge_format": "the gauge stats key formatting applied by the implementation of statsd",
    "statsd_interval": "time interval nsqd is configured to push to statsd, seconds (must match nsqd)",
    "http_client_connect_timeout": "timeout for HTTP connect to brokers and lookupds, seconds",
    "http_client_request_timeout": "timeout for HTTP request to brokers and lookupds, seconds",
    "history_interval": "seconds between two samples of the cluster for the charts (nsqmp)",
    "history_window": "seconds of samples kept for the charts (nsqmp)",
    "refresh_interval": "seconds between two polls of a page's numbers in the UI (nsqmp)",
    "allow_config_from_cidr": "a CIDR from which to allow HTTP requests to the /config endpoint",
    "csrf_token": "the CSRF token mutating requests must carry (default: random per process) (nsqmp)",
    "log_level": "log level: debug, info, warn, error or fatal",
    "log_prefix": "log message prefix",
}


def build_parser(prog: str = "nsqmp admin") -> argparse.ArgumentParser:
    """`nsqmp admin`'s parser: one flag per AdminOptions field, repeatable for the lists."""
    parser = argparse.ArgumentParser(prog=prog, description="Run the admin web UI (nsqadmin) for nsqd/nsqmp brokers.")
    for f in dataclasses.fields(AdminOptions):
        name = f.name[:-1] if f.name.endswith("addresses") else f.name
        if f.name == "admin_users":
            name = "admin_user"
        flag = _flag(name)
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            parser.add_argument(flag, dest=f.name, action="append", default=[], metavar="ADDR",
                                help=_HELP[f.name].replace("%", "%%"))
        elif isinstance(f.default, bool):
            parser.add_argument(flag, dest=f.name, action="store_true", help=_HELP[f.name].replace("%", "%%"))
        else:
            parser.add_argument(flag, dest=f.name, type=type(f.default), default=f.default,
                                help=f"{_HELP[f.name]} (default {f.default!r})".replace("%", "%%"))
    return parser


def parse(argv: list[str], prog: str = "nsqmp admin") -> AdminOptions:
    """Parse `nsqmp admin`'s flags into checked AdminOptions (ValueError when inconsistent)."""
    ns = build_parser(prog).parse_args(argv)
    opts = AdminOptions(**vars(ns))
    opts.check()
    return opts
