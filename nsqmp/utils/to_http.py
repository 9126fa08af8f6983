"""``nsqmp to-http``: nsq_to_http. Send each message of a topic/channel to HTTP endpoints.

--post: the body is the message (--content-type); --get: the URL holds one ``%s``,
replaced with the message query-escaped (Go's url.QueryEscape). A message is FINished
after a 2xx answer to POST (200 to GET); any other answer or a failed request REQueues it
(go-nsq's delay: attempts x default_requeue_delay). --mode: round-robin, hostpool (the
default: in turn, skipping an endpoint that failed for a while) or fan-out (every
endpoint, FIN once all answered well). -n requests run at once.
"""
from __future__ import annotations

import http.client
import logging
import random
import threading
import time
from types import SimpleNamespace
from urllib.parse import quote_plus, urlsplit

from nsqmp.client.consumer import Consumer, Message
from nsqmp.utils.common import (
    NSQ_VERSION, Fatal, Signals, add_sources, add_version, check_sources, client_config, run, setup_logging,
    user_agent,
)
from nsqmp.utils.flags import FlagSet
from nsqmp.utils.upstream import FAN_OUT, HOSTPOOL, HostPool, RoundRobin, TimerMetrics, parse_mode, per_address_metrics

TOOL = "nsq_to_http"
log = logging.getLogger("nsqmp.utils")
_DEFAULT_CONTENT_TYPE = "application/octet-stream"


def flag_set() -> FlagSet:
    """nsq_to_http 1.3.0's flags."""
    fs = FlagSet("nsqmp to-http")
    add_version(fs)
    fs.add("topic", "string", "", "nsq topic")
    fs.add("channel", "string", "nsq_to_http", "nsq channel")
    fs.add("max-in-flight", "int", 200, "max number of messages to allow in flight")
    fs.add("n", "int", 100, "number of concurrent publishers")
    fs.add("mode", "string", "hostpool", "the upstream request mode options: round-robin, hostpool (default), "
                                         "epsilon-greedy, fan-out")
    fs.add("sample", "float", 1.0, "% of messages to publish (float b/w 0 -> 1)")
    fs.add("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect")
    fs.add("http-client-request-timeout", "duration", 20.0, "timeout for HTTP request")
    fs.add("status-every", "int", 250, "the # of requests between logging status (per handler), 0 disables")
    fs.add("content-type", "string", _DEFAULT_CONTENT_TYPE, "the Content-Type used for POST requests")
    fs.add("post", "value", [], "HTTP address to make a POST request to.  data will be in the body "
                                "(may be given multiple times)")
    fs.add("header", "value", [], "Custom header for HTTP requests (may be given multiple times)")
    fs.add("get", "value", [], "HTTP address to make a GET request to. '%s' will be printf replaced with data "
                               "(may be given multiple times)")
    add_sources(fs)
    fs.add("consumer-opt", "value", [], "option to passthrough to the consumer (may be given multiple "
                                        "times: key,value with go-nsq's Config names)")
    return fs


def parse_headers(items: list[str]) -> dict[str, str]:
    """--header ``Key: value``; ValueError for anything else."""
    headers = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"invalid header: {item!r}")
        headers[key.strip()] = value.strip()
    return headers


def check(ns: SimpleNamespace) -> None:
    """nsq_to_http's checks, in its order."""
    try:
        ns.headers = parse_headers(ns.header)
    except ValueError:
        raise Fatal("--header value format should be 'key:value'") from None
    if not ns.topic or not ns.channel:
        raise Fatal("--topic and --channel are required")
    if "content-type" in ns.given:
        if not ns.post:
            raise Fatal("--content-type only used with --post")
        if not ns.content_type:
            raise Fatal("--content-type requires a value when used")
    check_sources(ns)
    if not ns.get and not ns.post:
        raise Fatal("--get or --post required")
    if ns.get and ns.post:
        raise Fatal("use --get or --post not both")
    if any(a.count("%s") != 1 for a in ns.get):
        raise Fatal("invalid GET address - must be a printf string")
    if not 0.0 <= ns.sample <= 1.0:
        raise Fatal("ERROR: --sample must be between 0.0 and 1.0")
    if ns.n < 1:
        raise Fatal("-n must be at least 1")


class Publisher:
    """One worker's HTTP requests: a kept-alive connection per endpoint host."""

    def __init__(self, ns: SimpleNamespace) -> None:
        self.ns = ns
        self.conns: dict[tuple[str, str, int], http.client.HTTPConnection] = {}

    def publish(self, addr: str, body: bytes) -> None:
        """One request; raises OSError/HTTPException, or ValueError for a bad status."""
        ns = self.ns
        headers = {"User-Agent": f"nsq_to_http v{NSQ_VERSION}", **ns.headers}
        if ns.post:
            url, method, data, ok = addr, "POST", body, range(200, 300)
            headers["Content-Type"] = ns.content_type
        else:
            url, method, data, ok = addr.replace("%s", quote_plus(body)), "GET", None, range(200, 201)
        parts = urlsplit(url)
        key = (parts.scheme, parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for retry in (True, False):  # a kept-alive connection the server closed meanwhile: once more
            conn = self._conn(key)
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                del self.conns[key]
                if not retry:
                    raise
            except BaseException:
                conn.close()
                del self.conns[key]
                raise
        if resp.will_close:
            conn.close()
            del self.conns[key]
        if resp.status not in ok:
            raise ValueError(f"got status code {resp.status}")

    def _conn(self, key: tuple[str, str, int]) -> http.client.HTTPConnection:
        conn = self.conns.get(key)
        if conn is None:
            cls = http.client.HTTPSConnection if key[0] == "https" else http.client.HTTPConnection
            conn = cls(key[1], key[2], timeout=self.ns.http_client_connect_timeout)
            conn.connect()
            assert conn.sock is not None
            conn.sock.settimeout(self.ns.http_client_request_timeout)
            self.conns[key] = conn
        return conn


class Handler:
    """PublishHandler: one message to one endpoint (by the mode) or to all (fan-out)."""

    def __init__(self, ns: SimpleNamespace, addresses: list[str]) -> None:
        self.ns = ns
        self.addresses = addresses
        self.mode = parse_mode(ns.mode)
        self.pool = HostPool(addresses) if self.mode == HOSTPOOL else RoundRobin(addresses)
        self.per_address = per_address_metrics(addresses, ns.status_every)
        self.aggregate = TimerMetrics(ns.status_every, "[aggregate]:")

    def handle(self, publisher: Publisher, msg: Message) -> bool:
        """True: FIN (also for a message --sample skips); False: REQ."""
        if self.ns.sample < 1.0 and random.random() > self.ns.sample:
            return True
        start = time.monotonic()
        targets = self.addresses if self.mode == FAN_OUT else [self.pool.get()]
        for addr in targets:
            st = time.monotonic()
            try:
                publisher.publish(addr, msg.body)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                log.error("%s %s: %s", "POST" if self.ns.post else "GET", addr, exc)
                self.pool.mark(addr, False)
                return False
            self.pool.mark(addr, True)
            self.per_address[addr].status(st)
        self.aggregate.status(start)
        return True


def to_http(ns: SimpleNamespace) -> int:
    """Run until SIGINT/SIGTERM."""
    check(ns)
    setup_logging()
    addresses = ns.post or ns.get
    handler = Handler(ns, addresses)
    consumer = Consumer(ns.topic, ns.channel, client_config(ns.consumer_opt, user_agent(TOOL), ns.max_in_flight))
    signals = Signals()
    workers = [threading.Thread(target=_work, args=(consumer, handler, Publisher(ns)), name=f"publisher {i}",
                                daemon=True) for i in range(ns.n)]
    for w in workers:
        w.start()
    try:
        consumer.connect_to_nsqds(ns.nsqd_tcp_address)
        consumer.connect_to_lookupds(ns.lookupd_http_address)
    except ConnectionError as exc:
        consumer.close(timeout=1.0)
        raise Fatal(str(exc)) from None
    while not signals.stop:
        signals.wait()
    consumer.stop()
    deadline = time.monotonic() + 2.0
    for event in list(consumer.close_wait.values()):
        event.wait(max(0.0, deadline - time.monotonic()))
    for _ in workers:
        consumer.wake()  # after what is queued: the workers handle that first
    for w in workers:
        w.join(ns.http_client_request_timeout + 1.0)
    consumer.close(timeout=1.0)
    return 0


def _work(consumer: Consumer, handler: Handler, publisher: Publisher) -> None:
    while (msg := consumer.get()) is not None:
        if handler.handle(publisher, msg):
            msg.finish()
        else:
            msg.requeue()


def main(argv: list[str]) -> int:
    """``nsqmp to-http``."""
    return run(TOOL, flag_set(), argv, to_http)
