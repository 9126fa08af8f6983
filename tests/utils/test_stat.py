"""nsqmp stat against a running broker: nsq_stat's header, then rows whose numbers are
the channel's /stats (a consumer holds messages in flight meanwhile)."""
from __future__ import annotations

from nsqmp.client import Connection
from nsqmp.utils.stat import HEADER
from tests.harness import wait_for
from tests.utils.helpers import run


def test_stat_rows_match_stats(broker):
    broker.http("POST", "/mpub?topic=s", b"\n".join(b"%d" % i for i in range(12)))
    with Connection.connect(broker.tcp_address) as c:
        c.identify()
        c.sub("s", "ch", rdy=3)
        held = [c.read_message() for _ in range(3)]
        c.fin(held[0].id)

        def channel() -> dict:
            return broker.stats()["topics"][0]["channels"][0]

        wait_for(lambda: channel()["in_flight_count"] == 3 and channel()["depth"] == 8, what="3 in flight, 8 queued")
        expect = channel()
        r = run("stat", "--topic", "s", "--channel", "ch", "--nsqd-http-address", broker.http_address,
                "--interval", "0.2s", "--count", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines(keepends=True)
    assert "".join(lines[:2]) == HEADER  # nsq_stat's header, byte for byte
    assert len(lines) == 4
    for row in lines[2:]:
        ingress, egress, total, mem, disk, inflt, deferred, req, timeouts, msgs, clients = \
            map(int, row.replace("|", " ").split())
        assert (ingress, egress) == (0, 0)  # nothing published or consumed between the polls
        assert (total, mem + disk, inflt, deferred, req, timeouts, msgs, clients) == (
            expect["depth"], expect["depth"], expect["in_flight_count"], expect["deferred_count"],
            expect["requeue_count"], expect["timeout_count"], expect["message_count"], 1)


def test_stat_needs_the_channel():
    r = run("stat", "--topic", "s", "--nsqd-http-address", "127.0.0.1:1")
    assert r.returncode == 1 and "--topic and --channel are required" in r.stderr.decode()
