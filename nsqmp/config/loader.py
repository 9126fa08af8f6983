"""Resolve the configuration from defaults, a TOML file, the environment and flags.

Precedence, highest first::

    command-line flags  >  NSQMP_<KEY> environment variables  >  --config FILE  >  defaults

* Flags are nsqd's: ``--mem-queue-size 5000`` or ``--mem-queue-size=5000``; nsqd's
  single-dash spelling (``-mem-queue-size=5000``) works too.  A boolean flag alone
  means true (``--snappy``); ``--snappy=false`` turns it off.  Repeatable flags
  (``--lookupd-tcp-address``) accumulate, and replace the file's list.
* The file is flat TOML keyed like nsqd's (``mem_queue_size = 5000``); an nsqd config
  file loads unchanged.  ``--config`` may also come from ``NSQMP_CONFIG``.
* ``NSQMP_MEM_QUEUE_SIZE=5000`` overrides the file; list values are comma separated.

Every problem raises :class:`ConfigError` with one line naming the option, where its
value came from, what was expected and what was found.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import os
import re
import sys
import tomllib
from typing import Any, Iterator, Mapping, NoReturn, Sequence

from .options import (
    IGNORED_NSQD,
    OPTIONS,
    OPTIONS_BY_ATTR,
    OPTIONS_BY_KEY,
    OPTIONS_BY_NAME,
    SECTIONS,
    Option,
    OptType,
    toml_string,
)

__all__ = [
    "Config",
    "ConfigError",
    "build_parser",
    "from_namespace",
    "ignored_given",
    "load",
    "read_file",
    "render_resolved",
]

#: TOML key -> flag name of the nsqd options accepted and ignored (options.IGNORED_NSQD)
_IGNORED_KEYS = {name.replace("-", "_"): name for name in IGNORED_NSQD}

#: Where a value came from, as reported by :meth:`Config.source`.
SOURCE_DEFAULT = "default"
SOURCE_FILE = "file"
SOURCE_ENV = "environment"
SOURCE_FLAG = "flag"


class ConfigError(Exception):
    """A configuration problem, described in one line fit to show the user."""


# --------------------------------------------------------------------------------------
# The resolved configuration.
# --------------------------------------------------------------------------------------


class Config:
    """The resolved, validated, immutable configuration.

    Every option is an attribute named by its TOML key (``config.tcp_address``,
    ``config.msg_timeout`` in float seconds, ``config.nsqlookupd_tcp_addresses`` as a
    tuple).  ``config.config`` is the config file path, or ``""``.
    """

    __slots__ = ("_values", "_sources")

    _values: dict[str, Any]
    _sources: dict[str, str]

    def __init__(self, values: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> None:
        missing = set(OPTIONS_BY_ATTR) - set(values)
        extra = set(values) - set(OPTIONS_BY_ATTR)
        if missing or extra:
            raise ValueError(f"Config needs exactly the declared options (missing {sorted(missing)}, unknown {sorted(extra)})")
        object.__setattr__(
            self, "_values", {o.attr: tuple(values[o.attr]) if o.repeatable else values[o.attr] for o in OPTIONS}
        )
        srcs = dict(sources or {})
        object.__setattr__(self, "_sources", {o.attr: srcs.get(o.attr, SOURCE_DEFAULT) for o in OPTIONS})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            hint = difflib.get_close_matches(name, list(self._values), n=1)
            more = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise AttributeError(f"Config has no option {name!r}{more}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is immutable; use Config.replace()")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Config is immutable")

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._values})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Config({body})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Config, (dict(self._values), dict(self._sources)))

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def as_dict(self) -> dict[str, Any]:
        """All options by attribute name; repeatable values as lists (JSON-friendly)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._values.items()}

    def source(self, name: str) -> str:
        """Where ``name``'s value came from: "default", "file", "environment" or "flag"."""
        if name not in self._sources:
            raise KeyError(name)
        return self._sources[name]

    def replace(self, **changes: Any) -> Config:
        """A copy with some options changed; values are parsed and checked like a
        file's (``replace(msg_timeout="5s")``).  Cross-option rules are re-applied."""
        values = dict(self._values)
        sources = dict(self._sources)
        for name, raw in changes.items():
            opt = OPTIONS_BY_ATTR.get(name)
            if opt is None:
                raise ConfigError(f"unknown option {name!r}{_suggest(name, OPTIONS_BY_ATTR)}")
            values[name] = _parse(opt, raw, f"option {name!r}")
            sources[name] = SOURCE_FLAG
        _cross_check(values, sources)
        return Config(values, sources)


# --------------------------------------------------------------------------------------
# Error helpers.
# --------------------------------------------------------------------------------------


def _show(value: Any, limit: int = 60) -> str:
    """A value as the user wrote it (TOML spelling), shortened."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = toml_string(value)
    elif isinstance(value, dict):
        return "a table"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_show(v, limit) for v in value) + "]"
    else:
        text = str(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def _suggest(word: str, candidates: Mapping[str, Any] | Sequence[str], prefix: str = "'", suffix: str = "'") -> str:
    names = list(candidates)
    hit = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return f" (did you mean {prefix}{hit[0]}{suffix}?)" if hit else ""


def _suggest_key(key: str) -> str:
    """Closest TOML key; also understands flag spellings (``mem-queue-size``) and
    nsqd's flag names whose keys differ (``lookupd_tcp_address``)."""
    as_flag = key.replace("_", "-")
    opt = OPTIONS_BY_NAME.get(as_flag)
    if opt is not None and opt.in_file:
        return f" (did you mean '{opt.key}'?)"
    return _suggest(key, OPTIONS_BY_KEY)


def _parse(opt: Option, raw: Any, where: str) -> Any:
    """``opt.parse(raw)`` with errors turned into ``ConfigError("<where>: ... got X")``."""
    if isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a value, got a table")
    if not opt.repeatable:
        try:
            return opt.parse_item(raw)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}, got {_show(raw)}") from None
    out = []
    for i, item in enumerate(opt.split(raw), 1):
        try:
            out.append(opt.parse_item(item))
        except ValueError as exc:
            raise ConfigError(f"{where}: item {i}: {exc}, got {_show(item)}") from None
    return tuple(out)


# --------------------------------------------------------------------------------------
# Sources.
# --------------------------------------------------------------------------------------


def read_file(path: str) -> dict[str, Any]:
    """Read and parse a TOML config file; returns the parsed values by attribute name.

    Unknown keys, wrong types and out-of-range values raise :class:`ConfigError`.
    """
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} not found") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path!r} is a directory") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path!r}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path!r} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path!r} is not valid UTF-8 (byte {exc.start})") from None

    values: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, raw in data.items():
        opt = OPTIONS_BY_KEY.get(key)
        if opt is None and key in _IGNORED_KEYS:
            continue  # an nsqd file's key nsqmp accepts and ignores (ignored_given names it)
        if opt is None:
            raise ConfigError(f"unknown option {key!r} in {path}{_suggest_key(key)}")
        if opt.attr in seen:
            raise ConfigError(f"option {opt.key!r} is given twice in {path}, as {seen[opt.attr]!r} and {key!r}")
        seen[opt.attr] = key
        values[opt.attr] = _parse(opt, raw, f"option {key!r} in {path}")
    return values


def _read_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        if not opt.in_file or opt.env not in environ:
            continue
        values[opt.attr] = _parse(opt, environ[opt.env], f"environment variable {opt.env}")
    return values


def _read_flags(ns: argparse.Namespace) -> dict[str, Any]:
    given = vars(ns)
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.attr not in given or given[opt.attr] is None:
            continue
        raw = given[opt.attr]
        if opt.repeatable:
            items: list[Any] = []
            for occurrence in raw:
                items.extend(opt.split(occurrence) if opt.comma_separated else [occurrence])
            raw = items
        values[opt.attr] = _parse(opt, raw, f"option {opt.flag}")
    return values


def _cross_check(values: dict[str, Any], sources: dict[str, str]) -> None:
    """Rules that involve several options (nsqd's own, applied the same way)."""
    if values["tls_client_auth_policy"] and not values["tls_required"]:
        # nsqd: a client-auth policy implies TLS is required.
        values["tls_required"] = True
        sources["tls_required"] = sources["tls_client_auth_policy"]
    cert, key = values["tls_cert"], values["tls_key"]
    if bool(cert) != bool(key):
        given, other = ("tls_cert", "tls_key") if cert else ("tls_key", "tls_cert")
        raise ConfigError(f"{given} is set but {other} is not: TLS needs both")
    if values["tls_required"] and not cert:
        raise ConfigError("tls_required is set but tls_cert and tls_key are not: TLS cannot be required without them")
    for name in ("tls_cert", "tls_key", "tls_root_ca_file"):
        path = values[name]
        if path and not os.path.isfile(path):
            raise ConfigError(f"option {name!r}: file {path!r} not found")


def _resolve(ns: argparse.Namespace, environ: Mapping[str, str] | None) -> Config:
    env = os.environ if environ is None else environ
    flags = _read_flags(ns)
    config_path = flags.get("config") or env.get("NSQMP_CONFIG", "")
    layers: list[tuple[str, dict[str, Any]]] = []
    if config_path:
        layers.append((SOURCE_FILE, read_file(config_path)))
    layers.append((SOURCE_ENV, _read_environ(env)))
    layers.append((SOURCE_FLAG, flags))

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, layer in layers:
        for attr, value in layer.items():
            values[attr] = value
            sources[attr] = source
    values["config"] = config_path
    if config_path and "config" not in flags:
        sources["config"] = SOURCE_ENV
    for opt in OPTIONS:
        if opt.attr not in values:
            values[opt.attr] = opt.resolve_default()
            sources[opt.attr] = SOURCE_DEFAULT
    _cross_check(values, sources)
    return Config(values, sources)


# --------------------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise ConfigError instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(_rewrite_argparse_error(message))


def _rewrite_argparse_error(message: str) -> str:
    prefix = "unrecognized arguments: "
    if message.startswith(prefix):
        token = message[len(prefix):].split(" ")[0]
        if token.startswith("-"):
            name = token.lstrip("-").split("=", 1)[0]
            opt = OPTIONS_BY_NAME.get(name.replace("_", "-"))
            if opt is not None:
                hint = f" (did you mean {opt.flag}?)"
            else:
                hint = _suggest(name, OPTIONS_BY_NAME, prefix="--", suffix="")
            return f"unknown option {token.split('=', 1)[0]}{hint}"
        return f"unexpected argument {token!r}"
    # "argument --tcp-address/-tcp-address: ..." -> "option --tcp-address: ..."
    return re.sub(r"^argument (--[\w-]+)(?:/-[\w-]+)*:", r"option \1:", message)


class _HelpFormatter(argparse.HelpFormatter):
    """Hides nsqd's single-dash aliases (``-tcp-address``) from ``--help``."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if any(s.startswith("--") for s in action.option_strings):
            action = copy.copy(action)
            action.option_strings = [s for s in action.option_strings if s.startswith("--") or len(s) == 2]
        return super()._format_action_invocation(action)


def _flag_help(opt: Option) -> str:
    origin = "nsqd" if opt.nsqd else "nsqmp only"
    where = f"TOML key {opt.key}" if opt.in_file else "not a TOML key"
    text = f"{opt.help} [{origin}; {where}; default: {opt.default_text()}]"
    return text.replace("%", "%%")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every option's flag to ``parser`` (dest = attribute name, no defaults:
    an unset flag is absent from the namespace)."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for opt in OPTIONS:
        group = groups.get(opt.section)
        if group is None:
            group = groups[opt.section] = parser.add_argument_group(SECTIONS[opt.section])
        names = [opt.flag, "-" + opt.name]
        kwargs: dict[str, Any] = {
            "dest": opt.attr,
            "default": argparse.SUPPRESS,
            "help": _flag_help(opt),
            "metavar": opt.display_metavar(),
        }
        if opt.type is OptType.BOOL:
            # Like Go's bool flags: "--snappy" alone means true; "--snappy=false".
            kwargs.update(nargs="?", const="true")
            if opt.metavar is None:
                kwargs["metavar"] = "true|false"
        elif opt.repeatable:
            kwargs["action"] = "append"
        group.add_argument(*names, **kwargs)


def add_ignored_nsqd_arguments(parser: argparse.ArgumentParser) -> None:
    """Add nsqd's flags that nsqmp accepts and ignores (options.IGNORED_NSQD): for the
    nsqd command line only, so a harness written for nsqd starts nsqmp unchanged."""
    group = parser.add_argument_group("nsqd flags accepted and ignored")
    for name, (takes_value, why) in IGNORED_NSQD.items():
        kwargs: dict[str, Any] = {"dest": "ignored_" + name.replace("-", "_"), "default": argparse.SUPPRESS,
                                  "help": f"accepted for nsqd compatibility and ignored: {why}"}
        if not takes_value:  # a Go bool flag: alone, or =true/=false
            kwargs.update(nargs="?", const="true", metavar="true|false")
        group.add_argument("--" + name, "-" + name, **kwargs)


def ignored_given(ns: argparse.Namespace, config: Config) -> list[tuple[str, str]]:
    """The ignored nsqd options (options.IGNORED_NSQD) given on the command line in ``ns``
    or as keys of the config file ``config`` was read from: (what the user wrote, e.g.
    ``-statsd-address`` or ``statsd_prefix in FILE``; why it is ignored), for the log."""
    given = [(f"-{name}", why) for name, (_, why) in IGNORED_NSQD.items()
             if hasattr(ns, "ignored_" + name.replace("-", "_"))]
    if config.config:
        try:
            with open(config.config, "rb") as f:
                keys = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            keys = {}  # read once already; a file changed since only loses this line
        given += [(f"{key} in {config.config}", IGNORED_NSQD[_IGNORED_KEYS[key]][1])
                  for key in keys if key in _IGNORED_KEYS]
    return given


def build_parser(prog: str | None = None, description: str | None = None, *, add_help: bool = True,
                 nsqd: bool = False) -> argparse.ArgumentParser:
    """An argparse parser with every option's flag plus ``--config FILE``; with ``nsqd``,
    nsqd's flags that nsqmp accepts and ignores too (the ``nsqmp-nsqd`` command line).

    Its errors raise :class:`ConfigError` rather than exiting.  Parse with it, add
    arguments of your own if you like, then call :func:`from_namespace`.
    """
    parser = _Parser(
        prog=prog,
        description=description,
        usage="%(prog)s [--config FILE] [--OPTION VALUE ...]",
        formatter_class=_HelpFormatter,
        allow_abbrev=False,
        add_help=add_help,
        epilog=(
            "Precedence: flags > NSQMP_<KEY> environment variables > --config file > defaults. "
            "Durations use Go syntax (60s, 250ms, 1h30m); sizes are bytes or 64KiB/100MiB."
        ),
    )
    add_arguments(parser)
    if nsqd:
        add_ignored_nsqd_arguments(parser)
    return parser


def from_namespace(ns: argparse.Namespace, *, environ: Mapping[str, str] | None = None) -> Config:
    """Resolve a Config from a namespace parsed by :func:`build_parser` (or a parser
    given :func:`add_arguments`), the environment (default ``os.environ``) and the
    file named by ``--config`` or ``NSQMP_CONFIG``."""
    return _resolve(ns, environ)


def load(argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None) -> Config:
    """Parse ``argv`` (default ``sys.argv[1:]``) and resolve the configuration.

    ``environ`` defaults to ``os.environ``; pass ``{}`` to ignore the environment.
    Raises :class:`ConfigError` on any problem.
    """
    if argv is None:
        argv = sys.argv[1:]
    ns = build_parser(prog="nsqmp").parse_args(list(argv))
    return _resolve(ns, environ)


# --------------------------------------------------------------------------------------
# Output.
# --------------------------------------------------------------------------------------


def render_resolved(config: Config) -> str:
    """The resolved configuration as TOML (``key = value`` lines grouped by section),
    which loads back to an equal Config.  Used by ``nsqmp check-config``."""
    lines = ["# nsqmp configuration, resolved"]
    if config.config:
        lines[0] += f" from {config.config}"
    lines[0] += " (flags > environment > file > defaults)"
    section = None
    for opt in OPTIONS:
        if not opt.in_file:
            continue
        if opt.section != section:
            section = opt.section
            lines.append("")
            lines.append(f"# {SECTIONS[section]}")
        lines.append(f"{opt.key} = {opt.to_toml(getattr(config, opt.attr))}")
    return "\n".join(lines) + "\n"
