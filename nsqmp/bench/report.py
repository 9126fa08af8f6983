"""How the micro-benchmarks print a result: one JSON line (``--json``) or their table."""
from __future__ import annotations

import sys
from collections.abc import Callable

import orjson


def emit(result: dict, as_json: bool, render: Callable[[dict], str]) -> None:
    if as_json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
    else:
        print(render(result))
