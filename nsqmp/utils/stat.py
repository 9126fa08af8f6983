"""``nsqmp stat``: nsq_stat. A rolling table of one topic/channel, summed over its brokers.

Every --interval it finds the topic's brokers (through --lookupd-http-address, or among
the --nsqd-http-address given), reads their /stats for the topic and channel, and
prints one row: the rates since the last poll and the channel's depth and counters. The
header comes first and again every 25 polls; the first poll prints no row (there is no
rate yet). --count N stops after N rows; SIGINT/SIGTERM stop it.
"""
from __future__ import annotations

import signal
import sys
import time
from types import SimpleNamespace
from urllib.parse import quote

from nsqmp.client import lookup
from nsqmp.utils.common import Fatal, add_version, run
from nsqmp.utils.flags import FlagSet

TOOL = "nsq_stat"
FIELDS = ("depth", "memory_depth", "backend_depth", "in_flight_count", "deferred_count", "requeue_count",
          "timeout_count", "message_count", "client_count")
HEADER = ("%s+%s+%s\n" % ("------rate------", "----------------depth----------------",
                          "--------------metadata---------------")
          + "%7s %7s | %7s %7s %7s %5s %5s | %7s %7s %12s %7s\n" % (
              "ingress", "egress", "total", "mem", "disk", "inflt", "def", "req", "t-o", "msgs", "clients"))


def flag_set() -> FlagSet:
    """nsq_stat 1.3.0's flags."""
    fs = FlagSet("nsqmp stat")
    add_version(fs)
    fs.add("topic", "string", "", "NSQ topic")
    fs.add("channel", "string", "", "NSQ channel")
    fs.add("interval", "duration", 2.0, "duration of time between polling/printing output")
    fs.add("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect")
    fs.add("http-client-request-timeout", "duration", 5.0, "timeout for HTTP request")
    fs.add("count", "int", 0, "number of reports")
    fs.add("nsqd-http-address", "value", [], "nsqd HTTP address (may be given multiple times)")
    fs.add("lookupd-http-address", "value", [], "lookupd HTTP address (may be given multiple times)")
    return fs


def check(ns: SimpleNamespace) -> None:
    """nsq_stat's checks, in its order."""
    if not ns.topic or not ns.channel:
        raise Fatal("--topic and --channel are required")
    for name, value in (("interval", ns.interval), ("http-client-connect-timeout", ns.http_client_connect_timeout),
                        ("http-client-request-timeout", ns.http_client_request_timeout)):
        if value <= 0:
            raise Fatal(f"--{name} should be positive")
    if "count" in ns.given and ns.count <= 0:
        raise Fatal("--count should be positive")
    if not ns.nsqd_http_address and not ns.lookupd_http_address:
        raise Fatal("--nsqd-http-address or --lookupd-http-address required")
    if ns.nsqd_http_address and ns.lookupd_http_address:
        raise Fatal("use --nsqd-http-address or --lookupd-http-address not both")
    for flag, addrs in (("nsqd-http-address", ns.nsqd_http_address), ("lookupd-http-address", ns.lookupd_http_address)):
        if any(a.startswith("http") for a in addrs):
            raise Fatal(f"--{flag} error - address should not contain scheme")


def producers(ns: SimpleNamespace) -> list[str]:
    """The HTTP addresses of the brokers that have the topic."""
    timeouts = (ns.http_client_connect_timeout, ns.http_client_request_timeout)
    if ns.lookupd_http_address:
        return [p.http_address for p in lookup.topic_producers(ns.lookupd_http_address, ns.topic, *timeouts)]
    found, errors = [], []
    for addr in ns.nsqd_http_address:
        try:
            stats = lookup.get_json(addr, f"/stats?format=json&topic={quote(ns.topic, safe='')}"
                                          "&include_clients=false", *timeouts)
        except lookup.HTTPError as exc:
            errors.append(str(exc))
            continue
        if any(t.get("topic_name") == ns.topic for t in stats.get("topics") or []):
            found.append(addr)
    if len(errors) == len(ns.nsqd_http_address):
        raise lookup.HTTPError("failed to query any nsqd: " + "; ".join(errors))
    return found


def channel_stats(ns: SimpleNamespace, addrs: list[str]) -> dict[str, int] | None:
    """clusterinfo.GetNSQDStats for one channel: its counters summed over the brokers
    (memory_depth = depth - backend_depth); None if no broker has the channel."""
    timeouts = (ns.http_client_connect_timeout, ns.http_client_request_timeout)
    total: dict[str, int] | None = None
    errors = []
    path = (f"/stats?format=json&topic={quote(ns.topic, safe='')}&channel={quote(ns.channel, safe='')}"
            "&include_clients=false")
    for addr in addrs:
        try:
            stats = lookup.get_json(addr, path, *timeouts)
        except lookup.HTTPError as exc:
            errors.append(str(exc))
            continue
        for topic in stats.get("topics") or []:
            if topic.get("topic_name") != ns.topic:
                continue
            for ch in topic.get("channels") or []:
                if ch.get("channel_name") != ns.channel:
                    continue
                ch = dict(ch, memory_depth=ch.get("depth", 0) - ch.get("backend_depth", 0))
                total = total or dict.fromkeys(FIELDS, 0)
                for key in FIELDS:
                    total[key] += int(ch.get(key) or 0)
    if addrs and len(errors) == len(addrs):
        raise lookup.HTTPError("failed to query any nsqd: " + "; ".join(errors))
    return total


def row(cur: dict[str, int], old: dict[str, int], interval: float) -> str:
    """One line of the table: ingress and egress per second since the last poll, then
    the channel's figures."""
    ingress = int((cur["message_count"] - old["message_count"]) / interval)
    egress = int((cur["message_count"] - old["message_count"] - (cur["depth"] - old["depth"])) / interval)
    return "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d\n" % (
        ingress, egress, cur["depth"], cur["memory_depth"], cur["backend_depth"], cur["in_flight_count"],
        cur["deferred_count"], cur["requeue_count"], cur["timeout_count"], cur["message_count"],
        cur["client_count"])


def stat(ns: SimpleNamespace) -> int:
    """nsq_stat's statLoop."""
    check(ns)
    signal.signal(signal.SIGHUP, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    old: dict[str, int] | None = None
    i = 0
    try:
        while "count" not in ns.given or ns.count >= i:
            try:
                cur = channel_stats(ns, producers(ns))
            except lookup.HTTPError as exc:
                raise Fatal(f"ERROR: failed to get nsqd stats - {exc}") from None
            if cur is None:
                raise Fatal(f"ERROR: failed to find channel({ns.channel}) in stats metadata for topic({ns.topic})")
            if i % 25 == 0:
                sys.stdout.write(HEADER)
            if old is not None:
                sys.stdout.write(row(cur, old, ns.interval))
            sys.stdout.flush()
            old = cur
            i += 1
            if "count" in ns.given and ns.count < i:
                break
            time.sleep(ns.interval)
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str]) -> int:
    """``nsqmp stat``."""
    return run(TOOL, flag_set(), argv, stat)
