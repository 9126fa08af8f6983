"""pynsq (tornado) driver: see cli.py for the scenarios and what is printed."""
from __future__ import annotations

import argparse
import asyncio
import ssl
import time

import nsq

from tests.compat.drivers import cli


def conn_options(args: argparse.Namespace) -> dict:
    opts: dict = {"heartbeat_interval": max(1, args.heartbeat_ms // 1000)}
    if args.tls:
        opts.update(tls_v1=True, tls_options={"cert_reqs": ssl.CERT_NONE})
    if args.snappy:
        opts["snappy"] = True
    if args.deflate:
        opts.update(deflate=True, deflate_level=6)
    if args.msg_timeout_ms:
        opts["msg_timeout"] = args.msg_timeout_ms / 1000
    if args.auth_secret:
        opts["auth_secret"] = args.auth_secret
    return opts


def close_reader(reader: nsq.Reader) -> None:
    reader.connect_to_nsqd = lambda *a, **k: None  # pynsq would reconnect a closed connection
    reader.close()


async def connected_writer(args: argparse.Namespace) -> nsq.Writer:
    writer = nsq.Writer([args.address], **conn_options(args))
    deadline = time.monotonic() + 10
    while not writer.conns:
        assert time.monotonic() < deadline, "pynsq Writer did not connect"
        await asyncio.sleep(0.02)  # the client's own polling, its library runs meanwhile
    return writer


async def publish(writer: nsq.Writer, topic: str, bodies: list[bytes], deadline: float) -> list[str]:
    """PUB the first tenth, MPUB the rest; wait for every answer; return the errors."""
    answers: list = []
    n_pub = len(bodies) // 10
    sent = 0
    for body in bodies[:n_pub]:
        writer.pub(topic, body, callback=lambda conn, data: answers.append(data))
        sent += 1
    for i in range(n_pub, len(bodies), cli.MPUB_BATCH):
        writer.mpub(topic, bodies[i:i + cli.MPUB_BATCH], callback=lambda conn, data: answers.append(data))
        sent += 1
    while len(answers) < sent and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # the client's own polling, its library runs meanwhile
    errors = [str(a) for a in answers if a != b"OK"]
    if len(answers) < sent:
        errors.append(f"only {len(answers)} of {sent} publishes answered")
    return errors


async def roundtrip(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.deadline
    expected = cli.bodies(args)
    got: list[str] = []
    attempts: dict[int, int] = {}
    distinct: set[bytes] = set()

    def handler(message: nsq.Message) -> bool:
        got.append(message.body.decode())
        distinct.add(message.body)
        attempts[message.attempts] = attempts.get(message.attempts, 0) + 1
        return True

    reader = nsq.Reader(args.topic, args.channel, handler, nsqd_tcp_addresses=[args.address],
                        max_in_flight=200, **conn_options(args))
    writer = await connected_writer(args)
    errors = await publish(writer, args.topic, expected, deadline)
    cli.emit("published", count=len(expected), errors=errors)
    while len(distinct) < len(expected) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)  # the client's own polling, its library runs meanwhile
    await asyncio.sleep(cli.GRACE)  # a late duplicate would arrive now: the time is what is tested
    cli.emit("received", bodies=got, attempts=attempts)
    cli.emit("holding")
    await asyncio.get_running_loop().run_in_executor(None, cli.wait_stdin_line)
    close_reader(reader)
    for conn in writer.conns.values():
        conn.close()
    await asyncio.sleep(0.1)  # the client library closes its connections on its own loop


async def redelivery(args: argparse.Namespace) -> None:
    """requeue and timeout: attempt 1 is requeued or left unanswered, attempt 2 finished."""
    deadline = time.monotonic() + args.deadline
    seen = cli.Deliveries(args.count)
    held: list[nsq.Message] = []

    def handler(message: nsq.Message):
        if message.attempts >= 2:
            seen.add(message.body, message.attempts, "fin")
            return True
        message.enable_async()
        if args.scenario == "requeue":
            seen.add(message.body, message.attempts, "req")
            message.requeue(backoff=False, delay=0)
        else:
            seen.add(message.body, message.attempts, "hold")
            held.append(message)  # never answered: the broker must time it out
        return None

    reader = nsq.Reader(args.topic, args.channel, handler, nsqd_tcp_addresses=[args.address],
                        max_in_flight=10, max_tries=0, **conn_options(args))
    writer = await connected_writer(args)
    errors = await publish(writer, args.topic, cli.bodies(args), deadline)
    while not seen.complete and time.monotonic() < deadline:
        await asyncio.sleep(0.02)  # the client's own polling, its library runs meanwhile
    await asyncio.sleep(cli.GRACE)  # a late duplicate would arrive now: the time is what is tested
    cli.emit("deliveries", items=seen.items, errors=errors)
    close_reader(reader)
    for conn in writer.conns.values():
        conn.close()
    await asyncio.sleep(0.1)  # the client library closes its connections on its own loop


async def heartbeat(args: argparse.Namespace) -> None:
    reader = nsq.Reader(args.topic, args.channel, lambda m: True, nsqd_tcp_addresses=[args.address],
                        max_in_flight=1, **conn_options(args))
    deadline = time.monotonic() + 10
    while not any(c.connected() for c in reader.conns.values()):
        assert time.monotonic() < deadline, "pynsq Reader did not connect"
        await asyncio.sleep(0.02)  # the client's own polling, its library runs meanwhile
    cli.emit("subscribed")
    await asyncio.get_running_loop().run_in_executor(None, cli.wait_stdin_line)
    close_reader(reader)


async def auth(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.deadline
    result: dict = {}
    writer = await connected_writer(args)
    for key, topic in (("pub_allowed", args.topic), ("pub_denied", args.denied_topic)):
        answers: list = []
        writer.pub(topic, b"secret-body", callback=lambda conn, data: answers.append(data))
        while not answers and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the client's own polling, its library runs meanwhile
        result[key] = str(answers[0]) if answers else "no answer"
        if answers and answers[0] != b"OK":
            # the broker closes a connection after a fatal error; take a fresh writer
            for conn in writer.conns.values():
                conn.close()
            writer = await connected_writer(args)
    for key, topic in (("sub_allowed", args.topic), ("sub_denied", args.denied_topic)):
        got: list[bytes] = []
        errors: list[str] = []
        reader = nsq.Reader(topic, args.channel, lambda m: got.append(m.body) or True,
                            nsqd_tcp_addresses=[args.address], max_in_flight=1, **conn_options(args))
        log_error = reader._on_connection_error  # pynsq has no public hook for a reader's errors

        def on_error(conn, error, log_error=log_error, errors=errors, **kwargs) -> None:
            errors.append(str(error))
            log_error(conn, error, **kwargs)

        reader._on_connection_error = on_error  # bound when the connection is made, later
        end = min(deadline, time.monotonic() + 5)
        while not got and not errors and time.monotonic() < end:
            await asyncio.sleep(0.02)  # the client's own polling, its library runs meanwhile
        result[key] = {"received": [b.decode() for b in got], "errors": list(errors)}
        close_reader(reader)
    cli.emit("auth", **result)
    for conn in writer.conns.values():
        conn.close()
    await asyncio.sleep(0.1)  # the client library closes its connections on its own loop


def main() -> None:
    cli.run(roundtrip, redelivery, heartbeat, auth, call=lambda scenario, args: asyncio.run(scenario(args)))


if __name__ == "__main__":
    main()
