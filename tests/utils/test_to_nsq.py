"""nsqmp to-nsq and nsqmp nsq-to-nsq against running brokers."""
from __future__ import annotations

import time

from nsqmp.client import Connection
from tests.harness import wait_for
from tests.utils.helpers import run


def _topic(broker, name: str) -> dict | None:
    found = [t for t in broker.stats()["topics"] if t["topic_name"] == name]
    return found[0] if found else None


def _depth(broker, name: str) -> int:
    t = _topic(broker, name)
    return t["depth"] if t else 0


def _drain(broker, topic: str, n: int) -> list[bytes]:
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub(topic, "check", rdy=n)
        got = []
        for _ in range(n):
            m = c.read_message()
            got.append(m.body)
            c.fin(m.id)
        return got


def test_to_nsq_publishes_stdin_lines_to_every_broker(make_broker):
    a, b = make_broker(), make_broker()
    r = run("to-nsq", "--topic", "in", "--nsqd-tcp-address", a.tcp_address, "--nsqd-tcp-address", b.tcp_address,
            input=b"first\nsecond\n\nthird")
    assert r.returncode == 0, r.stderr
    for broker in (a, b):
        assert sorted(_drain(broker, "in", 3)) == [b"first", b"second", b"third"]  # the empty line is skipped


def test_to_nsq_delimiter_and_rate(broker):
    r = run("to-nsq", "--topic", "d", "--nsqd-tcp-address", broker.tcp_address, "--delimiter", ",",
            input=b"x,y,z\n")
    assert r.returncode == 0, r.stderr
    assert sorted(_drain(broker, "d", 3)) == [b"x", b"y", b"z"]
    started = time.monotonic()
    r = run("to-nsq", "--topic", "slow", "--nsqd-tcp-address", broker.tcp_address, "--rate", "10",
            input=b"".join(b"%d\n" % i for i in range(8)))
    took = time.monotonic() - started
    assert r.returncode == 0, r.stderr
    assert "Throttling messages rate to max:10/second" in r.stderr.decode()
    assert _depth(broker, "slow") == 8
    assert took >= 0.6  # one message at once, then one every 100 ms


def _nsq_to_nsq(utils, src, dests, *args):
    return utils("nsq-to-nsq", "--topic", "src", "--nsqd-tcp-address", src.tcp_address,
                 *[a for d in dests for a in ("--destination-nsqd-tcp-address", d.tcp_address)], *args)


def test_nsq_to_nsq_round_robin_then_fan_out(make_broker, utils):
    src, d1, d2 = make_broker(), make_broker(), make_broker()
    src.http("POST", "/mpub?topic=src", b"\n".join(b"m%d" % i for i in range(20)))
    tool = _nsq_to_nsq(utils, src, (d1, d2), "--mode", "round-robin", "--destination-topic", "dst")
    wait_for(lambda: _depth(d1, "dst") + _depth(d2, "dst") == 20, what="20 messages copied")
    assert tool.stop() == 0, tool.stderr()
    assert (_depth(d1, "dst"), _depth(d2, "dst")) == (10, 10)
    (channel,) = _topic(src, "src")["channels"]
    assert (channel["depth"], channel["in_flight_count"], channel["message_count"]) == (0, 0, 20)

    src.http("POST", "/mpub?topic=src", b"\n".join(b"n%d" % i for i in range(20)))
    tool = _nsq_to_nsq(utils, src, (d1, d2), "--mode", "fan-out")  # same topic name on the destinations
    wait_for(lambda: _depth(d1, "src") + _depth(d2, "src") == 40, what="20 messages to both")
    assert tool.stop() == 0, tool.stderr()
    for d in (d1, d2):
        assert sorted(_drain(d, "src", 20)) == sorted(b"n%d" % i for i in range(20))


def test_nsq_to_nsq_json_filters(make_broker, utils):
    src, dst = make_broker(), make_broker()
    bodies = [b'{"kind":"a","n":1.0,"drop":true}', b'{"kind":"b","n":2}', b'not json', b'{"n":3}']
    src.http("POST", "/mpub?topic=src", b"\n".join(bodies))
    tool = _nsq_to_nsq(utils, src, (dst,), "--require-json-field", "kind", "--require-json-value", "a",
                       "--whitelist-json-field", "kind", "--whitelist-json-field", "n",
                       "--consumer-opt", "max_attempts,1", "--consumer-opt", "default_requeue_delay,0")
    wait_for(lambda: _depth(dst, "src") == 1, what="the one matching message")

    # the message without the field is requeued (nsq_to_nsq's backoff), and given up when it
    # comes back past max_attempts; the others that do not match are dropped (FINished)
    def drained() -> bool:
        c = _topic(src, "src")["channels"][0]
        return (c["depth"], c["in_flight_count"], c["deferred_count"], c["requeue_count"]) == (0, 0, 0, 1)

    wait_for(drained, what="the source drained")
    assert tool.stop() == 0, tool.stderr()
    assert "attempted 2 times, giving up" in tool.stderr()
    assert _drain(dst, "src", 1) == [b'{"kind":"a","n":1}']
