"""What every utility shares: log lines, fatal errors, --version, signals, the client's
Config from ``--consumer-opt``/``--producer-opt``, and the flags nsq's tools all declare."""
from __future__ import annotations

import datetime
import logging
import signal
import sys
from collections.abc import Callable
from queue import Empty, SimpleQueue
from types import SimpleNamespace

from nsqmp.client.config import Config
from nsqmp.golog import LEVELS, GoLogFormatter
from nsqmp.utils.flags import FlagSet

#: the nsq release whose tools these utilities reproduce
NSQ_VERSION = "1.3.0"


class Fatal(Exception):
    """Go's log.Fatal: the text goes to stderr with a timestamp, exit code 1."""


def fatal_line(text: str) -> str:
    """Go's standard logger: ``2026/11/24 18:00:00 text``."""
    return f"{datetime.datetime.now():%Y/%m/%d %H:%M:%S} {text}"


def version(tool: str) -> str:
    """``nsq_tail v1.3.0 (nsqmp 0.1.0)``."""
    from importlib.metadata import PackageNotFoundError, version as pkg_version

    try:
        ours = pkg_version("nsqmp")
    except PackageNotFoundError:
        ours = "dev"
    return f"{tool} v{NSQ_VERSION} (nsqmp {ours})"


def setup_logging(prefix: str = "", level: str = "info") -> None:
    """Log lines as nsq's tools write them (internal/lg), on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(GoLogFormatter(prefix))
    for name in ("nsqmp.client", "nsqmp.utils"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(LEVELS.get(level, logging.INFO))
        logger.propagate = False


def run(tool: str, fs: FlagSet, argv: list[str], main: Callable[[SimpleNamespace], int | None]) -> int:
    """Parse the flags, answer --version, run main; a Fatal becomes exit code 1."""
    ns = fs.parse_or_exit(argv)
    if isinstance(ns, int):
        return ns
    if getattr(ns, "version", False):
        print(version(tool))
        return 0
    try:
        return main(ns) or 0
    except Fatal as exc:
        print(fatal_line(str(exc)), file=sys.stderr)
        return 1


def add_version(fs: FlagSet) -> None:
    """--version, as every nsq tool has it."""
    fs.add("version", "bool", False, "print version string")


def add_sources(fs: FlagSet) -> None:
    """--nsqd-tcp-address and --lookupd-http-address (either, not both)."""
    fs.add("nsqd-tcp-address", "value", [], "nsqd TCP address (may be given multiple times)")
    fs.add("lookupd-http-address", "value", [], "lookupd HTTP address (may be given multiple times)")


def check_sources(ns: SimpleNamespace) -> None:
    """nsq's check: one of --nsqd-tcp-address and --lookupd-http-address, not both."""
    if not ns.nsqd_tcp_address and not ns.lookupd_http_address:
        raise Fatal("--nsqd-tcp-address or --lookupd-http-address required")
    if ns.nsqd_tcp_address and ns.lookupd_http_address:
        raise Fatal("use --nsqd-tcp-address or --lookupd-http-address not both")


def client_config(opts: list[str], user_agent: str, max_in_flight: int = 1, flag: str = "consumer-opt") -> Config:
    """The client's Config: go-nsq's defaults, the tool's user agent and max in flight,
    then every ``--consumer-opt key,value``."""
    cfg = Config(user_agent=user_agent, max_in_flight=max_in_flight)
    for opt in opts:
        try:
            cfg.set_opt(opt)
        except ValueError as exc:
            raise Fatal(f"--{flag} {opt}: {exc}") from None
    return cfg


def user_agent(tool: str) -> str:
    """The IDENTIFY user agent: ``nsq_tail/1.3.0 nsqmp``."""
    return f"{tool}/{NSQ_VERSION} nsqmp"


class Signals:
    """SIGINT and SIGTERM (and SIGHUP if asked) queued for the tool's loop: the handler
    only puts the signal number in a SimpleQueue (reentrant) and calls `wake`."""

    def __init__(self, hup: bool = False, wake: Callable[[], None] | None = None) -> None:
        self.queue: SimpleQueue = SimpleQueue()
        self.wake = wake
        self.received: list[int] = []
        sigs = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hup else [])
        for sig in sigs:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame) -> None:
        self.received.append(signum)
        self.queue.put(signum)
        if self.wake is not None:
            self.wake()

    @property
    def stop(self) -> bool:
        """SIGINT or SIGTERM has arrived."""
        return any(s in (signal.SIGINT, signal.SIGTERM) for s in self.received)

    def wait(self, timeout: float | None = None) -> int | None:
        """The next signal, or None after `timeout`."""
        try:
            return self.queue.get(timeout=timeout)
        except Empty:
            return None
