"""What every client driver shares: its command line and its JSON-lines output.

A driver is a small program that makes one real client library run one scenario against
a broker and prints what the library saw, one JSON object per line, on stdout. The
pytest side (tests/compat/driving.py) starts it as a subprocess, so it can also be
stopped with SIGSTOP, and judges what it printed. The Node driver (js/driver.js) takes
the same arguments and prints the same events.

Scenarios (``--scenario``):

roundtrip   publish ``--count`` bodies ``<prefix>-<i:06d>`` (the first tenth with PUB, the
            rest with MPUB batches of 100) and consume them on ``--channel``, FIN each;
            prints ``published`` then ``received`` (every body seen, in order), then
            ``holding`` and waits for a line on stdin before closing (the test reads
            /stats meanwhile).
requeue     publish ``--count`` bodies; the handler requeues (REQ 0) attempt 1 and
            finishes attempt 2; prints ``deliveries``.
timeout     like requeue with ``--msg-timeout-ms`` in IDENTIFY, but attempt 1 is never
            answered: the broker must time it out and deliver it again.
heartbeat   subscribe with ``--heartbeat-ms`` in IDENTIFY and print ``subscribed``; then
            idle until a line arrives on stdin (the test stops the process meanwhile).
auth        with ``--auth-secret``: publish to and subscribe on ``--topic`` (allowed) and
            ``--denied-topic``; prints ``auth`` with what each step answered.
"""
from __future__ import annotations

import argparse
import sys
import time

import orjson

MPUB_BATCH = 100
GRACE = 0.5  # seconds to wait after the last expected message, for a late duplicate


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments every driver takes."""
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True, help="host:port of the broker's TCP listener")
    p.add_argument("--scenario", required=True,
                   choices=("roundtrip", "requeue", "timeout", "heartbeat", "auth"))
    p.add_argument("--topic", required=True)
    p.add_argument("--channel", default="compat")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--prefix", default="m")
    p.add_argument("--tls", action="store_true")
    p.add_argument("--snappy", action="store_true")
    p.add_argument("--deflate", action="store_true")
    p.add_argument("--heartbeat-ms", type=int, default=30_000)
    p.add_argument("--msg-timeout-ms", type=int, default=0)
    p.add_argument("--auth-secret", default="")
    p.add_argument("--denied-topic", default="")
    p.add_argument("--deadline", type=float, default=60.0, help="seconds before giving up")
    return p.parse_args(argv)


def bodies(args: argparse.Namespace) -> list[bytes]:
    return [b"%s-%06d" % (args.prefix.encode(), i) for i in range(args.count)]


def emit(event: str, **fields) -> None:
    """Print one event as a JSON line and flush (the test reads it at once)."""
    sys.stdout.buffer.write(orjson.dumps({"event": event, **fields}, option=orjson.OPT_NON_STR_KEYS) + b"\n")
    sys.stdout.buffer.flush()


def wait_stdin_line() -> None:
    """Block until the test writes a line (or closes stdin)."""
    sys.stdin.readline()


class Deliveries:
    """Deliveries seen by a requeue/timeout handler: body, attempts, what it did, when."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.items: list[dict] = []
        self.finished: set[str] = set()
        self.t0 = time.monotonic()

    def add(self, body: bytes, attempts: int, action: str) -> None:
        self.items.append({"body": body.decode(), "attempts": attempts, "action": action,
                           "t": round(time.monotonic() - self.t0, 3)})
        if action == "fin":
            self.finished.add(body.decode())

    @property
    def complete(self) -> bool:
        return len(self.finished) >= self.expected


def run(roundtrip, redelivery, heartbeat, auth, call=lambda scenario, args: scenario(args)) -> None:
    """A driver's main: run the scenario named on the command line, then say "done".

    `call` runs a scenario function (asyncio.run of it for the asyncio libraries)."""
    args = parse()
    scenario = {"roundtrip": roundtrip, "requeue": redelivery, "timeout": redelivery,
                "heartbeat": heartbeat, "auth": auth}[args.scenario]
    call(scenario, args)
    emit("done")
