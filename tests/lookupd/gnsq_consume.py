"""A gnsq Consumer given only lookupd HTTP addresses, run as its own process (gevent stays
out of pytest's process).

    python -m tests.lookupd.gnsq_consume TOPIC CHANNEL COUNT TIMEOUT LOOKUPD_HTTP...

Once COUNT messages arrived (each finished) or TIMEOUT seconds passed, prints one JSON line:
the bodies it got, in arrival order, as latin-1 strings. Exits 0 if it got COUNT, else 1.
(Which brokers it connected to, the test reads from the brokers' /stats.)
"""
from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    import gevent
    from gnsq import Consumer

    topic, channel, count, timeout, *lookupds = argv
    want, limit = int(count), float(timeout)
    got: list[str] = []
    consumer = Consumer(topic, channel, lookupd_http_addresses=lookupds, max_in_flight=100,
                        lookupd_poll_interval=1, lookupd_poll_jitter=0)

    @consumer.on_message.connect
    def on_message(_consumer, message) -> None:
        got.append(message.body.decode("latin-1"))

    consumer.start(block=False)
    deadline = time.monotonic() + limit
    while len(got) < want and time.monotonic() < deadline:
        gevent.sleep(0.05)  # the client's own polling: gevent runs the consumer meanwhile
    gevent.sleep(0.2)  # the last FINs go out before the connections close
    consumer.close()
    consumer.join(timeout=5)
    print(json.dumps(got), flush=True)
    return 0 if len(got) >= want else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
