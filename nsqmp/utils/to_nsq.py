"""``nsqmp to-nsq``: to_nsq. Publish stdin to a topic, one message per line (or per
--delimiter), to every --nsqd-tcp-address, each PUB waiting for its OK.

Empty pieces are skipped. --rate N allows N messages a second, with at most a second's
worth saved up (as to_nsq's balance). A PUB that fails ends the tool (exit 1); end of
input or SIGINT/SIGTERM end it with exit 0.
"""
from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import BinaryIO

from nsqmp.client.producer import Producer
from nsqmp.client.sync import NSQError
from nsqmp.utils.common import Fatal, add_version, client_config, fatal_line, run, setup_logging, user_agent
from nsqmp.utils.flags import FlagSet

TOOL = "to_nsq"
log = logging.getLogger("nsqmp.utils")


def flag_set() -> FlagSet:
    """to_nsq 1.3.0's flags (and --version)."""
    fs = FlagSet("nsqmp to-nsq")
    add_version(fs)
    fs.add("topic", "string", "", "NSQ topic to publish to")
    fs.add("delimiter", "string", "\n", "character to split input from stdin")
    fs.add("nsqd-tcp-address", "value", [], "destination nsqd TCP address (may be given multiple times)")
    fs.add("producer-opt", "value", [], "option to passthrough to the producer (may be given multiple "
                                        "times: key,value with go-nsq's Config names)")
    fs.add("rate", "int", 0, "Throttle messages to n/second. 0 to disable")
    return fs


def pieces(stream: BinaryIO, delimiter: bytes) -> Iterator[bytes]:
    """What to_nsq publishes from `stream`: the pieces between delimiters, as they arrive.
    An unterminated last piece keeps its bytes but for one trailing newline (``echo
    a,b | to-nsq --delimiter ,`` publishes ``a`` and ``b``)."""
    buf = b""
    read = getattr(stream, "read1", stream.read)
    while chunk := read(1 << 16):
        buf += chunk
        *done, buf = buf.split(delimiter)
        yield from done
    if buf.endswith(b"\n"):
        buf = buf[:-1]
    if buf:
        yield buf


class Throttle:
    """to_nsq's balance: +1 every 1/rate seconds, at most rate; a publish spends 1, and
    waits one interval when nothing is left."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.balance = 1.0
        self.last = time.monotonic()

    def spend(self) -> None:
        """Before a publish: wait if the balance is spent."""
        now = time.monotonic()
        self.balance = min(float(self.rate), self.balance + (now - self.last) * self.rate)
        self.last = now
        if self.balance <= 0:
            time.sleep(1.0 / self.rate)
        self.balance -= 1


class _Stop(Exception):
    pass


def _raise_stop(signum, frame) -> None:
    raise _Stop()


def to_nsq(ns: SimpleNamespace) -> int:
    """Publish stdin until its end or a signal."""
    if not ns.topic:
        raise Fatal("--topic required")
    if len(ns.delimiter.encode()) != 1:
        raise Fatal("--delimiter must be a single byte")
    setup_logging()
    cfg = client_config(ns.producer_opt, user_agent(TOOL), flag="producer-opt")
    producers = [Producer(addr, cfg) for addr in dict.fromkeys(ns.nsqd_tcp_address)]
    if not producers:
        raise Fatal("--nsqd-tcp-address required")
    throttle = Throttle(ns.rate) if ns.rate >= 1 else None
    if throttle:
        print(fatal_line(f"Throttling messages rate to max:{ns.rate}/second"), file=sys.stderr)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_stop)
    try:
        for body in pieces(sys.stdin.buffer, ns.delimiter.encode()):
            if not body:
                continue
            if throttle:
                throttle.spend()
            for producer in producers:
                producer.publish(ns.topic, body)
    except _Stop:
        pass
    except (NSQError, ConnectionError, TimeoutError) as exc:
        raise Fatal(str(exc)) from None
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        for producer in producers:
            producer.stop()
    return 0


def main(argv: list[str]) -> int:
    """``nsqmp to-nsq``."""
    return run(TOOL, flag_set(), argv, to_nsq)
