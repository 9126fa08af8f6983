"""``nsqmp to-file``: nsq_to_file. Write topics to files, one message per line.

What is acknowledged is on disk: a message is FINished only once the file holding it was
synced, which happens every --sync-interval, when max-in-flight messages wait for it,
when the consumer is starved (its brokers will send no more until some are FINished),
at rotation and at exit. SIGINT/SIGTERM: CLS to the brokers, the messages already
delivered are written, synced and FINished, the files closed, exit 0. SIGHUP closes the
files (the next message opens new ones). A crash loses nothing either: what was not
FINished is delivered again (duplicates, not losses).

One thread runs every topic's file (the messages of all topics come through one queue);
the client's reader threads only read.
"""
from __future__ import annotations

import logging
import re
import signal
import time
from types import SimpleNamespace

from nsqmp.client import lookup
from nsqmp.client.consumer import Consumer, Message, MessageQueue, finish_all
from nsqmp.utils.common import (
    Fatal, Signals, add_sources, add_version, check_sources, client_config, run, setup_logging, user_agent,
)
from nsqmp.utils.file_logger import FileLogger
from nsqmp.utils.flags import FlagSet

TOOL = "nsq_to_file"
log = logging.getLogger("nsqmp.utils")


def flag_set() -> FlagSet:
    """nsq_to_file 1.3.0's flags."""
    fs = FlagSet("nsqmp to-file")
    add_version(fs)
    fs.add("log-level", "string", "info", "set log verbosity: debug, info, warn, error, or fatal")
    fs.add("log-prefix", "string", "[nsq_to_file] ", "log message prefix")
    fs.add("channel", "string", "nsq_to_file", "nsq channel")
    fs.add("max-in-flight", "int", 200, "max number of messages to allow in flight")
    fs.add("output-dir", "string", "/tmp", "directory to write output files to")
    fs.add("work-dir", "string", "", "directory for in-progress files before moving to output-dir")
    fs.add("datetime-format", "string", "%Y-%m-%d_%H", "strftime compatible format for <DATETIME> in filename format")
    fs.add("filename-format", "string", "<TOPIC>.<HOST><REV>.<DATETIME>.log",
           "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. "
           "<REV> is increased when file already exists)")
    fs.add("host-identifier", "string", "", "value to output in log filename in place of hostname. "
                                            "<SHORT_HOST> and <HOSTNAME> are valid replacement tokens")
    fs.add("gzip-level", "int", 6, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)")
    fs.add("gzip", "bool", False, "gzip output files.")
    fs.add("skip-empty-files", "bool", False, "skip writing empty files")
    fs.add("topic-refresh", "duration", 60.0, "how frequently the topic list should be refreshed")
    fs.add("topic-pattern", "string", "", "only log topics matching the following pattern")
    fs.add("rotate-size", "int", 0, "rotate the file when it grows bigger than `rotate-size` bytes")
    fs.add("rotate-interval", "duration", 0.0, "rotate the file every duration")
    fs.add("sync-interval", "duration", 30.0, "sync file to disk every duration")
    fs.add("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect")
    fs.add("http-client-request-timeout", "duration", 5.0, "timeout for HTTP request")
    add_sources(fs)
    fs.add("topic", "value", [], "nsq topic (may be given multiple times)")
    fs.add("consumer-opt", "value", [], "option to passthrough to the consumer (may be given multiple "
                                        "times: key,value with go-nsq's Config names)")
    return fs


def check(ns: SimpleNamespace) -> None:
    """nsq_to_file's checks, in its order."""
    if ns.log_level not in ("debug", "info", "warn", "error", "fatal"):
        raise Fatal("--log-level is invalid")
    if not ns.channel:
        raise Fatal("--channel is required")
    if ns.http_client_connect_timeout <= 0:
        raise Fatal("--http-client-connect-timeout should be positive")
    if ns.http_client_request_timeout <= 0:
        raise Fatal("--http-client-request-timeout should be positive")
    check_sources(ns)
    if not 1 <= ns.gzip_level <= 9:
        raise Fatal(f"invalid --gzip-level value ({ns.gzip_level}), should be 1-9")
    if not ns.topic and not ns.topic_pattern:
        raise Fatal("--topic or --topic-pattern required")
    if not ns.topic and not ns.lookupd_http_address:
        raise Fatal("--lookupd-http-address must be specified when no --topic specified")
    if ns.sync_interval <= 0:
        raise Fatal("--sync-interval should be positive")


class Topic:
    """A topic's consumer, its file and the messages written but not yet FINished."""

    def __init__(self, ns: SimpleNamespace, topic: str, queue: MessageQueue) -> None:
        self.file = FileLogger(ns, topic)  # raises ValueError for a bad --filename-format
        self.consumer = Consumer(topic, ns.channel, client_config(ns.consumer_opt, user_agent(TOOL),
                                                                  ns.max_in_flight), queue)
        self.max_pending = ns.max_in_flight
        self.sync_interval = ns.sync_interval
        self.next_sync = time.monotonic() + ns.sync_interval
        self.skip_empty = ns.skip_empty_files
        self.pending: list[Message] = []

    def write(self, msg: Message) -> None:
        """nsq_to_file's router, for one message: rotate if due, write, sync when
        max-in-flight messages wait or the consumer is starved."""
        now = time.monotonic()
        sync = False
        if self.file.needs_rotation(now):
            self.file.update_file(now)
            sync = True
        self.file.write(msg.body)
        self.pending.append(msg)
        if sync or len(self.pending) >= self.max_pending or self.consumer.starved():
            self.sync_and_finish()

    def tick(self, now: float) -> None:
        """--sync-interval: rotate if due (or just close, with --skip-empty-files), sync."""
        self.next_sync = now + self.sync_interval
        if self.file.needs_rotation(now):
            if self.skip_empty:
                self.sync_and_finish(close=True)
                return
            self.file.update_file(now)  # closes (and syncs) the file the pending messages are in
        self.sync_and_finish()

    def sync_and_finish(self, close: bool = False) -> None:
        """fsync (or close) the file, then FIN what it holds."""
        if close:
            self.file.close()
        elif self.pending:
            log.info("%s syncing %d records to disk", self.file.tag, len(self.pending))
            self.file.sync()
        finish_all(self.pending)
        self.pending.clear()


def to_file(ns: SimpleNamespace) -> int:
    """Run until SIGINT/SIGTERM."""
    check(ns)
    if not ns.work_dir:
        ns.work_dir = ns.output_dir
    setup_logging(ns.log_prefix, ns.log_level)
    queue = MessageQueue()
    signals = Signals(hup=True, wake=queue.wake)
    topics: dict[str, Topic] = {}
    try:
        _add_topics(ns, topics, ns.topic, queue)
        _loop(ns, topics, queue, signals)
    except BaseException as exc:
        # nothing more is FINished: what was not is delivered again
        for t in topics.values():
            t.consumer.close(timeout=1.0)
        if isinstance(exc, OSError):
            log.critical("writing to disk failed: %s", exc)
            return 1
        raise
    _shut_down(topics, queue)
    return 0


def _add_topics(ns: SimpleNamespace, topics: dict[str, Topic], names: list[str], queue: MessageQueue) -> None:
    """TopicDiscoverer.updateTopics: a Topic for each new name the pattern allows."""
    for name in names:
        if name in topics:
            continue
        if ns.topic_pattern and not re.search(ns.topic_pattern, name):
            log.warning("skipping topic %s (doesn't match pattern %s)", name, ns.topic_pattern)
            continue
        try:
            topic = Topic(ns, name, queue)
        except ValueError as exc:
            raise Fatal(str(exc)) from None
        topics[name] = topic
        try:
            topic.consumer.connect_to_nsqds(ns.nsqd_tcp_address)
            topic.consumer.connect_to_lookupds(ns.lookupd_http_address)
        except ConnectionError as exc:
            log.error("couldn't create logger for new topic %s: %s", name, exc)


def _loop(ns: SimpleNamespace, topics: dict[str, Topic], queue: MessageQueue, signals: Signals) -> None:
    refresh = not ns.topic
    next_refresh = time.monotonic() + ns.topic_refresh
    while not signals.stop:
        now = time.monotonic()
        due = min([t.next_sync for t in topics.values()] + ([next_refresh] if refresh else []), default=now + 1.0)
        msg = queue.get(timeout=due - now) if due > now else None
        if msg is not None:
            topics[msg.topic].write(msg)
            continue
        while signals.wait(0) == signal.SIGHUP:
            log.info("SIGHUP: closing the files")
            for t in topics.values():
                t.sync_and_finish(close=True)
        now = time.monotonic()
        for t in topics.values():
            if now >= t.next_sync:
                t.tick(now)
        if refresh and now >= next_refresh:
            next_refresh = now + ns.topic_refresh
            try:
                names = lookup.lookupd_topics(ns.lookupd_http_address, ns.http_client_connect_timeout,
                                              ns.http_client_request_timeout)
            except lookup.HTTPError as exc:
                log.error("could not retrieve topic list: %s", exc)
                continue
            _add_topics(ns, topics, names, queue)


def _shut_down(topics: dict[str, Topic], queue: MessageQueue) -> None:
    """CLS everywhere, write what already arrived, sync, FIN, close files and connections."""
    for t in topics.values():
        t.consumer.stop()
    deadline = time.monotonic() + 2.0
    for t in topics.values():
        for event in list(t.consumer.close_wait.values()):
            event.wait(max(0.0, deadline - time.monotonic()))
    while not queue.empty():
        msg = queue.get()
        if msg is not None:
            topics[msg.topic].write(msg)
    for t in topics.values():
        t.sync_and_finish(close=True)
        t.consumer.close(timeout=2.0)


def main(argv: list[str]) -> int:
    """``nsqmp to-file``."""
    return run(TOOL, flag_set(), argv, to_file)
