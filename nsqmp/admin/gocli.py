"""`nsqmp-nsqadmin`: nsqadmin 1.3.0's command line verbatim (apps/nsqadmin/main.go,
nsqadmin/options.go), in Go's flag syntax.

``-x`` or ``--x``; ``-x=value`` or ``-x value``; booleans bare or ``=false``; durations ``5s``,
``1m``; repeatable flags (``-lookupd-http-address``) append; ``--`` or the first non-flag ends
the flags. Errors are Go's (``flag provided but not defined: -bogus`` + usage, exit 2).
Precedence as go-options: command line, then ``-config`` TOML (keys with ``_``; the lists are
``nsqlookupd_http_addresses``, ``nsqd_http_addresses``, ``admin_users``), then the default.
Every nsqadmin flag is accepted; those nsqmp does not implement are logged as ignored.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any

from nsqmp.admin import NSQADMIN_VERSION
from nsqmp.admin.options import AdminOptions
from nsqmp.config import goflags
from nsqmp.config.goflags import HelpRequested, UsageError  # noqa: F401 (the command line's errors, for its callers)
from nsqmp.config.options import parse_duration

STRING, BOOL, DURATION, LIST, LEVEL = "string", "bool", "duration", "value", "level"
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


@dataclass(frozen=True)
class Flag:
    """One nsqadmin flag: its kind, default, help, the AdminOptions field it sets (None: accepted
    and ignored, with why) and its config-file key."""

    name: str
    kind: str
    default: Any
    help: str
    attr: str | None
    key: str | None = None
    ignored: str = ""


def _f(name: str, kind: str, default: Any, help: str, attr: str | None = "", key: str | None = "",
       ignored: str = "") -> Flag:
    snake = name.replace("-", "_")
    return Flag(name, kind, default, help, snake if attr == "" else attr, snake if key == "" else key, ignored)


FLAGS: tuple[Flag, ...] = (
    _f("config", STRING, "", "path to config file", None, None),
    _f("version", BOOL, False, "print version string", None, None),
    _f("log-level", LEVEL, "info", "set log verbosity: debug, info, warn, error, or fatal"),
    _f("log-prefix", STRING, "[nsqadmin] ", "log message prefix"),
    _f("verbose", BOOL, False, "[deprecated] has no effect, use --log-level", None, None),
    _f("http-address", STRING, "0.0.0.0:4171", "<addr>:<port> to listen on for HTTP clients"),
    _f("base-path", STRING, "/", "URL base path"),
    _f("dev-static-dir", STRING, "", "(development use only)", None, ignored="the UI ships in the package"),
    _f("graphite-url", STRING, "", "graphite HTTP address"),
    _f("proxy-graphite", BOOL, False, "proxy HTTP requests to graphite"),
    _f("statsd-counter-format", STRING, "stats.counters.%s.count",
       "The counter stats key formatting applied by the implementation of statsd. If no formatting is desired, "
       "set this to an empty string."),
    _f("statsd-gauge-format", STRING, "stats.gauges.%s",
       "The gauge stats key formatting applied by the implementation of statsd. If no formatting is desired, "
       "set this to an empty string."),
    _f("statsd-prefix", STRING, "nsq.%s", "prefix used for keys sent to statsd (%s for host replacement, must match nsqd)"),
    _f("statsd-interval", DURATION, 60.0, "time interval nsqd is configured to push to statsd (must match nsqd)"),
    _f("notification-http-endpoint", STRING, "",
       "HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent"),
    _f("http-client-connect-timeout", DURATION, 2.0, "timeout for HTTP connect"),
    _f("http-client-request-timeout", DURATION, 5.0, "timeout for HTTP request"),
    _f("http-client-tls-insecure-skip-verify", BOOL, False,
       "configure the HTTP client to skip verification of TLS certificates", None,
       ignored="the admin talks plain HTTP to brokers and lookupds"),
    _f("http-client-tls-root-ca-file", STRING, "", "path to CA file for the HTTP client", None,
       ignored="the admin talks plain HTTP to brokers and lookupds"),
    _f("http-client-tls-cert", STRING, "", "path to certificate file for the HTTP client", None,
       ignored="the admin talks plain HTTP to brokers and lookupds"),
    _f("http-client-tls-key", STRING, "", "path to key file for the HTTP client", None,
       ignored="the admin talks plain HTTP to brokers and lookupds"),
    _f("allow-config-from-cidr", STRING, "127.0.0.1/8",
       "A CIDR from which to allow HTTP requests to the /config endpoint"),
    _f("acl-http-header", STRING, "X-Forwarded-User", "HTTP header to check for authenticated admin users"),
    _f("lookupd-http-address", LIST, None, "lookupd HTTP address (may be given multiple times)",
       "lookupd_http_addresses", "nsqlookupd_http_addresses"),
    _f("nsqd-http-address", LIST, None, "nsqd HTTP address (may be given multiple times)",
       "nsqd_http_addresses", "nsqd_http_addresses"),
    _f("admin-user", LIST, None, "admin user (may be given multiple times; if specified, only these users will "
       "be able to perform privileged actions; acl-http-header is used to determine the authenticated user)",
       "admin_users", "admin_users"),
    # nsqmp's own (not nsqadmin's)
    _f("history-interval", DURATION, 10.0, "nsqmp: time between two samples of the cluster for the charts"),
    _f("history-window", DURATION, 3600.0, "nsqmp: how long samples are kept for the charts"),
    _f("refresh-interval", DURATION, 5.0, "nsqmp: how often the UI re-polls a page's numbers"),
    _f("csrf-token", STRING, "", "nsqmp: the CSRF token of mutating requests (default: random)"),
)
BY_NAME = {f.name: f for f in FLAGS}


def version_string() -> str:
    """nsqadmin's version line, built with nsqmp instead of a Go toolchain."""
    from nsqmp.version import version_line

    return version_line("nsqadmin", NSQADMIN_VERSION)


def _value(flag: Flag, text: str) -> Any:
    if flag.kind == BOOL:
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError("parse error")
    if flag.kind == DURATION:
        try:
            return parse_duration(text)
        except ValueError:
            raise ValueError("parse error") from None
    if flag.kind == LEVEL and text.lower() not in ("debug", "info", "warn", "error", "fatal"):
        raise ValueError(f"invalid log level '{text}' (debug, info, warn, error, fatal)")
    return text.lower() if flag.kind == LEVEL else text


def parse_flags(argv: list[str]) -> dict[str, Any]:
    """Go's FlagSet.Parse over FLAGS: the flags given, by name (lists accumulate)."""
    values: dict[str, Any] = {}
    found, _ = goflags.tokens(argv, lambda name: (f.kind == BOOL) if (f := BY_NAME.get(name)) else None)
    for name, text in found:
        flag = BY_NAME[name]
        try:
            value = _value(flag, text)
        except ValueError as exc:
            raise goflags.bad_value(name, text, flag.kind == BOOL, exc) from None
        if flag.kind == LIST:
            values.setdefault(name, []).append(value)
        else:
            values[name] = value
    return values


def usage(prog: str = "nsqadmin") -> str:
    """Go's usage text: `Usage of nsqadmin:` and the flags in name order."""
    lines = [f"Usage of {prog}:"]
    for flag in sorted(FLAGS, key=lambda f: f.name):
        head = f"  -{flag.name}" + ("" if flag.kind == BOOL else f" {flag.kind if flag.kind != LEVEL else 'value'}")
        text = flag.help
        if flag.kind == STRING and flag.default:
            text += f' (default "{flag.default}")'
        elif flag.kind == DURATION:
            text += f" (default {int(flag.default)}s)"
        elif flag.kind == LEVEL:
            text += " (default INFO)"
        lines.append(head + "\n    \t" + text)
    return "\n".join(lines) + "\n"


def _config(path: str) -> dict[str, Any]:
    """The flag values a TOML config file sets (unknown keys ignored, as go-options)."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    out: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.key is None or flag.key not in raw:
            continue
        item = raw[flag.key]
        if flag.kind == LIST:
            out[flag.name] = [str(x) for x in (item if isinstance(item, list) else [item])]
        elif flag.kind == DURATION:
            out[flag.name] = parse_duration(item)
        elif flag.kind == BOOL:
            out[flag.name] = bool(item)
        else:
            out[flag.name] = _value(flag, str(item))
    return out


def resolve(flags: dict[str, Any]) -> tuple[AdminOptions, list[str]]:
    """AdminOptions from the command line, the -config file and the defaults; plus the ignored
    flags that were given (for one warning each). Raises OSError/ValueError for a bad config."""
    merged: dict[str, Any] = {f.name: f.default for f in FLAGS}
    given = dict(_config(flags["config"])) if flags.get("config") else {}
    given.update(flags)
    merged.update(given)
    kwargs = {f.attr: (merged[f.name] or []) if f.kind == LIST else merged[f.name]
              for f in FLAGS if f.attr}
    ignored = [f"-{f.name}: accepted for nsqadmin compatibility and ignored ({f.ignored})"
               for f in FLAGS if f.ignored and f.name in given]
    return AdminOptions(**kwargs), ignored
