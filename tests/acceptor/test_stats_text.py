"""/stats text format: nsqd's printStats and ClientV2Stats.String(), line by line."""
from __future__ import annotations

from nsqmp.version import version_line
from nsqmp.acceptor.http_stats import go_duration, render_text
from nsqmp.memstats import FIELDS


def _client(**extra) -> dict:
    base = {"client_id": "c", "hostname": "host", "version": "V2", "remote_address": "127.0.0.1:5123",
            "state": 3, "ready_count": 10, "in_flight_count": 2, "message_count": 7, "finish_count": 5,
            "requeue_count": 1, "connect_ts": 1_000, "user_agent": "go-nsq/1.1.0"}  # 22 wide: %-21s pads nothing
    return {**base, **extra}


def _channel(name: str, paused: bool = False, clients: list | None = None) -> dict:
    return {"channel_name": name, "depth": 3, "backend_depth": 0, "in_flight_count": 2, "deferred_count": 1,
            "requeue_count": 4, "timeout_count": 0, "message_count": 12, "paused": paused,
            "clients": clients, "e2e_processing_latency": {"count": 0, "percentiles": None}}


def test_the_whole_page_as_nsqd_prints_it():
    stats = {
        "start_time": 0, "health": "OK",
        "memory": {name: i for i, name in enumerate(FIELDS)},
        "topics": [
            {"topic_name": "orders", "depth": 0, "backend_depth": 0, "message_count": 12, "paused": False,
             "e2e_processing_latency": {"count": 4, "percentiles": [{"quantile": 0.99, "value": 2_500_000_000},
                                                                   {"quantile": 0.5, "value": 1_500_000}]},
             "channels": [_channel("billing", clients=[_client()]), _channel("audit", paused=True, clients=None)]},
            {"topic_name": "stopped", "depth": 5, "backend_depth": 0, "message_count": 5, "paused": True,
             "e2e_processing_latency": {"count": 1, "percentiles": [{"quantile": 0.99, "value": 1_500},
                                                                   {"quantile": 0.5, "value": 999}]},
             "channels": []},
        ],
        "producers": [_client(state=0, pub_counts=[{"topic": "orders", "count": 12},
                                                   {"topic": "stopped", "count": 5}])],
    }
    text = render_text(stats, now=3_725.5)
    memory = "".join(f"   {name:<25}\t{i}\n" for i, name in enumerate(FIELDS))
    assert text == (
        f"{version_line('nsqd')}\n"
        "start_time 1970-01-01T00:00:00Z\n"
        "uptime 1h2m5.5s\n"
        "\nHealth: OK\n"
        "\nMemory:\n" + memory +
        "\nTopics:"
        "\n   [orders         ] depth: 0     be-depth: 0     msgs: 12       e2e%: 2.5s, 1.5ms\n"
        "      [billing                  ] depth: 3     be-depth: 0     inflt: 2    def: 1    "
        "re-q: 4     timeout: 0     msgs: 12       e2e%: \n"
        "        [V2 host:5123 go-nsq/1.1.0] state: 3 inflt: 2    rdy: 10   fin: 5        "
        "re-q: 1        msgs: 7        connected: 45m25s\n"
        "   *P [audit                    ] depth: 3     be-depth: 0     inflt: 2    def: 1    "
        "re-q: 4     timeout: 0     msgs: 12       e2e%: \n"
        "\n*P [stopped        ] depth: 5     be-depth: 0     msgs: 5        e2e%: 1.5us, 999.0ns\n"
        "\nProducers:\n"
        "   [V2 host:5123 go-nsq/1.1.0] msgs: 17       topics: orders=12,stopped=5 connected: 45m25s\n"
    )


def test_nothing_to_show():
    text = render_text({"start_time": 0, "health": "NOK - failed to write to disk: No space left on device",
                        "topics": None, "producers": None}, now=0.25)
    assert text == (f"{version_line('nsqd')}\n"
                    "start_time 1970-01-01T00:00:00Z\nuptime 250ms\n"
                    "\nHealth: NOK - failed to write to disk: No space left on device\n"
                    "\nTopics: None\n\nProducers: None\n")


def test_go_duration():
    cases = {0: "0s", 0.000_000_5: "500ns", 0.000_001_5: "1.5µs", 0.25: "250ms", 1: "1s", 61.5: "1m1.5s",
             3600: "1h0m0s", 90061: "25h1m1s"}
    assert {k: go_duration(k) for k in cases} == cases
