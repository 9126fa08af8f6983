"""Render the example config file, ``deploy/nsqmp.toml.example``, from the declarations.

Regenerate it with::

    python -m nsqmp.config.example > deploy/nsqmp.toml.example

A test checks that the committed file equals :func:`render_example` and loads.
"""

from __future__ import annotations

import textwrap

from .options import OPTIONS, SECTIONS, Option

__all__ = ["render_example"]

_WIDTH = 88

_HEADER = """\
nsqmp example configuration (TOML).

Generated from nsqmp/config/options.py by `python -m nsqmp.config.example`;
do not edit by hand: a test checks that this file matches the declarations.

Every option is listed with its default, commented out: uncomment a line
(remove the leading '#') to change it. Keys are nsqd's, so an nsqd config
file loads unchanged. "(nsqd)" marks options nsqd has too; "(nsqmp)" marks
nsqmp's own. Each option can also be given as a command-line flag (shown)
or as an environment variable NSQMP_<KEY IN CAPITALS>.

    nsqmp serve --config /etc/nsqmp.toml [--flag value ...]
    nsqmp check-config /etc/nsqmp.toml

Precedence: command-line flags > environment variables > this file > defaults.
Durations use Go syntax: "250ms", "60s", "15m", "1h30m" (a bare integer means
milliseconds, as in nsqd). Sizes are bytes: 1048576 or "1MiB", "64KiB".
Repeatable options are TOML arrays: ["10.0.0.1:4160", "10.0.0.2:4160"]."""


def _comment(text: str, width: int = _WIDTH) -> list[str]:
    lines: list[str] = []
    for paragraph in text.split("\n"):
        if not paragraph.strip():
            lines.append("#")
            continue
        indent = len(paragraph) - len(paragraph.lstrip())
        lines.extend(
            textwrap.wrap(
                paragraph.strip(),
                width=width,
                initial_indent="# " + " " * indent,
                subsequent_indent="# " + " " * indent,
                break_on_hyphens=False,
                break_long_words=False,
            )
        )
    return lines


def _option_block(opt: Option) -> list[str]:
    lines = _comment(opt.help)
    origin = f"({opt.origin}) flag: {opt.flag}"
    if opt.repeatable:
        origin += " (repeatable)"
    if opt.is_computed:
        origin += f"; default: {opt.default_doc}; for example:"
        value = opt.to_toml(opt.parse(opt.example))
    else:
        value = opt.default_text()
    lines.extend(_comment(origin))
    lines.append(f"#{opt.key} = {value}")
    return lines


def render_example() -> str:
    """The complete example config file: a header, then every option grouped by
    section with its help, origin, flag and default (commented out)."""
    out = _comment(_HEADER)
    section = None
    for opt in OPTIONS:
        if not opt.in_file:
            continue
        if opt.section != section:
            section = opt.section
            title = f"# ==== {SECTIONS[section]} "
            out += ["", "", title + "=" * max(4, _WIDTH - len(title))]
        out.append("")
        out += _option_block(opt)
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.stdout.write(render_example())
