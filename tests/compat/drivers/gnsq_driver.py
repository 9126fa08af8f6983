"""gnsq (gevent) driver: see cli.py for the scenarios and what is printed.

gnsq's IDENTIFY carries no msg_timeout (gnsq/nsqd.py builds a fixed set of fields), so
for the timeout scenario the test starts a broker whose default --msg-timeout is short.

gnsq's Producer cannot use TLS, snappy or deflate with any nsqd: its response handler is
connected before IDENTIFY, so the OK that follows each upgrade (sent by nsqd, and by
nsqmp) is taken for a publish answer and raises KeyError in Producer.handle_response.
With an upgrade this driver publishes through gnsq's own connection class,
NsqdTCPClient, which upgrades correctly; plain publishing uses the Producer.
"""
from __future__ import annotations

import argparse
import sys
import time

import gevent
import gevent.select
import gnsq
from gnsq.errors import NSQException

from tests.compat.drivers import cli


def conn_options(args: argparse.Namespace) -> dict:
    opts: dict = {"heartbeat_interval": max(1, args.heartbeat_ms // 1000)}
    if args.tls:
        opts.update(tls_v1=True, tls_options={})  # gnsq's default: TLS 1.2, no verification
    if args.snappy:
        opts["snappy"] = True
    if args.deflate:
        opts.update(deflate=True, deflate_level=6)
    if args.auth_secret:
        opts["auth_secret"] = args.auth_secret.encode()  # gnsq sends it as the body as is
    return opts


def wait_stdin_line() -> None:
    """Wait for the test's line without blocking gevent's hub (heartbeats go on)."""
    while not gevent.select.select([sys.stdin], [], [], 0.1)[0]:
        pass
    sys.stdin.readline()


def wait_until(predicate, deadline: float) -> bool:
    while not predicate():
        if time.monotonic() > deadline:
            return False
        gevent.sleep(0.02)  # the client's own polling, its library runs meanwhile
    return True


def producer(args: argparse.Namespace) -> gnsq.Producer:
    p = gnsq.Producer([args.address], **conn_options(args))
    p.start()
    return p


def upgraded(args: argparse.Namespace) -> bool:
    return args.tls or args.snappy or args.deflate


def publish_on_connection(args: argparse.Namespace, bodies: list[bytes], deadline: float) -> list[str]:
    """PUB the first tenth, MPUB the rest on one NsqdTCPClient; read every answer."""
    conn = gnsq.NsqdTCPClient(*args.address.rsplit(":", 1), **conn_options(args))
    conn.connect()
    conn.identify()
    n_pub = len(bodies) // 10
    sent = 0
    for body in bodies[:n_pub]:
        conn.publish(args.topic, body)
        sent += 1
    for i in range(n_pub, len(bodies), cli.MPUB_BATCH):
        conn.multipublish(args.topic, bodies[i:i + cli.MPUB_BATCH])
        sent += 1
    errors = []
    answered = 0
    with gevent.Timeout(max(0.1, deadline - time.monotonic()), False):
        while answered < sent:
            frame, data = conn.read_response()
            if data == gnsq.protocol.HEARTBEAT:
                continue  # read_response already answered it with NOP
            answered += 1
            if data != gnsq.protocol.OK:
                errors.append(repr(data))
    if answered < sent:
        errors.append(f"only {answered} of {sent} publishes answered")
    conn.close_stream()
    return errors


def publish(p: gnsq.Producer, topic: str, bodies: list[bytes], deadline: float) -> list[str]:
    """PUB the first tenth, MPUB the rest (pipelined); wait for every answer."""
    results = []
    n_pub = len(bodies) // 10
    for body in bodies[:n_pub]:
        results.append(p.publish(topic, body, raise_error=False))
    for i in range(n_pub, len(bodies), cli.MPUB_BATCH):
        results.append(p.multipublish(topic, bodies[i:i + cli.MPUB_BATCH], raise_error=False))
    errors = []
    for r in results:
        try:
            answer = r.get(timeout=max(0.1, deadline - time.monotonic()))
        except (NSQException, gevent.Timeout) as e:
            errors.append(repr(e))
            continue
        if answer != b"OK":
            errors.append(repr(answer))
    return errors


def roundtrip(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.deadline
    expected = cli.bodies(args)
    got: list[str] = []
    attempts: dict[int, int] = {}
    distinct: set[bytes] = set()

    def handler(consumer, message) -> None:  # returning finishes the message
        got.append(message.body.decode())
        distinct.add(message.body)
        attempts[message.attempts] = attempts.get(message.attempts, 0) + 1

    consumer = gnsq.Consumer(args.topic, args.channel, [args.address], message_handler=handler,
                             max_in_flight=200, **conn_options(args))
    consumer.start(block=False)
    p = None
    if upgraded(args):
        errors = publish_on_connection(args, expected, deadline)
    else:
        p = producer(args)
        errors = publish(p, args.topic, expected, deadline)
    cli.emit("published", count=len(expected), errors=errors)
    wait_until(lambda: len(distinct) >= len(expected), deadline)
    gevent.sleep(cli.GRACE)  # a late duplicate would arrive now: the time is what is tested
    cli.emit("received", bodies=got, attempts=attempts)
    cli.emit("holding")
    wait_stdin_line()
    consumer.close()
    if p is not None:
        p.close()


def redelivery(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.deadline
    seen = cli.Deliveries(args.count)
    held = []

    def handler(consumer, message) -> None:
        if message.attempts >= 2:
            seen.add(message.body, message.attempts, "fin")
            return
        message.enable_async()
        if args.scenario == "requeue":
            seen.add(message.body, message.attempts, "req")
            message.requeue(time_ms=0, backoff=False)
        else:
            seen.add(message.body, message.attempts, "hold")
            held.append(message)  # never answered: the broker must time it out

    consumer = gnsq.Consumer(args.topic, args.channel, [args.address], message_handler=handler,
                             max_in_flight=10, **conn_options(args))
    consumer.start(block=False)
    p = producer(args)
    errors = publish(p, args.topic, cli.bodies(args), deadline)
    wait_until(lambda: seen.complete, deadline)
    gevent.sleep(cli.GRACE)  # a late duplicate would arrive now: the time is what is tested
    cli.emit("deliveries", items=seen.items, errors=errors)
    consumer.close()
    p.close()


def heartbeat(args: argparse.Namespace) -> None:
    consumer = gnsq.Consumer(args.topic, args.channel, [args.address],
                             message_handler=lambda consumer, message: None, max_in_flight=1, **conn_options(args))
    consumer.start(block=False)
    assert wait_until(lambda: any(c.is_connected for c in consumer._connections),
                      time.monotonic() + 10), "gnsq Consumer did not connect"
    cli.emit("subscribed")
    wait_stdin_line()
    consumer.close()


def describe(error: BaseException) -> str:
    """gnsq drops the E_* code from the text; its exception class's docstring names it."""
    return f"{type(error).__name__} ({(type(error).__doc__ or '').strip()}): {error}"


def auth(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.deadline
    result: dict = {}
    for key, topic in (("pub_allowed", args.topic), ("pub_denied", args.denied_topic)):
        p = producer(args)
        try:
            result[key] = repr(p.publish(topic, b"secret-body", timeout=5))
        except (NSQException, gevent.Timeout) as e:
            result[key] = describe(e)
        p.close()
    for key, topic in (("sub_allowed", args.topic), ("sub_denied", args.denied_topic)):
        got: list[str] = []
        errors: list[str] = []
        consumer = gnsq.Consumer(topic, args.channel, [args.address], max_in_flight=1,
                                 message_handler=lambda consumer, message: got.append(message.body.decode()),
                                 **conn_options(args))
        consumer.on_error.connect(lambda consumer, error: errors.append(describe(error)), weak=False)
        consumer.start(block=False)
        wait_until(lambda: got or errors, min(deadline, time.monotonic() + 5))
        result[key] = {"received": list(got), "errors": list(errors)}
        consumer.close()
    cli.emit("auth", **result)


def main() -> None:
    cli.run(roundtrip, redelivery, heartbeat, auth)


if __name__ == "__main__":
    main()
