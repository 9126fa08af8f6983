"""nsqmp configuration: every option declared once (:mod:`.options`), resolved from
flags, environment, TOML file and defaults (:mod:`.loader`), and rendered as the
example config file (:mod:`.example`)."""

from __future__ import annotations

from typing import Any

from .loader import (
    Config,
    ConfigError,
    add_arguments,
    build_parser,
    from_namespace,
    ignored_given,
    load,
    read_file,
    render_resolved,
)
from .options import (
    IGNORED_NSQD,
    OPTIONS,
    OPTIONS_BY_ATTR,
    OPTIONS_BY_KEY,
    OPTIONS_BY_NAME,
    SECTIONS,
    Address,
    Option,
    OptType,
    format_bytesize,
    format_duration,
    parse_address,
    parse_bool,
    parse_bytesize,
    parse_duration,
)

__all__ = [
    "Address",
    "Config",
    "ConfigError",
    "IGNORED_NSQD",
    "OPTIONS",
    "OPTIONS_BY_ATTR",
    "OPTIONS_BY_KEY",
    "OPTIONS_BY_NAME",
    "OptType",
    "Option",
    "SECTIONS",
    "add_arguments",
    "build_parser",
    "format_bytesize",
    "format_duration",
    "from_namespace",
    "ignored_given",
    "load",
    "parse_address",
    "parse_bool",
    "parse_bytesize",
    "parse_duration",
    "read_file",
    "render_example",
    "render_resolved",
]


def __getattr__(name: str) -> Any:
    # Imported lazily so `python -m nsqmp.config.example` does not find the module
    # already imported by its package (runpy warns about that).
    if name == "render_example":
        from .example import render_example

        return render_example
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
