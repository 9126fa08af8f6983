"""Go's flag package, as the nsq commands parse their command lines (``flag.FlagSet.Parse``
with ``ContinueOnError``): the one tokenizer behind nsqmp-nsqlookupd, nsqmp-nsqadmin and the
nsq_* utilities (nsqmp-nsqd goes through argparse, see loader.py).

``-name value``, ``-name=value``, ``--name`` the same; a bool flag takes no separate value
(``-name`` is true, ``-name=false``); the first argument that is not a flag, or ``--``,
ends the flags. Errors carry Go's texts.
"""
from __future__ import annotations

from collections.abc import Callable


class UsageError(Exception):
    """A command line Go's flag package refuses; the text is Go's."""


class HelpRequested(Exception):
    """-h / -help: the usage text, exit 0."""


def tokens(argv: list[str], is_bool: Callable[[str], bool | None]) -> tuple[list[tuple[str, str]], list[str]]:
    """([(name, value text), ...] in order, the arguments after the flags).

    ``is_bool(name)``: True for a bool flag, False for one that takes a value, None for a
    name the command does not define (UsageError, or HelpRequested for -h/-help)."""
    found: list[tuple[str, str]] = []
    args = list(argv)
    while args:
        arg = args[0]
        if len(arg) < 2 or arg[0] != "-":
            break
        dashes = 2 if arg[1] == "-" else 1
        if dashes == 2 and len(arg) == 2:
            args.pop(0)  # "--" ends the flags
            break
        name = arg[dashes:]
        if not name or name[0] in "-=":
            raise UsageError(f"bad flag syntax: {arg}")
        args.pop(0)
        name, has_value, text = name.partition("=")
        kind = is_bool(name)
        if kind is None:
            if name in ("help", "h"):
                raise HelpRequested()
            raise UsageError(f"flag provided but not defined: -{name}")
        if kind and not has_value:
            text = "true"
        elif not has_value:
            if not args:
                raise UsageError(f"flag needs an argument: -{name}")
            text = args.pop(0)
        found.append((name, text))
    return found, args


def bad_value(name: str, text: str, is_bool: bool, why: object) -> UsageError:
    """Go's error for a value its flag cannot parse."""
    if is_bool:
        return UsageError(f'invalid boolean value "{text}" for -{name}: {why}')
    return UsageError(f'invalid value "{text}" for flag -{name}: {why}')
