"""``nsqmp nsq-to-nsq``: nsq_to_nsq. Consume topics from brokers, publish to others.

Each message is published (pipelined, PublishAsync) to the --destination-topic (or a
topic of the same name) on one --destination-nsqd-tcp-address chosen by --mode
(round-robin, hostpool: the default) or, with fan-out (nsqmp's addition), on every one
of them; it is FINished once its OK arrived (all of them, for fan-out) and REQueued
otherwise. JSON messages can be filtered (--require-json-field/-value) and cut down
(--whitelist-json-field). SIGINT/SIGTERM: CLS, the messages already delivered are
published and answered, then exit 0.
"""
from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import orjson

from nsqmp.client.consumer import Consumer, Message, MessageQueue
from nsqmp.client.producer import Producer
from nsqmp.protocol.names import is_valid_name
from nsqmp.utils.common import (
    Fatal, Signals, add_version, check_sources, client_config, run, setup_logging, user_agent,
)
from nsqmp.utils.flags import FlagSet
from nsqmp.utils.upstream import FAN_OUT, HOSTPOOL, HostPool, RoundRobin, TimerMetrics, parse_mode, per_address_metrics

TOOL = "nsq_to_nsq"
log = logging.getLogger("nsqmp.utils")


def flag_set() -> FlagSet:
    """nsq_to_nsq 1.3.0's flags."""
    fs = FlagSet("nsqmp nsq-to-nsq")
    add_version(fs)
    fs.add("channel", "string", "nsq_to_nsq", "nsq channel")
    fs.add("destination-topic", "string", "", "use this destination topic for all consumed topics "
                                              "(default is consumed topic name)")
    fs.add("max-in-flight", "int", 200, "max number of messages to allow in flight")
    fs.add("status-every", "int", 250, "the # of requests between logging status (per destination), 0 disables")
    fs.add("mode", "string", "hostpool", "the upstream request mode options: round-robin, hostpool (default), "
                                         "epsilon-greedy, fan-out")
    fs.add("nsqd-tcp-address", "value", [], "nsqd TCP address (may be given multiple times)")
    fs.add("destination-nsqd-tcp-address", "value", [], "destination nsqd TCP address (may be given multiple times)")
    fs.add("lookupd-http-address", "value", [], "lookupd HTTP address (may be given multiple times)")
    fs.add("topic", "value", [], "nsq topic (may be given multiple times)")
    fs.add("whitelist-json-field", "value", [], "for JSON messages: pass this field (may be given multiple times)")
    fs.add("require-json-field", "string", "", "for JSON messages: only pass messages that contain this field")
    fs.add("require-json-value", "string", "", "for JSON messages: only pass messages in which the required "
                                               "field has this value")
    for kind in ("consumer", "producer"):
        fs.add(f"{kind}-opt", "value", [], f"option to passthrough to the {kind} (may be given multiple "
                                           "times: key,value with go-nsq's Config names)")
    return fs


def check(ns: SimpleNamespace) -> None:
    """nsq_to_nsq's checks, in its order."""
    if not ns.topic or not ns.channel:
        raise Fatal("--topic and --channel are required")
    if not all(is_valid_name(t.encode()) for t in ns.topic):
        raise Fatal("--topic is invalid")
    if ns.destination_topic and not is_valid_name(ns.destination_topic.encode()):
        raise Fatal("--destination-topic is invalid")
    if not is_valid_name(ns.channel.encode()):
        raise Fatal("--channel is invalid")
    check_sources(ns)
    if not ns.destination_nsqd_tcp_address:
        raise Fatal("--destination-nsqd-tcp-address required")


class JSONFilter:
    """--require-json-field/-value and --whitelist-json-field."""

    def __init__(self, ns: SimpleNamespace) -> None:
        self.field = ns.require_json_field
        self.value = ns.require_json_value
        self.whitelist = ns.whitelist_json_field
        try:
            self.number: float | None = float(self.value) if self.value else None
        except ValueError:
            self.number = None

    @property
    def active(self) -> bool:
        """Messages are parsed as JSON only when a filter is set."""
        return bool(self.field or self.whitelist)

    def apply(self, body: bytes) -> tuple[bytes | None, bool]:
        """(body to publish or None to drop it, requeue instead of dropping)."""
        try:
            js = orjson.loads(body)
            if not isinstance(js, dict):
                raise ValueError("not an object")
        except ValueError:
            log.error("ERROR: Unable to decode json: %s", body[:200].decode(errors="replace"))
            return None, False
        if self.field:
            if self.field not in js:
                if self.value:
                    log.error("ERROR: missing field to check required value")
                return None, bool(self.value)
            if self.value and not self._matches(js[self.field]):
                return None, False
        if not self.whitelist:
            return body, False
        kept = {}
        for key in self.whitelist:
            if key in js:
                v = js[key]
                kept[key] = int(v) if isinstance(v, float) and v.is_integer() else v
        return orjson.dumps(kept, option=orjson.OPT_SORT_KEYS), False

    def _matches(self, v) -> bool:
        if isinstance(v, str):
            return v == self.value
        if self.number is not None and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v) == self.number
        return False


class Publisher:
    """PublishHandler: choose the destination(s), publish, FIN or REQ on the answer."""

    def __init__(self, ns: SimpleNamespace, producers: dict[str, Producer]) -> None:
        self.producers = producers
        addresses = list(producers)
        self.addresses = addresses
        self.mode = parse_mode(ns.mode)
        self.pool = HostPool(addresses) if self.mode == HOSTPOOL else RoundRobin(addresses)
        self.per_address = per_address_metrics(addresses, ns.status_every)
        self.aggregate = TimerMetrics(ns.status_every, "[aggregate]:")
        self.outstanding = 0
        self.cond = threading.Condition()

    def publish(self, msg: Message, topic: str, body: bytes) -> None:
        """Publish without waiting; the answer (in a producer's reader thread) FINs or REQs."""
        targets = self.addresses if self.mode == FAN_OUT else [self.pool.get()]
        state = {"left": len(targets), "ok": True}
        start = time.monotonic()
        with self.cond:
            self.outstanding += 1

        for addr in targets:
            def answered(error: Exception | None, addr: str = addr) -> None:
                self.pool.mark(addr, error is None)
                self.per_address[addr].status(start)
                with self.cond:
                    state["left"] -= 1
                    state["ok"] = state["ok"] and error is None
                    done = state["left"] == 0
                if error is not None:
                    log.error("publishing to %s failed: %s", addr, error)
                if not done:
                    return
                if state["ok"]:
                    msg.finish()
                else:
                    msg.requeue()
                self.aggregate.status(start)
                with self.cond:
                    self.outstanding -= 1
                    self.cond.notify_all()

            self.producers[addr].publish_async(topic, body, answered)

    def wait(self, timeout: float) -> None:
        """Until every publish was answered (or timeout)."""
        with self.cond:
            self.cond.wait_for(lambda: self.outstanding == 0, timeout)


def nsq_to_nsq(ns: SimpleNamespace) -> int:
    """Run until SIGINT/SIGTERM."""
    check(ns)
    parse_mode(ns.mode)
    setup_logging()
    ua = user_agent(TOOL)
    pcfg = client_config(ns.producer_opt, ua, flag="producer-opt")
    producers = {addr: Producer(addr, pcfg) for addr in dict.fromkeys(ns.destination_nsqd_tcp_address)}
    publisher = Publisher(ns, producers)
    filt = JSONFilter(ns)
    queue = MessageQueue()
    signals = Signals(wake=queue.wake)
    ccfg = client_config(ns.consumer_opt, ua, ns.max_in_flight)
    consumers = [Consumer(topic, ns.channel, ccfg, queue) for topic in ns.topic]
    try:
        for consumer in consumers:
            consumer.connect_to_nsqds(ns.nsqd_tcp_address)
        for consumer in consumers:
            consumer.connect_to_lookupds(ns.lookupd_http_address)
        while not signals.stop:
            _handle(queue.get(), ns, publisher, filt)
        for consumer in consumers:
            consumer.stop()
        deadline = time.monotonic() + 2.0
        for event in [e for c in consumers for e in list(c.close_wait.values())]:
            event.wait(max(0.0, deadline - time.monotonic()))
        while not queue.empty():
            _handle(queue.get(), ns, publisher, filt)
        publisher.wait(10.0)
    except ConnectionError as exc:
        raise Fatal(str(exc)) from None
    finally:
        for consumer in consumers:
            consumer.close(timeout=1.0)
        for producer in producers.values():
            producer.stop()
    return 0


def _handle(msg: Message | None, ns: SimpleNamespace, publisher: Publisher, filt: JSONFilter) -> None:
    if msg is None:
        return
    body: bytes | None = msg.body
    if filt.active:
        body, requeue = filt.apply(msg.body)
        if body is None:
            msg.requeue() if requeue else msg.finish()
            return
    assert body is not None
    publisher.publish(msg, ns.destination_topic or msg.topic, body)


def main(argv: list[str]) -> int:
    """``nsqmp nsq-to-nsq``."""
    return run(TOOL, flag_set(), argv, nsq_to_nsq)
