"""Every nsqmp option, declared once.

Each :class:`Option` carries its flag name (nsqd's spelling, ``tcp-address``), its
type, default, range check and help text.  The command-line parser, the TOML keys,
the environment variables, the example config file (``deploy/nsqmp.toml.example``)
and ``nsqmp check-config`` are all generated from :data:`OPTIONS`; nothing else
lists options.

Names and defaults follow nsqd (see ``nsq-reference.md`` section 3) so an nsqd
config file loads unchanged, with these deliberate differences:

* ``tcp-address``, ``http-address`` and ``https-address`` bind loopback by default
  (nsqd binds ``0.0.0.0``); say ``0.0.0.0:4150`` or ``:4150`` to listen everywhere.
* ``data-path`` defaults to ``./nsqmp-data`` instead of the working directory.
* ``node-id`` is read from the ``node_id`` key; nsqd's ``id`` key is accepted too.
* ``log-prefix`` defaults to ``[nsqmp] ``.

Options with ``nsqd=False`` are nsqmp's own (process counts, ring sizes, ...).

Value types (``OptType``) and how a value is stored once parsed:

=========  ============================================================  ==========
type       accepted spellings                                            stored as
=========  ============================================================  ==========
str        a string                                                      ``str``
int        an integer, or a string of digits                             ``int``
bool       true/false, 1/0, t/f, yes/no, on/off                          ``bool``
float      a number                                                      ``float``
duration   Go syntax: ``60s``, ``250ms``, ``1h30m``, ``0``; a bare TOML  ``float``
           integer means milliseconds (as in nsqd config files)          seconds
bytesize   an integer number of bytes, or ``64KiB``/``100MiB``/``1GB``   ``int``
address    ``host:port``; empty host = all interfaces; IPv6 in brackets   ``str``
path       a file-system path                                            ``str``
=========  ============================================================  ==========

A repeatable option stores a ``tuple`` of values of its type.
"""

from __future__ import annotations

import enum
import hashlib
import ipaddress
import math
import os
import re
import socket
import zlib
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Iterable, NamedTuple

__all__ = [
    "Address",
    "OPTIONS",
    "OPTIONS_BY_ATTR",
    "OPTIONS_BY_KEY",
    "OPTIONS_BY_NAME",
    "OptType",
    "Option",
    "SECTIONS",
    "at_least",
    "between",
    "format_bytesize",
    "format_duration",
    "parse_address",
    "parse_bool",
    "parse_bytesize",
    "parse_duration",
    "power_of_two_between",
]


class OptType(str, enum.Enum):
    """The value type of an option (see the module docstring for spellings)."""

    STR = "str"
    INT = "int"
    BOOL = "bool"
    FLOAT = "float"
    DURATION = "duration"
    BYTESIZE = "bytesize"
    ADDRESS = "address"
    PATH = "path"


STR = OptType.STR
INT = OptType.INT
BOOL = OptType.BOOL
FLOAT = OptType.FLOAT
DURATION = OptType.DURATION
BYTESIZE = OptType.BYTESIZE
ADDRESS = OptType.ADDRESS
PATH = OptType.PATH


# --------------------------------------------------------------------------------------
# Scalar parsers.  Each takes a value as found in TOML, a flag or the environment and
# returns the stored value, or raises ValueError whose message says what was expected
# (the loader adds where the value came from and what it was).
# --------------------------------------------------------------------------------------

_TRUE = frozenset({"1", "t", "true", "yes", "y", "on"})
_FALSE = frozenset({"0", "f", "false", "no", "n", "off"})


def parse_bool(value: Any) -> bool:
    """Parse a boolean: a TOML bool, or true/false, 1/0, t/f, yes/no, on/off."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise ValueError("expected a boolean (true or false)")


def _parse_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9]+\s*", value):
        return int(value)
    raise ValueError("expected an integer")


def _parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number")
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            raise ValueError("expected a number") from None
    else:
        raise ValueError("expected a number")
    if not math.isfinite(result):
        raise ValueError("expected a finite number")
    return result


def _parse_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


_NS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_TERM = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
_DURATION_EXPECTED = 'expected a duration such as "60s", "250ms" or "1h30m"'


def _parse_duration_ns(text: str) -> int:
    """Parse Go ``time.ParseDuration`` syntax into integer nanoseconds."""
    s = text.strip()
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(_DURATION_EXPECTED)
    total = Fraction(0)
    pos = 0
    while pos < len(s):
        m = _DURATION_TERM.match(s, pos)
        assert m is not None  # the pattern can match the empty string
        whole, frac, unit = m.group(1), m.group(2), m.group(3)
        if not whole and not frac:
            raise ValueError(_DURATION_EXPECTED)
        if not unit:
            raise ValueError(_DURATION_EXPECTED + " (a number needs a unit)")
        if unit not in _NS_PER_UNIT:
            raise ValueError(f"{_DURATION_EXPECTED} (unknown unit {unit!r})")
        number = Fraction(int(whole or "0"))
        if frac:
            number += Fraction(int(frac), 10 ** len(frac))
        total += number * _NS_PER_UNIT[unit]
        pos = m.end()
    return sign * round(total)


def parse_duration(value: Any) -> float:
    """Parse a duration into float seconds.

    Strings use Go syntax (``"60s"``, ``"1h30m"``, ``"250ms"``, ``"1.5s"``, ``"0"``;
    units ns, us, ms, s, m, h).  A bare integer (as TOML gives it) means
    milliseconds, which is how nsqd reads integers in its config file.
    """
    if isinstance(value, bool):
        raise ValueError(_DURATION_EXPECTED)
    if isinstance(value, int):
        return value / 1000.0
    if isinstance(value, str):
        return _parse_duration_ns(value) / 1e9
    raise ValueError(_DURATION_EXPECTED)


def format_duration(seconds: float) -> str:
    """Render seconds in Go duration syntax that :func:`parse_duration` reads back.

    Whole numbers of seconds below two minutes stay in seconds (``60s``, ``90s``);
    longer ones are split into hours, minutes and seconds, dropping zero parts
    (``15m``, ``1h``, ``1h30m``); sub-second values use the largest exact unit
    (``250ms``, ``25ms``, ``1500us``).
    """
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    sec_ns = 1_000_000_000
    whole, sub = divmod(ns, sec_ns)
    parts: list[str] = []
    if whole >= 120:
        hours, rest = divmod(whole, 3600)
        minutes, secs = divmod(rest, 60)
        if hours:
            parts.append(f"{hours}h")
        if minutes:
            parts.append(f"{minutes}m")
        if secs:
            parts.append(f"{secs}s")
    elif whole:
        parts.append(f"{whole}s")
    if sub:
        for unit, size in (("ms", 1_000_000), ("us", 1_000), ("ns", 1)):
            if sub % size == 0:
                parts.append(f"{sub // size}{unit}")
                break
    return sign + "".join(parts)


_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_BYTESIZE_EXPECTED = 'expected a size in bytes such as 1048576 or "100MiB"'


def parse_bytesize(value: Any) -> int:
    """Parse a byte count: an integer, or a string like ``"4194304"``, ``"64KiB"``,
    ``"100MiB"``, ``"1GiB"`` (binary) or ``"1MB"`` (decimal)."""
    if isinstance(value, bool):
        raise ValueError(_BYTESIZE_EXPECTED)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([-+]?[0-9]+)\s*([A-Za-z]*)\s*", value)
        if m and m.group(2).lower() in _BYTE_UNITS:
            return int(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]
    raise ValueError(_BYTESIZE_EXPECTED)


def format_bytesize(n: int) -> str:
    """Render a byte count in the largest exact binary unit (``4MiB``) or bytes."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


class Address(NamedTuple):
    """A parsed ``host:port``.  ``host`` is ``""`` for "all interfaces" (0.0.0.0)
    and has no brackets for IPv6."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


_HOSTNAME = re.compile(
    r"(?=.{1,253}\.?$)"
    r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
)


def _check_host(host: str) -> None:
    if re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not a valid IPv4 address") from None
        return
    if not _HOSTNAME.fullmatch(host):
        raise ValueError(f"{host!r} is not a valid host name")


def parse_address(value: Any) -> Address:
    """Parse ``host:port``: ``127.0.0.1:4150``, ``:4150`` (all interfaces),
    ``[::1]:4150``, ``nsqd-1.example.com:4150``.  The port must be 0..65535."""
    if not isinstance(value, str):
        raise ValueError("expected host:port")
    text = value.strip()
    if text.startswith("["):
        m = re.fullmatch(r"\[([^\]]*)\]:([^:]*)", text)
        if not m:
            raise ValueError("expected host:port ([IPv6]:port for IPv6)")
        host, port_text = m.group(1), m.group(2)
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not a valid IPv6 address") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError("expected host:port")
        if ":" in host:
            raise ValueError("expected host:port (write IPv6 addresses in brackets, like [::1]:4150)")
        if host:
            _check_host(host)
    if not port_text.isascii() or not port_text.isdigit():
        raise ValueError("expected host:port with a numeric port")
    port = int(port_text)
    if port > 65535:
        raise ValueError("port must be between 0 and 65535")
    return Address(host, port)


def _parse_address_text(value: Any) -> str:
    parse_address(value)
    return str(value).strip()


def _parse_auth_address(value: Any) -> str:
    """nsqd accepts ``host:port`` or a full ``http(s)://`` URL for auth servers."""
    if isinstance(value, str) and "://" in value:
        from urllib.parse import urlsplit

        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("expected host:port or an http:// or https:// URL")
        return value.strip()
    return _parse_address_text(value)


def _parse_tls_required(value: Any) -> bool | str:
    """nsqd's ``--tls-required``: true, false or ``tcp-https`` (TLS required on TCP
    only, plain HTTP stays open).  Stored as ``False``, ``True`` or ``"tcp-https"``,
    so ``if config.tls_required:`` means "some TLS is required"."""
    if isinstance(value, str) and value.strip().lower() == "tcp-https":
        return "tcp-https"
    try:
        return parse_bool(value)
    except ValueError:
        raise ValueError("expected true, false or tcp-https") from None


# --------------------------------------------------------------------------------------
# Checks: callables that raise ValueError("must be ...") for a parsed value.
# --------------------------------------------------------------------------------------

Check = Callable[[Any], None]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def between(lo: float, hi: float, *, unit: str = "") -> Check:
    """Value must lie in ``[lo, hi]``; durations are given in seconds."""

    def show(x: float) -> str:
        return format_duration(x) if unit == "duration" else _num(x)

    def check(value: Any) -> None:
        if not lo <= value <= hi:
            raise ValueError(f"must be between {show(lo)} and {show(hi)}")

    return check


def at_least(lo: float, *, unit: str = "") -> Check:
    """Value must be ``>= lo``; durations are given in seconds."""

    def check(value: Any) -> None:
        if value < lo:
            shown = format_duration(lo) if unit == "duration" else _num(lo)
            raise ValueError(f"must be at least {shown}")

    return check


def positive(value: Any) -> None:
    """Value must be greater than zero."""
    if value <= 0:
        raise ValueError("must be greater than 0")


def non_empty(value: Any) -> None:
    if not value:
        raise ValueError("must not be empty")


def power_of_two_between(lo: int, hi: int) -> Check:
    """Value must be a power of two in ``[lo, hi]`` (bytes)."""

    def check(value: Any) -> None:
        if not (lo <= value <= hi and value & (value - 1) == 0):
            raise ValueError(
                f"must be a power of two between {format_bytesize(lo)} and {format_bytesize(hi)}"
            )

    return check


def _percentile(value: Any) -> None:
    if not 0 < value <= 1:
        raise ValueError("must be greater than 0 and at most 1")


# --------------------------------------------------------------------------------------
# The declaration type.
# --------------------------------------------------------------------------------------

_MISSING: Any = object()

_SCALAR_PARSERS: dict[OptType, Callable[[Any], Any]] = {
    STR: _parse_str,
    INT: _parse_int,
    BOOL: parse_bool,
    FLOAT: _parse_float,
    DURATION: parse_duration,
    BYTESIZE: parse_bytesize,
    ADDRESS: _parse_address_text,
    PATH: _parse_str,
}

_METAVARS = {
    STR: "STR",
    INT: "INT",
    BOOL: "BOOL",
    FLOAT: "FLOAT",
    DURATION: "DURATION",
    BYTESIZE: "BYTES",
    ADDRESS: "HOST:PORT",
    PATH: "PATH",
}


@dataclass(frozen=True)
class Option:
    """One option: declared once, used by the flags, TOML, env, example and docs.

    ``name``          flag spelling, as nsqd spells it (``tcp-address``).
    ``type``          an :class:`OptType`; for a repeatable option, the item type.
    ``default``       the default (declared in the option's own syntax: durations may
                      be Go strings like ``"60s"``); ignored if ``default_factory``.
    ``help``          one or two sentences; rendered into ``--help`` and the example.
    ``check``         raises ``ValueError("must be ...")`` for a bad parsed value
                      (applied to each item of a repeatable option).
    ``section``       a key of :data:`SECTIONS`, to group options in the example.
    ``nsqd``          True if nsqd has this option, False if it is nsqmp's own.
    ``repeatable``    the flag may be given several times; the value is a tuple.
    ``key``           TOML key and Python attribute (default: name with ``-`` -> ``_``).
    ``aliases``       other TOML keys accepted for this option (e.g. nsqd's ``id``).
    ``default_factory`` computes a machine-dependent default at load time.
    ``default_doc``   how a computed default is described in help and the example.
    ``example``       value shown in the example file when the default is computed.
    ``choices``       allowed values of a str option (matched case-insensitively).
    ``allow_empty``   for address/path options: ``""`` is allowed (means "off").
    ``converter``     replaces the type's parser for an unusual value syntax.
    ``comma_separated`` a repeatable flag value may hold several items ``a,b``.
    ``in_file``       False for ``config`` itself, which is not a TOML key.
    ``metavar``       placeholder in ``--help`` (default from the type).
    """

    name: str
    type: OptType
    default: Any
    help: str
    check: Check | None = None
    section: str = "general"
    nsqd: bool = True
    repeatable: bool = False
    key: str = ""
    aliases: tuple[str, ...] = ()
    default_factory: Callable[[], Any] | None = None
    default_doc: str | None = None
    example: Any = _MISSING
    choices: tuple[str, ...] | None = None
    allow_empty: bool = False
    converter: Callable[[Any], Any] | None = None
    comma_separated: bool = False
    in_file: bool = True
    metavar: str | None = None
    _static_default: Any = field(default=_MISSING, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.name.replace("-", "_"))
        if self.section not in SECTIONS:
            raise ValueError(f"option {self.name!r}: unknown section {self.section!r}")
        if self.default_factory is None:
            # Validate the declared default now, so a bad declaration fails at import.
            object.__setattr__(self, "_static_default", self.parse(self.default))

    # names -------------------------------------------------------------------------
    @property
    def attr(self) -> str:
        """Attribute name on :class:`~nsqmp.config.loader.Config` (= the TOML key)."""
        return self.key

    @property
    def flag(self) -> str:
        return "--" + self.name

    @property
    def env(self) -> str:
        """Environment variable that overrides the file (``NSQMP_MEM_QUEUE_SIZE``)."""
        return "NSQMP_" + self.key.upper()

    @property
    def origin(self) -> str:
        return "nsqd" if self.nsqd else "nsqmp"

    @property
    def is_computed(self) -> bool:
        return self.default_factory is not None

    def display_metavar(self) -> str:
        if self.metavar:
            return self.metavar
        if self.choices:
            return "{" + ",".join(c or '""' for c in self.choices) + "}"
        return _METAVARS[self.type]

    # values ------------------------------------------------------------------------
    def resolve_default(self) -> Any:
        """The parsed default value (computed now for machine-dependent defaults)."""
        if self.default_factory is not None:
            return self.parse(self.default_factory())
        return self._static_default

    def parse_item(self, value: Any) -> Any:
        """Parse and check one scalar value; raises ValueError("expected ..."/"must ...")."""
        if self.converter is not None:
            result = self.converter(value)
        elif self.type in (ADDRESS, PATH) and self.allow_empty and isinstance(value, str) and not value.strip():
            result = ""
        else:
            result = _SCALAR_PARSERS[self.type](value)
        if self.choices is not None:
            lowered = str(result).lower()
            if lowered not in self.choices:
                raise ValueError("expected one of " + ", ".join(c or '""' for c in self.choices))
            result = lowered
        if self.type in (DURATION, BYTESIZE) and result < 0:
            raise ValueError("must not be negative")
        if self.type is PATH and not self.allow_empty and not result:
            raise ValueError("must not be empty")
        if self.check is not None:
            self.check(result)
        return result

    def split(self, value: Any) -> list[Any]:
        """The raw items of a repeatable option's value: a list/tuple as is, a string
        split on commas (as nsqd reads list values from its config file), or one item."""
        if isinstance(value, str):
            return [s for s in (p.strip() for p in value.split(",")) if s]
        if isinstance(value, (list, tuple)):
            return list(value)
        return [value]

    def parse(self, value: Any) -> Any:
        """Parse a whole value: a scalar, or for a repeatable option (see :meth:`split`)
        a tuple of items.  Item errors read ``item N: ...``."""
        if not self.repeatable:
            return self.parse_item(value)
        out = []
        for i, item in enumerate(self.split(value), 1):
            try:
                out.append(self.parse_item(item))
            except ValueError as exc:
                raise ValueError(f"item {i}: {exc}") from None
        return tuple(out)

    def to_toml(self, value: Any) -> str:
        """Render a parsed value as a TOML literal that :meth:`parse` reads back."""
        if self.repeatable:
            return "[" + ", ".join(self._item_to_toml(v) for v in value) + "]"
        return self._item_to_toml(value)

    def _item_to_toml(self, value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if self.type is DURATION:
            return toml_string(format_duration(value))
        if isinstance(value, (int, float)):
            return repr(value)
        return toml_string(str(value))

    def default_text(self) -> str:
        """The default as shown in help: the TOML literal or the computed-default note."""
        if self.default_doc is not None:
            return self.default_doc
        return self.to_toml(self._static_default)


def toml_string(s: str) -> str:
    """A TOML basic string literal."""
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


# --------------------------------------------------------------------------------------
# Computed defaults.
# --------------------------------------------------------------------------------------


def default_hostname() -> str:
    """nsqd's default ``--broadcast-address``: the OS host name."""
    return socket.gethostname()


def default_node_id() -> int:
    """nsqd's default ``--node-id``: ``crc32(md5(hostname)) % 1024``."""
    digest = hashlib.md5(socket.gethostname().encode(), usedforsecurity=False).digest()
    return zlib.crc32(digest) % 1024


def default_acceptors() -> int:
    """One acceptor per CPU this process may run on, between 1 and 64."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        cpus = os.cpu_count() or 1
    return max(1, min(64, cpus))


# --------------------------------------------------------------------------------------
# The declarations.
# --------------------------------------------------------------------------------------

#: Section key -> title, in the order the example file shows them.
SECTIONS: dict[str, str] = {
    "general": "General",
    "listeners": "Listeners",
    "cluster": "Cluster membership and identity",
    "storage": "Storage: memory and disk queues",
    "messages": "Messages and timeouts",
    "clients": "Client connections",
    "compression": "Compression",
    "tls": "TLS",
    "auth": "Authorization",
    "latency": "End-to-end processing latency",
    "statsd": "statsd push",
    "logging": "Logging",
    "processes": "nsqmp processes (nsqmp only)",
}

_KIB = 1024
_GIB = 1024**3

OPTIONS: tuple[Option, ...] = (
    # -- general ----------------------------------------------------------------------
    Option(
        "config", PATH, "",
        "Path to a TOML config file. Command-line flags override it; it overrides defaults.",
        allow_empty=True, in_file=False, metavar="FILE",
    ),
    # -- listeners --------------------------------------------------------------------
    Option(
        "tcp-address", ADDRESS, "127.0.0.1:4150",
        "<host>:<port> to listen on for TCP clients. nsqmp binds loopback by default "
        "(nsqd: 0.0.0.0:4150); use 0.0.0.0:4150 or :4150 to listen on all interfaces.",
        section="listeners",
    ),
    Option(
        "http-address", ADDRESS, "127.0.0.1:4151",
        "<host>:<port> to listen on for HTTP clients; empty disables the HTTP API. "
        "nsqmp binds loopback by default (nsqd: 0.0.0.0:4151).",
        section="listeners", allow_empty=True,
    ),
    Option(
        "https-address", ADDRESS, "127.0.0.1:4152",
        "<host>:<port> to listen on for HTTPS clients, used only when tls-cert and tls-key "
        "are set. nsqmp binds loopback by default (nsqd: 0.0.0.0:4152).",
        section="listeners", allow_empty=True,
    ),
    # -- cluster ----------------------------------------------------------------------
    Option(
        "broadcast-address", STR, None,
        "Address this node registers with nsqlookupd (clients connect to it).",
        section="cluster", check=non_empty, default_factory=default_hostname,
        default_doc="this machine's host name", example="nsq-1.example.com", metavar="HOST",
    ),
    Option(
        "broadcast-tcp-port", INT, 0,
        "TCP port registered with nsqlookupd; 0 means the port tcp-address listens on.",
        section="cluster", check=between(0, 65535), metavar="PORT",
    ),
    Option(
        "broadcast-http-port", INT, 0,
        "HTTP port registered with nsqlookupd; 0 means the port http-address listens on.",
        section="cluster", check=between(0, 65535), metavar="PORT",
    ),
    Option(
        "lookupd-tcp-address", ADDRESS, (),
        "nsqlookupd TCP address to register with (repeat the flag for several).",
        section="cluster", repeatable=True, key="nsqlookupd_tcp_addresses",
    ),
    Option(
        "node-id", INT, None,
        "Id of this node, 0..1023, which keeps message ids unique across nodes. nsqd's "
        "config key 'id' is accepted too.",
        section="cluster", check=between(0, 1023), aliases=("id",),
        default_factory=default_node_id, default_doc="crc32(md5(host name)) % 1024",
        example=0,
    ),
    Option(
        "topology-region", STR, "",
        "nsqd's region of this node, for its topology-aware-consumption experiment. Accepted "
        "for compatibility; nsqmp does not implement the experiment, so this has no effect.",
        section="cluster",
    ),
    Option(
        "topology-zone", STR, "",
        "nsqd's zone of this node, for its topology-aware-consumption experiment. Accepted "
        "for compatibility; nsqmp does not implement the experiment, so this has no effect.",
        section="cluster",
    ),
    Option(
        "enable-experiment", STR, (),
        "nsqd's experimental features to enable (repeatable). Accepted for compatibility; nsqmp "
        "implements no experiment, so this has no effect.",
        section="cluster", repeatable=True, key="enable_experiment",
        choices=("topology-aware-consumption",), metavar="NAME",
    ),
    Option(
        "http-client-connect-timeout", DURATION, "2s",
        "Connect timeout of HTTP requests this node makes (nsqlookupd, auth server).",
        section="cluster", check=positive,
    ),
    Option(
        "http-client-request-timeout", DURATION, "5s",
        "Request timeout of HTTP requests this node makes (nsqlookupd, auth server).",
        section="cluster", check=positive,
    ),
    # -- storage ----------------------------------------------------------------------
    Option(
        "data-path", PATH, "./nsqmp-data",
        "Directory for message data and metadata, relative to the working directory "
        "unless absolute; locked while nsqmp runs. (nsqd's default is the working directory.)",
        section="storage",
    ),
    Option(
        "mem-queue-size", INT, 10000,
        "Messages an #ephemeral topic or channel holds (in memory only); more are dropped "
        "and counted. Durable topics always keep their messages in segment files; the "
        "router also holds this many per channel (at least 100, at most 10,000) as objects, "
        "and reads the rest back from the files (the kernel's page cache) as consumers drain them.",
        section="storage", check=at_least(0),
    ),
    Option(
        "max-bytes-per-file", BYTESIZE, 104857600,
        "Bytes per disk-queue file before it rolls over to the next one (100 MiB).",
        section="storage", check=at_least(1024),
    ),
    Option(
        "sync-every", INT, 2500,
        "Appends (a PUB, or a whole MPUB) to a segment file between syncs (fdatasync) of it.",
        section="storage", check=at_least(1),
    ),
    Option(
        "sync-timeout", DURATION, "2s",
        "Longest time between syncs of segment files and ack logs while there is activity.",
        section="storage", check=positive,
    ),
    Option(
        "max-topic-bytes", BYTESIZE, 0,
        "Cap on the bytes a topic's segment files may hold (0: no cap); what happens at the "
        "cap is topic-full-policy.",
        section="storage", nsqd=False, check=at_least(0),
    ),
    Option(
        "retention-time", DURATION, "0s",
        "Keep a topic's finished segment files this long after their last write, for "
        "/channel/rewind (0: off, a file goes once every channel is done with it).",
        section="storage", nsqd=False, check=at_least(0),
    ),
    Option(
        "retention-bytes", BYTESIZE, 0,
        "Keep at most this many bytes of finished segment files per topic, oldest deleted "
        "first, for /channel/rewind (0: off).",
        section="storage", nsqd=False, check=at_least(0),
    ),
    Option(
        "topic-full-policy", STR, "refuse",
        "At max-topic-bytes: 'refuse' new messages (E_PUB_FAILED, HTTP 503) until consumers "
        "catch up, or 'drop-oldest' queued messages and count them (nsqmp_dropped_count).",
        section="storage", nsqd=False, choices=("refuse", "drop-oldest"),
    ),
    # -- messages ---------------------------------------------------------------------
    Option(
        "msg-timeout", DURATION, "60s",
        "Default time a delivered message may stay in flight before it is requeued.",
        section="messages", check=positive,
    ),
    Option(
        "max-msg-timeout", DURATION, "15m",
        "Largest msg_timeout a client may ask for in IDENTIFY, and cap for TOUCH.",
        section="messages", check=positive,
    ),
    Option(
        "max-msg-size", BYTESIZE, 1048576,
        "Largest message body accepted, in bytes.",
        section="messages", check=at_least(1),
    ),
    Option(
        "max-body-size", BYTESIZE, 5242880,
        "Largest command body accepted (MPUB, IDENTIFY, AUTH), in bytes.",
        section="messages", check=at_least(1),
    ),
    Option(
        "max-req-timeout", DURATION, "1h",
        "Largest requeue delay (REQ) and publish deferral (DPUB, HTTP defer=).",
        section="messages",
    ),
    Option(
        "msg-ttl", DURATION, "0",
        "Messages older than this (since published) are dropped and counted instead of "
        "delivered (expired_count); 0: never. POST /topic/ttl sets a topic's own.",
        section="storage", nsqd=False, check=at_least(0),
    ),
    Option(
        "max-attempts", INT, 0,
        "A message delivered this many times goes to the channel's dead-letter topic "
        "(<topic>.dead) instead of an (N+1)-th delivery; 0: never. POST "
        "/channel/dead-letter sets a channel's own.",
        section="storage", nsqd=False, check=between(0, 65535),
    ),
    Option(
        "queue-scan-worker-pool-max", INT, 4,
        "nsqd's in-flight/deferred queue scan workers. Accepted for compatibility; nsqmp's "
        "timer process keeps deadlines in heaps and does not scan, so this has no effect.",
        section="messages", check=at_least(1),
    ),
    Option(
        "queue-scan-selection-count", INT, 20,
        "nsqd's channels per queue scan. Accepted for compatibility; no effect in nsqmp.",
        section="messages", check=at_least(1),
    ),
    # -- clients ----------------------------------------------------------------------
    Option(
        "max-rdy-count", INT, 2500,
        "Largest RDY count a client may set.",
        section="clients", check=at_least(1),
    ),
    Option(
        "max-heartbeat-interval", DURATION, "60s",
        "Largest heartbeat_interval a client may ask for in IDENTIFY.",
        section="clients", check=positive,
    ),
    Option(
        "max-output-buffer-size", BYTESIZE, 65536,
        "Largest output_buffer_size a client may ask for in IDENTIFY, in bytes.",
        section="clients", check=at_least(1),
    ),
    Option(
        "max-output-buffer-timeout", DURATION, "30s",
        "Largest output_buffer_timeout a client may ask for in IDENTIFY.",
        section="clients",
    ),
    Option(
        "min-output-buffer-timeout", DURATION, "25ms",
        "Smallest output_buffer_timeout a client may ask for in IDENTIFY.",
        section="clients",
    ),
    Option(
        "output-buffer-timeout", DURATION, "250ms",
        "Default time a client's output is buffered before it is flushed.",
        section="clients",
    ),
    Option(
        "max-channel-consumers", INT, 0,
        "Largest number of consumers per channel on this node; 0 means unlimited.",
        section="clients", check=at_least(0),
    ),
    # -- compression ------------------------------------------------------------------
    Option(
        "deflate", BOOL, True,
        "Allow clients to negotiate deflate compression.",
        section="compression",
    ),
    Option(
        "max-deflate-level", INT, 6,
        "Largest deflate level a client may ask for (1..9).",
        section="compression", check=between(1, 9),
    ),
    Option(
        "snappy", BOOL, True,
        "Allow clients to negotiate snappy compression.",
        section="compression",
    ),
    # -- tls --------------------------------------------------------------------------
    Option(
        "tls-cert", PATH, "",
        "Path to the certificate file (PEM); with tls-key, enables TLS and HTTPS.",
        section="tls", allow_empty=True,
    ),
    Option(
        "tls-key", PATH, "",
        "Path to the private key file (PEM) of tls-cert.",
        section="tls", allow_empty=True,
    ),
    Option(
        "tls-root-ca-file", PATH, "",
        "Path to a PEM bundle of CAs used to verify client certificates and, instead of the "
        "system roots, the certificates of https auth servers.",
        section="tls", allow_empty=True,
    ),
    Option(
        "tls-client-auth-policy", STR, "",
        "Client certificate policy: require (a certificate) or require-verify (one signed "
        "by tls-root-ca-file); setting it turns on tls-required.",
        section="tls", choices=("", "require", "require-verify"),
    ),
    Option(
        "tls-required", BOOL, False,
        "Require clients to use TLS: true, false, or tcp-https (TLS on TCP after IDENTIFY, "
        "plain HTTP stays open).",
        section="tls", converter=_parse_tls_required, metavar="{true,false,tcp-https}",
    ),
    Option(
        "tls-min-version", STR, "tls1.0",
        "Lowest TLS version accepted: tls1.0, tls1.1, tls1.2 or tls1.3.",
        section="tls", choices=("tls1.0", "tls1.1", "tls1.2", "tls1.3"),
    ),
    # -- auth -------------------------------------------------------------------------
    Option(
        "auth-http-address", STR, (),
        "Authorization server: host:port or an http(s):// URL (repeatable). When set, "
        "clients must AUTH before they can publish or subscribe.",
        section="auth", repeatable=True, key="auth_http_addresses",
        converter=_parse_auth_address, metavar="HOST:PORT|URL",
    ),
    Option(
        "auth-http-request-method", STR, "get",
        "HTTP method used to call the authorization server: get or post.",
        section="auth", choices=("get", "post"),
    ),
    # -- latency ----------------------------------------------------------------------
    Option(
        "e2e-processing-latency-percentile", FLOAT, (),
        "Percentile of end-to-end processing latency to track per topic and channel, in "
        "(0, 1] (repeatable, or comma separated: 0.99,0.95).",
        section="latency", repeatable=True, key="e2e_processing_latency_percentiles",
        check=_percentile, comma_separated=True, metavar="FLOAT",
    ),
    Option(
        "e2e-processing-latency-window-time", DURATION, "10m",
        "Time window over which the latency percentiles are computed.",
        section="latency", check=positive,
    ),
    # -- statsd -----------------------------------------------------------------------
    Option(
        "statsd-address", ADDRESS, "",
        "UDP <addr>:<port> of a statsd daemon for pushing stats (nsqd's names and types; "
        "acceptor 0 pushes for the whole broker). Empty: no push.",
        section="statsd", allow_empty=True,
    ),
    Option(
        "statsd-prefix", STR, "nsq.%s",
        "Prefix used for keys sent to statsd; %s is replaced by <broadcast-address>_<http "
        "port> with '.' and ':' as '_', and a '.' is added at the end if missing.",
        section="statsd",
    ),
    Option(
        "statsd-interval", DURATION, "60s",
        "Duration between pushes to statsd; a push is spread over the interval less one "
        "second, as nsqd does.",
        section="statsd", check=between(0.001, 86400, unit="duration"),
    ),
    Option(
        "statsd-mem-stats", BOOL, True,
        "Push the memory and GC figures too (mem.*: /stats' memory block, see docs/metrics.md).",
        section="statsd",
    ),
    Option(
        "statsd-udp-packet-size", INT, 508,
        "The size in bytes of statsd UDP packets: lines are gathered into packets up to it.",
        section="statsd", check=between(1, 65507),
    ),
    Option(
        "statsd-exclude-ephemeral", BOOL, False,
        "Skip ephemeral topics and channels when pushing to statsd.",
        section="statsd",
    ),
    # -- logging ----------------------------------------------------------------------
    Option(
        "log-level", STR, "info",
        "Lowest level logged: debug, info, warn, error or fatal.",
        section="logging", choices=("debug", "info", "warn", "error", "fatal"),
    ),
    Option(
        "log-prefix", STR, "[nsqmp] ",
        "Prefix of every log line. (nsqd's default is \"[nsqd] \".)",
        section="logging",
    ),
    Option(
        "verbose", BOOL, False,
        "Deprecated in nsqd and ignored; use log-level = \"debug\".",
        section="logging",
    ),
    Option(
        "log-format", STR, "text",
        "How log lines are written: text (nsqd's lines) or json (one object per line: time, "
        "level, role, pid, msg and the line's fields, for log shippers).",
        section="logging", nsqd=False, choices=("text", "json"),
    ),
    # -- nsqmp's own ------------------------------------------------------------------
    Option(
        "acceptors", INT, None,
        "Acceptor processes: each owns client connections on the shared TCP and HTTP "
        "ports (SO_REUSEPORT).",
        section="processes", nsqd=False, check=between(1, 64),
        default_factory=default_acceptors, default_doc="number of usable CPUs, 1..64",
        example=4,
    ),
    Option(
        "acceptor-steering", STR, "pack",
        "Which acceptor a new TCP connection goes to. pack: the first running acceptor that "
        "used less than 80% of a core over the last quarter second, holds fewer than 64 "
        "connections and did not take 8 within the last 0.2 s (fewer processes wake on a machine whose cores the clients share: "
        "one-message publishes and consumers under load gain, heavy MPUB publishers on few "
        "connections lose, docs/tuning.md); once all are that busy, the kernel's hash. "
        "spread: always the kernel's hash (SO_REUSEPORT). Established connections never "
        "move; HTTP is always hashed.",
        section="processes", nsqd=False, choices=("pack", "spread"),
    ),
    Option(
        "routers", INT, 2,
        "Router processes: each owns a share of the topics (by a stable hash of the name), "
        "their channels and delivery state.",
        section="processes", nsqd=False, check=between(1, 64),
    ),
    Option(
        "acceptor-nice", INT, 4,
        "Niceness each acceptor adds to its own at start (0-19). With the CPU full, a "
        "higher value lets the routers and the timer (deliveries, deadlines) run first, "
        "and the publishers wait: consumers keep up with heavy publishing (docs/tuning.md). "
        "0 gives publishers and consumers the same priority.",
        section="processes", nsqd=False, check=between(0, 19),
    ),
    Option(
        "busy-poll", DURATION, "200us",
        "After a publisher's command, an acceptor keeps looking for the next one this long "
        "at most before it sleeps (adaptive: only while they come that close together and "
        "no process waits for a CPU). Saves a wake-up per round trip at the price of that "
        "CPU; 0 turns it off.",
        section="processes", nsqd=False, check=between(0, 0.01, unit="duration"),
    ),
    Option(
        "ring-size", BYTESIZE, 8388608,
        "Bytes of each shared-memory ring between two processes (8 MiB); a power of two "
        "between 64 KiB and 1 GiB. One ring record holds at most a quarter of it, so it must "
        "be at least 4 x (max-msg-size + 256).",
        section="processes", nsqd=False, check=power_of_two_between(64 * _KIB, _GIB),
    ),
    Option(
        "heartbeat-timeout", DURATION, "10s",
        "The supervisor kills and restarts a child whose heartbeat in shared memory is "
        "older than this.",
        section="processes", nsqd=False, check=between(0.1, 3600, unit="duration"),
    ),
    Option(
        "restart-backoff", DURATION, "1s",
        "A crashed child process is restarted at once; one that dies again within a second "
        "of its start (a crash loop) is restarted after this delay, doubled for each more "
        "such death in a row (up to 30s, or this value if larger); the fifth in a row halts "
        "the broker. A child that ran a second or longer starts the count again. 0: always "
        "at once.",
        section="processes", nsqd=False, check=between(0, 300, unit="duration"),
    ),
)


#: nsqd's options that nsqmp accepts and ignores: flag name -> (takes a value, why).
#: ``nsqmp-nsqd`` takes them on its command line and a config file may hold their keys,
#: so harnesses and files written for nsqd keep working; nothing reads them and ``nsqmp
#: serve`` has no such flags. None today (statsd's are real options now).
IGNORED_NSQD: dict[str, tuple[bool, str]] = {}


def _index(options: Iterable[Option]) -> tuple[dict[str, Option], dict[str, Option], dict[str, Option]]:
    by_name: dict[str, Option] = {}
    by_key: dict[str, Option] = {}
    by_attr: dict[str, Option] = {}
    for opt in options:
        for table, names in ((by_name, [opt.name]), (by_attr, [opt.attr])):
            for n in names:
                if n in table:
                    raise ValueError(f"option {n!r} declared twice")
                table[n] = opt
        if opt.in_file:
            for k in (opt.key, *opt.aliases):
                if k in by_key:
                    raise ValueError(f"TOML key {k!r} declared twice")
                by_key[k] = opt
    return by_name, by_key, by_attr


#: Option by flag name (``tcp-address``).
#: Option by TOML key, aliases included (``tcp_address``, ``id``); ``config`` excluded.
#: Option by attribute name on Config (``tcp_address``, ``nsqlookupd_tcp_addresses``).
OPTIONS_BY_NAME, OPTIONS_BY_KEY, OPTIONS_BY_ATTR = _index(OPTIONS)
