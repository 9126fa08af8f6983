"""nsqlookupd's options, each declared once, and its command line in Go's flag syntax.

FLAGS is the single declaration (name, kind, default, help, TOML key); the parser, the
usage text and the config-file keys all come from it. The syntax is Go's flag package:
``-x`` or ``--x``; ``-x=value`` or ``-x value``; booleans bare (``-version``) or with
``=false``; durations like ``300s``, ``5m``, ``1h30m``; ``--`` or the first non-flag
argument ends the flags; a flag given twice keeps the last value. Its errors are Go's
(``flag provided but not defined: -bogus``), followed by the usage text, exit code 2.

Precedence, as go-options resolves it for nsqlookupd: a flag on the command line, then
the ``--config`` TOML file (keys are flag names with ``_``: ``tcp_address``; an integer
duration means milliseconds), then the default.
"""
from __future__ import annotations

import socket
import tomllib
from dataclasses import dataclass
from typing import Any

from nsqmp.config import goflags
from nsqmp.config.goflags import HelpRequested, UsageError  # noqa: F401 (the command line's errors, for its callers)
from nsqmp.config.options import parse_duration

STRING, BOOL, DURATION, LOGLEVEL = "string", "bool", "duration", "value"
LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")
LOG_FORMATS = ("text", "json")
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


@dataclass(frozen=True)
class Flag:
    name: str
    kind: str
    default: Any
    help: str
    key: str | None = None  # its config-file key; None: command line only


FLAGS: tuple[Flag, ...] = (
    Flag("config", STRING, "", "path to config file"),
    Flag("version", BOOL, False, "print version string"),
    Flag("log-level", LOGLEVEL, "info", "set log verbosity: debug, info, warn, error, or fatal", "log_level"),
    Flag("log-prefix", STRING, "[nsqlookupd] ", "log message prefix", "log_prefix"),
    # nsqmp's own: one JSON object per line for log shippers (nsqmp/golog.py)
    Flag("log-format", STRING, "text", "log line format: text or json", "log_format"),
    Flag("verbose", BOOL, False, "[deprecated] has no effect, use --log-level"),
    Flag("tcp-address", STRING, "0.0.0.0:4160", "<addr>:<port> to listen on for TCP clients", "tcp_address"),
    Flag("http-address", STRING, "0.0.0.0:4161", "<addr>:<port> to listen on for HTTP clients", "http_address"),
    Flag("broadcast-address", STRING, None, "address of this lookupd node, (default to the OS hostname)",
         "broadcast_address"),
    Flag("inactive-producer-timeout", DURATION, 300.0,
         "duration of time a producer will remain in the active list since its last ping",
         "inactive_producer_timeout"),
    Flag("tombstone-lifetime", DURATION, 45.0,
         "duration of time a producer will remain tombstoned if registration remains", "tombstone_lifetime"),
)
FLAGS_BY_NAME = {f.name: f for f in FLAGS}


@dataclass
class Options:
    """The resolved options (durations in seconds); the defaults live in FLAGS only."""

    tcp_address: str
    http_address: str
    broadcast_address: str
    inactive_producer_timeout: float
    tombstone_lifetime: float
    log_level: str
    log_prefix: str
    log_format: str = "text"


class ConfigFileError(Exception):
    """The config file cannot be read or holds a bad value: fatal, exit 1."""


# -- values -----------------------------------------------------------------------------------
def _parse_value(flag: Flag, text: str) -> Any:
    """A flag's value from its text; ValueError carries Go's reason."""
    if flag.kind == BOOL:
        if text in _GO_TRUE:
            return True
        if text in _GO_FALSE:
            return False
        raise ValueError("parse error")
    if flag.kind == DURATION:
        try:
            return parse_duration(text)
        except ValueError:
            raise ValueError("parse error") from None
    if flag.kind == LOGLEVEL:
        if text.lower() not in LOG_LEVELS:
            raise ValueError(f"invalid log level '{text}' (debug, info, warn, error, fatal)")
        return text.lower()
    if flag.name == "log-format" and text not in LOG_FORMATS:
        raise ValueError(f"invalid log format '{text}' (text, json)")
    return text


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String(): ``5m0s``, ``45s``, ``1h0m0s``, ``1.5s``, ``250ms``."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return sign + _trim(f"{ns / size:.9f}") + unit
    hours, rest = divmod(ns, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    secs = _trim(f"{rest / 1e9:.9f}") + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}"
    if minutes:
        return f"{sign}{minutes}m{secs}"
    return sign + secs


def _trim(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text


# -- the command line ---------------------------------------------------------------------------
def parse_flags(argv: list[str]) -> dict[str, Any]:
    """Go's flag.FlagSet.Parse: the flags set on the command line, by name (arguments after
    them are ignored, as nsqlookupd does)."""
    values: dict[str, Any] = {}
    found, _ = goflags.tokens(argv, lambda name: (f.kind == BOOL) if (f := FLAGS_BY_NAME.get(name)) else None)
    for name, text in found:
        flag = FLAGS_BY_NAME[name]
        try:
            values[name] = _parse_value(flag, text)
        except ValueError as exc:
            raise goflags.bad_value(name, text, flag.kind == BOOL, exc) from None
    return values


def usage(prog: str = "nsqlookupd", defaults: dict[str, Any] | None = None) -> str:
    """Go's usage text: ``Usage of <prog>:`` and the flags in name order."""
    defaults = defaults or {}
    lines = [f"Usage of {prog}:"]
    for flag in sorted(FLAGS, key=lambda f: f.name):
        default = defaults.get(flag.name, flag.default)
        if flag.name == "broadcast-address" and default is None:
            default = socket.gethostname()
        head = f"  -{flag.name}" + ("" if flag.kind == BOOL else f" {flag.kind}")
        text = flag.help
        if flag.kind == STRING and default:
            text += f' (default "{default}")'
        elif flag.kind == DURATION:
            text += f" (default {go_duration(default)})"
        elif flag.kind == LOGLEVEL:
            text += f" (default {str(default).upper()})"
        lines.append(head + "\n    \t" + text)
    return "\n".join(lines) + "\n"


# -- the config file ------------------------------------------------------------------------------
def read_config(path: str) -> dict[str, Any]:
    """The option values a TOML config file sets (unknown keys are ignored, as go-options
    ignores them)."""
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"failed to load config file {path} - {exc}") from None
    values: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.key is None or flag.key not in raw:
            continue
        item = raw[flag.key]
        try:
            if flag.kind == DURATION:
                values[flag.name] = parse_duration(item)  # a TOML integer is milliseconds
            elif isinstance(item, str):
                values[flag.name] = _parse_value(flag, item)
            else:
                raise ValueError(f"expected a string, got {item!r}")
        except ValueError as exc:
            raise ConfigFileError(f"failed parsing {flag.key} {item!r} - {exc}") from None
    return values


def resolve(flags: dict[str, Any], defaults: dict[str, Any] | None = None) -> Options:
    """The options from the flags :func:`parse_flags` returned, the ``--config`` file they
    name, and the defaults (``defaults`` overrides FLAGS' own: ``nsqmp lookupd`` binds
    loopback). Raises ConfigFileError."""
    merged: dict[str, Any] = {f.name: f.default for f in FLAGS}
    merged.update(defaults or {})
    if flags.get("config"):
        merged.update(read_config(flags["config"]))
    merged.update(flags)
    return Options(
        tcp_address=merged["tcp-address"],
        http_address=merged["http-address"],
        # unset means the hostname; an explicit "" stays empty, as in nsqlookupd
        broadcast_address=(socket.gethostname() if merged["broadcast-address"] is None
                           else merged["broadcast-address"]),
        inactive_producer_timeout=merged["inactive-producer-timeout"],
        tombstone_lifetime=merged["tombstone-lifetime"],
        log_level=merged["log-level"],
        log_prefix=merged["log-prefix"],
        log_format=merged["log-format"],
    )
