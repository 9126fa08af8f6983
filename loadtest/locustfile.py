"""Load test of an NSQ broker (nsqmp or nsqd) over the TCP protocol, with locust.

    loadtest/run.sh                                     # mixed scenario, headless, reports in loadtest/reports/
    locust -f loadtest/locustfile.py --headless -u 20 -r 10 --run-time 1m \\
        --host tcp://127.0.0.1:4150 --scenario mixed --msg-size 512 --batch-size 50

The broker is locust's own --host as tcp://HOST:PORT (or the web UI's Host field), or
--nsqd-tcp-address HOST:PORT, which wins when both are given; 127.0.0.1:4150 without either.

Scenarios (--scenario): mixed (publishers and consumers by --publisher-weight and
--consumer-weight), publish (publishers only), consume (consumers only). The users are in
nsq_user.py; loadtest/README.md lists what each one reports.
"""
from __future__ import annotations

import logging
import os
import sys

from locust import events

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nsq_user

log = logging.getLogger("loadtest")

SCENARIOS = {
    "mixed": ("Publisher", "Consumer"),
    "publish": ("Publisher",),
    "consume": ("Consumer",),
}


class Publisher(nsq_user.Publisher):
    weight = 1


class Consumer(nsq_user.Consumer):
    weight = 1


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    d = nsq_user.Settings()
    g = parser.add_argument_group("nsqmp load test")
    g.add_argument("--nsqd-tcp-address", default=None,
                   help=f"<host>:<port> of the broker's TCP port; wins over --host tcp://HOST:PORT "
                        f"(without either: {d.address})")
    g.add_argument("--scenario", choices=sorted(SCENARIOS), default="mixed",
                   help="which users run: mixed, publish (publishers only) or consume (consumers only)")
    g.add_argument("--publisher-weight", type=int, default=1, help="weight of Publisher users in mixed")
    g.add_argument("--consumer-weight", type=int, default=1, help="weight of Consumer users in mixed")
    g.add_argument("--topic", default=d.topic, help="topic to publish to and subscribe to")
    g.add_argument("--channel", default=d.channel, help="channel the consumers subscribe to")
    g.add_argument("--msg-size", type=int, default=d.msg_size, help="bytes per message body")
    g.add_argument("--batch-size", type=int, default=d.batch_size, help="messages per MPUB")
    g.add_argument("--mpub-ratio", type=float, default=d.mpub_ratio,
                   help="share of publishes sent as MPUB of --batch-size (0: PUB only, 1: MPUB only)")
    g.add_argument("--pub-rate", type=float, default=d.pub_rate,
                   help="PUB/MPUB commands per second per publisher; 0: as fast as the broker answers")
    g.add_argument("--rdy", type=int, default=d.rdy, help="RDY count of each consumer")
    g.add_argument("--process-ms", type=float, default=d.process_ms, help="time each message is 'processed'")
    g.add_argument("--req-ratio", type=float, default=d.req_ratio, help="share of messages answered with REQ")
    g.add_argument("--req-delay-ms", type=int, default=d.req_delay_ms, help="delay of each REQ")
    g.add_argument("--timeout-ratio", type=float, default=d.timeout_ratio,
                   help="share of messages neither FIN'd nor REQ'd: left to time out")
    g.add_argument("--msg-timeout-ms", type=int, default=d.msg_timeout_ms,
                   help="msg_timeout the consumers ask for in IDENTIFY (>= 1000)")
    g.add_argument("--heartbeat-ms", type=int, default=d.heartbeat_ms,
                   help="heartbeat_interval every connection asks for in IDENTIFY (>= 1000)")


@events.init.add_listener
def _setup(environment, **_kw) -> None:
    opts = environment.parsed_options
    if opts is None:  # used as a library, without the command line
        return
    try:
        address = nsq_user.Settings.from_options(opts, environment.host).address
    except ValueError as exc:
        log.error("%s", exc)
        sys.exit(2)
    Publisher.weight = opts.publisher_weight
    Consumer.weight = opts.consumer_weight
    wanted = SCENARIOS[opts.scenario]
    if opts.scenario == "mixed" and min(opts.publisher_weight, opts.consumer_weight) < 1:
        log.error("--publisher-weight and --consumer-weight must be at least 1 in the mixed scenario")
        sys.exit(2)
    # the users named on the command line (if any) were already picked; the scenario narrows further
    environment.user_classes[:] = [u for u in environment.user_classes if u.__name__ in wanted]
    if not environment.user_classes:
        log.error("no user class left for scenario %s", opts.scenario)
        sys.exit(2)
    log.info("scenario %s: %s against %s", opts.scenario,
             ", ".join(f"{u.__name__} (weight {u.weight})" for u in environment.user_classes),
             address)
