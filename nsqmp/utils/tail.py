"""``nsqmp tail``: nsq_tail. Print a topic's messages to stdout, one per line.

An ephemeral channel (``tail<6 digits>#ephemeral``) unless --channel is given, so tailing
takes nothing from the topic's real consumers and leaves nothing behind. ``-n N`` exits
after N messages of a topic; SIGINT/SIGTERM stop it.

``--peek`` (nsqmp's, not nsq_tail's) consumes nothing: it prints the next -n (default 10)
messages --channel would deliver, from each broker's GET /channel/peek (without
--channel, /topic/peek: what a topic without channels holds), then exits. The brokers are
the lookupds' producers of the topic (--lookupd-http-address) or --nsqd-http-address.
"""
from __future__ import annotations

import base64
import logging
import os
import random
import sys
from types import SimpleNamespace
from urllib.parse import urlencode

from nsqmp.client.consumer import Consumer, MessageQueue
from nsqmp.client.lookup import HTTPError, get_json, topic_producers
from nsqmp.utils.common import (
    Fatal, Signals, add_sources, add_version, check_sources, client_config, fatal_line, run, setup_logging,
    user_agent,
)
from nsqmp.utils.flags import FlagSet

TOOL = "nsq_tail"
log = logging.getLogger("nsqmp.utils")


def flag_set() -> FlagSet:
    """nsq_tail 1.3.0's flags."""
    fs = FlagSet("nsqmp tail")
    add_version(fs)
    fs.add("channel", "string", "", "NSQ channel")
    fs.add("max-in-flight", "int", 200, "max number of messages to allow in flight")
    fs.add("n", "int", 0, "total messages to show (will wait if starved)")
    fs.add("print-topic", "bool", False, "print topic name where message was received")
    add_sources(fs)
    fs.add("peek", "bool", False, "print the next -n (default 10) messages of --channel without consuming "
                                  "them (nsqmp's GET /channel/peek of each broker), then exit")
    fs.add("nsqd-http-address", "value", [], "nsqd HTTP address for --peek (may be given multiple times)")
    fs.add("topic", "value", [], "NSQ topic (may be given multiple times)")
    fs.add("consumer-opt", "value", [], "option to passthrough to the consumer (may be given multiple "
                                        "times: key,value with go-nsq's Config names)")
    return fs


def ephemeral_channel() -> str:
    """nsq_tail's channel name: ``tail%06d#ephemeral``."""
    return f"tail{random.randrange(999999):06d}#ephemeral"


def tail(ns: SimpleNamespace) -> int:
    """Consume every --topic and print until -n or a signal (--peek: print and exit)."""
    if ns.peek:
        return peek(ns)
    channel = ns.channel or ephemeral_channel()
    check_sources(ns)
    if not ns.topic:
        raise Fatal("--topic required")
    setup_logging()
    max_in_flight = ns.max_in_flight
    if 0 < ns.n < max_in_flight:  # don't ask for more messages than we want
        max_in_flight = ns.n
    cfg = client_config(ns.consumer_opt, user_agent(TOOL), max_in_flight)
    queue = MessageQueue()
    signals = Signals(wake=queue.wake)
    consumers = []
    try:
        for topic in ns.topic:
            print(fatal_line(f"Adding consumer for topic: {topic}"), file=sys.stderr)
            consumer = Consumer(topic, channel, cfg, queue)
            consumers.append(consumer)
            consumer.connect_to_nsqds(ns.nsqd_tcp_address)
            consumer.connect_to_lookupds(ns.lookupd_http_address)
        _print_messages(queue, signals, ns.n, ns.print_topic)
    except BrokenPipeError as exc:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        raise Fatal(f"ERROR: failed to write to os.Stdout - {exc}") from None
    except ConnectionError as exc:
        raise Fatal(str(exc)) from None
    finally:
        for consumer in consumers:
            consumer.close(timeout=2.0)
    return 0


def _print_messages(queue: MessageQueue, signals: Signals, total: int, print_topic: bool) -> None:
    out = sys.stdout.buffer
    shown: dict[str, int] = {}
    while not signals.stop:
        msg = queue.get()
        if msg is None:
            continue
        if print_topic:
            out.write(msg.topic.encode() + b" | ")
        out.write(msg.body + b"\n")
        msg.finish()
        shown[msg.topic] = shown.get(msg.topic, 0) + 1
        if total > 0 and shown[msg.topic] >= total:
            out.flush()
            return
        if queue.empty():
            out.flush()


PEEK_N = 10  # --peek without -n
PEEK_MAX_BODY = 1 << 20  # the peek's largest max_body: whole bodies, as tail prints them


def peek(ns: SimpleNamespace) -> int:
    """--peek: the next -n messages of --channel (or of each topic, without it) on every
    broker, printed as tail prints them; nothing is consumed."""
    if not ns.topic:
        raise Fatal("--topic required")
    if bool(ns.nsqd_http_address) == bool(ns.lookupd_http_address):
        raise Fatal("--peek needs --nsqd-http-address or --lookupd-http-address (not both)")
    n = ns.n if ns.n > 0 else PEEK_N
    out = sys.stdout.buffer
    for topic in ns.topic:
        shown = 0
        for address in _peek_brokers(ns, topic):
            if shown >= n:
                break
            for body in _peek_bodies(address, topic, ns.channel, n - shown):
                if ns.print_topic:
                    out.write(topic.encode() + b" | ")
                out.write(body + b"\n")
                shown += 1
    out.flush()
    return 0


def _peek_brokers(ns: SimpleNamespace, topic: str) -> list[str]:
    """The HTTP addresses of the brokers to peek at for topic."""
    if ns.nsqd_http_address:
        return list(ns.nsqd_http_address)
    try:
        return [p.http_address for p in topic_producers(ns.lookupd_http_address, topic)]
    except HTTPError as exc:
        raise Fatal(str(exc)) from None


def _peek_bodies(address: str, topic: str, channel: str, n: int) -> list[bytes]:
    """The bodies one broker's peek shows ([] when it does not have the topic or channel)."""
    query = {"topic": topic, "n": min(n, 1000), "max_body": PEEK_MAX_BODY}
    path = "/topic/peek"
    if channel:
        query["channel"], path = channel, "/channel/peek"
    try:
        reply = get_json(address, f"{path}?{urlencode(query)}")
    except HTTPError as exc:
        if exc.status == 404 and ("TOPIC_NOT_FOUND" in str(exc) or "CHANNEL_NOT_FOUND" in str(exc)):
            return []  # this broker does not have it
        raise Fatal(str(exc)) from None  # a plain NOT_FOUND: no peek there (nsqd)
    return [base64.b64decode(m["body"]) for m in reply.get("messages") or []]


def main(argv: list[str]) -> int:
    """``nsqmp tail``."""
    return run(TOOL, flag_set(), argv, tail)
