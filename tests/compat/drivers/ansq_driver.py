"""ansq (asyncio) driver: see cli.py for the scenarios and what is printed.

ansq 0.3.0 implements no TLS, snappy or deflate upgrade (its NSQConnection raises
NotImplementedError when the IDENTIFY response enables one), so only plain TCP is
driven here; test_ansq.py shows the NotImplementedError. Its Reader keeps RDY 1 per
connection and its Reader/Writer never send AUTH, so the auth scenario uses ansq's
own connection API (open_connection, auth, sub); see auth() for what ansq then does.
"""
from __future__ import annotations

import argparse
import asyncio
import time

from ansq import ConnectionFeatures, ConnectionOptions, create_reader, create_writer, open_connection

from tests.compat.drivers import cli


def options(args: argparse.Namespace) -> ConnectionOptions:
    features = ConnectionFeatures(heartbeat_interval=args.heartbeat_ms,
                                  msg_timeout=args.msg_timeout_ms or 60_000,
                                  tls_v1=args.tls, snappy=args.snappy, deflate=args.deflate)
    return ConnectionOptions(features=features, auto_reconnect=False)


async def publish(writer, topic: str, bodies: list[bytes], deadline: float) -> list[str]:
    """PUB the first tenth, MPUB the rest, all in flight at once; return the errors."""
    n_pub = len(bodies) // 10
    calls = [writer.pub(topic, body) for body in bodies[:n_pub]]
    calls += [writer.mpub(topic, *bodies[i:i + cli.MPUB_BATCH])
              for i in range(n_pub, len(bodies), cli.MPUB_BATCH)]
    try:
        answers = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True),
                                         max(0.1, deadline - time.monotonic()))
    except asyncio.TimeoutError:
        return ["publishes not answered before the deadline"]
    return [repr(a) for a in answers if not getattr(a, "is_ok", False)]


async def roundtrip(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.deadline
    expected = cli.bodies(args)
    got: list[str] = []
    attempts: dict[int, int] = {}
    distinct: set[bytes] = set()
    reader = await create_reader(args.topic, args.channel, nsqd_tcp_addresses=[args.address],
                                 connection_options=options(args))

    async def consume() -> None:
        async for message in reader.messages():
            got.append(message.body.decode())
            distinct.add(message.body)
            attempts[message.attempts] = attempts.get(message.attempts, 0) + 1
            await message.fin()

    consumer = asyncio.create_task(consume())
    writer = await create_writer([args.address], connection_options=options(args))
    errors = await publish(writer, args.topic, expected, deadline)
    cli.emit("published", count=len(expected), errors=errors)
    while len(distinct) < len(expected) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)  # the client's own polling, its library runs meanwhile
    await asyncio.sleep(cli.GRACE)  # a late duplicate would arrive now: the time is what is tested
    cli.emit("received", bodies=got, attempts=attempts)
    cli.emit("holding")
    await asyncio.get_running_loop().run_in_executor(None, cli.wait_stdin_line)
    consumer.cancel()
    await reader.close()
    await writer.close()


async def redelivery(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.deadline
    seen = cli.Deliveries(args.count)
    held = []
    reader = await create_reader(args.topic, args.channel, nsqd_tcp_addresses=[args.address],
                                 connection_options=options(args))

    async def consume() -> None:
        async for message in reader.messages():
            if message.attempts >= 2:
                seen.add(message.body, message.attempts, "fin")
                await message.fin()
            elif args.scenario == "requeue":
                seen.add(message.body, message.attempts, "req")
                await message.req(0)
            else:
                seen.add(message.body, message.attempts, "hold")
                held.append(message)  # never answered: the broker must time it out

    consumer = asyncio.create_task(consume())
    writer = await create_writer([args.address], connection_options=options(args))
    errors = await publish(writer, args.topic, cli.bodies(args), deadline)
    while not seen.complete and time.monotonic() < deadline:
        await asyncio.sleep(0.02)  # the client's own polling, its library runs meanwhile
    await asyncio.sleep(cli.GRACE)  # a late duplicate would arrive now: the time is what is tested
    cli.emit("deliveries", items=seen.items, errors=errors)
    consumer.cancel()
    await reader.close()
    await writer.close()


async def heartbeat(args: argparse.Namespace) -> None:
    reader = await create_reader(args.topic, args.channel, nsqd_tcp_addresses=[args.address],
                                 connection_options=options(args))
    cli.emit("subscribed")
    await asyncio.get_running_loop().run_in_executor(None, cli.wait_stdin_line)
    await reader.close()


def describe(answer) -> str:
    """An ansq answer or exception as text: OK, the error frame, or the exception."""
    if isinstance(answer, BaseException):
        return f"{type(answer).__name__}: {answer}"
    return "OK" if getattr(answer, "is_ok", False) else str(answer)


async def attempt(call) -> object:
    try:
        return await asyncio.wait_for(call, 5)
    except Exception as exc:  # what ansq raised is the result being reported
        return exc


async def auth(args: argparse.Namespace) -> None:
    """ansq sends AUTH only when asked (conn.auth); every step is reported as it came.

    ansq 0.3.0 never marks a connection authorized after a successful AUTH
    (TCPConnection._is_authorized stays False), so once the broker says auth_required it
    refuses every later command itself with NSQUnauthorized before sending it.
    """
    host, port = args.address.rsplit(":", 1)
    result: dict = {}
    for key, topic in (("pub_allowed", args.topic), ("pub_denied", args.denied_topic)):
        conn = await open_connection(host, int(port), connection_options=options(args))
        result["auth_required"] = conn.is_auth_required
        answer = await attempt(conn.auth(args.auth_secret))
        result.setdefault("auth", describe(answer) if isinstance(answer, BaseException) else answer.body.decode())
        result[key] = describe(await attempt(conn.pub(topic, b"secret-body")))
        await conn.close()
    for key, topic in (("sub_allowed", args.topic), ("sub_denied", args.denied_topic)):
        conn = await open_connection(host, int(port), connection_options=options(args))
        await attempt(conn.auth(args.auth_secret))
        answer = await attempt(conn.sub(topic, args.channel))
        got: list[str] = []
        errors = [] if describe(answer) == "OK" else [describe(answer)]
        if not errors:
            await conn.rdy(1)
            message = await attempt(conn.wait_for_message())
            if message is not None and not isinstance(message, BaseException):
                got.append(message.body.decode())
                await message.fin()
        result[key] = {"received": got, "errors": errors}
        await conn.close()
    cli.emit("auth", **result)


def main() -> None:
    cli.run(roundtrip, redelivery, heartbeat, auth, call=lambda scenario, args: asyncio.run(scenario(args)))


if __name__ == "__main__":
    main()
