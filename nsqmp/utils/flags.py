"""The utilities' command lines in Go's flag syntax, with nsq's flag names and defaults.

Go's flag package: ``-x`` or ``--x``; ``-x=value`` or ``-x value``; booleans bare
(``-gzip``) or ``-gzip=false``; durations like ``30s``, ``1m``, ``1h30m``; an array flag
(``--topic``, ``--nsqd-tcp-address``) given several times keeps every value; any other
flag given twice keeps the last. Errors are Go's (``flag provided but not defined: -x``)
followed by the usage text, exit code 2; ``-h``/``--help`` prints the usage (every flag
with its default), exit code 0.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from nsqmp.config import goflags
from nsqmp.config.goflags import HelpRequested, UsageError
from nsqmp.config.options import parse_duration
from nsqmp.lookupd.options import go_duration

_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


@dataclass
class Flag:
    """One declared flag."""

    name: str
    kind: str  # string, bool, int, float, duration, value (repeatable)
    default: Any
    help: str


class FlagSet:
    """One utility's flags; parse() returns them as attributes (``-`` becomes ``_``)."""

    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.flags: dict[str, Flag] = {}

    def add(self, name: str, kind: str, default: Any, help: str) -> None:
        """Declare a flag (kind: string, bool, int, float, duration or value, the last
        repeatable with a list as its value)."""
        self.flags[name] = Flag(name, kind, default, help)

    def parse(self, argv: list[str]) -> SimpleNamespace:
        """Go's FlagSet.Parse; UsageError on a bad flag, also for leftover arguments (as
        nsq_to_file: "unknown arguments")."""
        values = {f.name: (list(f.default) if f.kind == "value" else f.default) for f in self.flags.values()}
        given: set[str] = set()
        found, args = goflags.tokens(argv, lambda name: (f.kind == "bool") if (f := self.flags.get(name)) else None)
        for name, value in found:
            flag = self.flags[name]
            parsed = self._value(flag, value)
            if flag.kind == "value":
                if name not in given:
                    values[name] = []
                values[name].append(parsed)
            else:
                values[name] = parsed
            given.add(name)
        if args:
            raise UsageError(f"unknown arguments: {args}")
        ns = SimpleNamespace(**{k.replace("-", "_"): v for k, v in values.items()})
        ns.given = given
        return ns

    @staticmethod
    def _value(flag: Flag, text: str) -> Any:
        try:
            if flag.kind == "bool":
                if text in _GO_TRUE:
                    return True
                if text in _GO_FALSE:
                    return False
                raise ValueError("parse error")
            if flag.kind == "int":
                return int(text, 0)
            if flag.kind == "float":
                return float(text)
            if flag.kind == "duration":
                return parse_duration(text)
        except ValueError:
            kind = "boolean value" if flag.kind == "bool" else "value"
            raise UsageError(f'invalid {kind} "{text}" for flag -{flag.name}: parse error') from None
        return text

    def usage(self) -> str:
        """Go's usage text: ``Usage of <prog>:``, the flags in name order, their defaults."""
        lines = [f"Usage of {self.prog}:"]
        for flag in sorted(self.flags.values(), key=lambda f: f.name):
            kind = {"bool": "", "value": " value", "int": " int", "float": " float",
                    "duration": " duration", "string": " string"}[flag.kind]
            text = flag.help
            name, sep, rest = text.partition("`")  # Go's UnquoteUsage: `name` names the argument
            if sep and "`" in rest:
                arg, _, tail = rest.partition("`")
                kind, text = f" {arg}", name + arg + tail
            default = flag.default
            if flag.kind == "string" and default:
                text += f" (default {default!r})".replace("'", '"')
            elif flag.kind == "duration" and default:
                text += f" (default {go_duration(default)})"
            elif flag.kind in ("int", "float") and default:
                text += f" (default {default:g})" if flag.kind == "float" else f" (default {default})"
            elif flag.kind == "bool" and default:
                text += " (default true)"
            lines.append(f"  -{flag.name}{kind}\n    \t{text}")
        return "\n".join(lines) + "\n"

    def parse_or_exit(self, argv: list[str]) -> SimpleNamespace | int:
        """parse(), or the exit code after printing the error or the help."""
        try:
            return self.parse(argv)
        except HelpRequested:
            sys.stderr.write(self.usage())
            return 0
        except UsageError as exc:
            sys.stderr.write(f"{exc}\n{self.usage()}")
            return 2
