"""nsq's utilities as ``nsqmp`` subcommands, built on the project's client (nsqmp.client).

    nsqmp tail         nsq_tail        print a topic's messages
    nsqmp to-file      nsq_to_file     write a topic to rotated, optionally gzipped files
    nsqmp to-http      nsq_to_http     send a topic's messages to HTTP endpoints
    nsqmp to-nsq       to_nsq          publish stdin to a topic
    nsqmp nsq-to-nsq   nsq_to_nsq      copy topics from brokers to other brokers
    nsqmp stat         nsq_stat        a rolling table of a channel's /stats

Each takes nsq 1.3.0's flags in Go's syntax (nsqmp.utils.flags); docs/utilities.md says
where they differ. The entry points below import their module only when run, so
``nsqmp --help`` stays fast.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

#: command -> its module under nsqmp.utils
TOOLS = {
    "tail": "tail",
    "to-file": "to_file",
    "to-http": "to_http",
    "to-nsq": "to_nsq",
    "nsq-to-nsq": "nsq_to_nsq",
    "stat": "stat",
}


def _entry(command: str) -> Callable[[list[str]], int]:
    def entry(argv: list[str]) -> int:
        module = importlib.import_module(f"nsqmp.utils.{TOOLS[command]}")
        return module.main(argv)

    entry.__name__ = entry.__qualname__ = f"cmd_{TOOLS[command]}"
    entry.__doc__ = f"``nsqmp {command}``"
    return entry


cmd_tail = _entry("tail")
cmd_to_file = _entry("to-file")
cmd_to_http = _entry("to-http")
cmd_to_nsq = _entry("to-nsq")
cmd_nsq_to_nsq = _entry("nsq-to-nsq")
cmd_stat = _entry("stat")


def _script(command: str) -> Callable[[], None]:
    def script() -> None:
        sys.exit(_entry(command)(sys.argv[1:]))

    script.__doc__ = f"console script nsqmp-{command}"
    return script


tail_main = _script("tail")
to_file_main = _script("to-file")
to_http_main = _script("to-http")
to_nsq_main = _script("to-nsq")
nsq_to_nsq_main = _script("nsq-to-nsq")
stat_main = _script("stat")
