"""Every page of the admin in a real browser (Debian's Chromium) against a real cluster:
the numbers the pages show are the brokers' /stats, names from clients are shown as text,
numbers refresh in place, and a broker that does not answer shows on its own row."""
from __future__ import annotations

import http.server
import re
import threading
from urllib.parse import parse_qs, urlsplit

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By

from nsqmp.client import Connection
from tests.admin.browser.cluster import BASE_PATH, XSS_AGENT, Admin
from tests.admin.browser.driving import (
    GhostProducer, channel_stats, loads, number, open_page, table, topic_stats,
)
from tests.harness import wait_for


def by_first(rows: list[dict], column: str) -> dict[str, dict]:
    return {r[column]: r for r in rows if not r.get("_foot")}


def test_topics_page_shows_every_topic_with_the_brokers_numbers(cluster, browser):
    open_page(browser, cluster.admin, "/")
    rows = by_first(table(browser, "topics-table"), "Topic")
    assert sorted(rows) == ["events", "flagged", "orders"]
    for name, row in rows.items():
        stats = topic_stats(cluster.brokers, name)
        assert number(row["Messages"]) == sum(t["message_count"] for t in stats)
        assert number(row["Depth"]) == sum(t["depth"] for t in stats)
        assert number(row["Brokers"]) == len(stats)
        assert number(row["Channels"]) == len({c["channel_name"] for t in stats for c in t["channels"]})
    # the base path is in every link: the page works behind --base-path
    href = browser.find_element(By.LINK_TEXT, "orders").get_attribute("href")
    assert href == cluster.admin.url + "/topics/orders"


def test_topic_page_has_a_row_per_broker_and_per_channel(cluster, browser):
    open_page(browser, cluster.admin, "/topics/orders")
    stats = topic_stats(cluster.brokers, "orders")
    rows = table(browser, "topic-nodes")
    per_node = [r for r in rows if not r.get("_foot")]
    assert len(per_node) == 2
    for t in stats:
        row = next(r for r in per_node if t["node"] in r["Broker"])
        assert number(row["Messages"]) == t["message_count"]
        assert number(row["Channels"]) == len(t["channels"])
    total = next(r for r in rows if r.get("_foot"))
    assert number(total["Messages"]) == sum(t["message_count"] for t in stats) == 50

    channels = by_first(table(browser, "topic-channels"), "Channel")
    assert sorted(channels) == ["audit", "billing"]
    for name, row in channels.items():
        cs = channel_stats(cluster.brokers, "orders", name)
        for column, field in [("Depth", "depth"), ("In-Flight", "in_flight_count"), ("Messages", "message_count"),
                              ("Requeued", "requeue_count"), ("Timed Out", "timeout_count"),
                              ("Deferred", "deferred_count")]:
            assert number(row[column]) == sum(c[field] for c in cs), (name, column)
        assert number(row["Connections"]) == sum(len(c["clients"]) for c in cs)


def test_e2e_latency_percentiles_when_the_brokers_report_them(cluster, browser):
    open_page(browser, cluster.admin, "/topics/orders")
    stats = channel_stats(cluster.brokers, "orders", "billing")
    quantiles = sorted({p["quantile"] for c in stats for p in c["e2e_processing_latency"]["percentiles"] or []})
    assert quantiles == [0.5, 0.99]
    billing = by_first(table(browser, "topic-channels"), "Channel")["billing"]
    for label in ("p99", "p50"):
        assert re.fullmatch(r"[\d.]+(ns|us|ms|s)|\d+m \d+s", billing[label]), billing
    groups = browser.find_element(By.CSS_SELECTOR, "#topic-channels thead tr.groups").text
    assert "E2E processing latency" in groups


def test_channel_page_lists_every_client_with_its_fields(cluster, browser):
    open_page(browser, cluster.admin, "/topics/orders/billing")
    cs = channel_stats(cluster.brokers, "orders", "billing")
    nodes = table(browser, "channel-nodes")
    total = next(r for r in nodes if r.get("_foot"))
    assert number(total["In-Flight"]) == sum(c["in_flight_count"] for c in cs)
    assert number(total["Depth"]) == sum(c["depth"] for c in cs)
    clients = by_first(table(browser, "channel-clients"), "Client ID")
    want = {cl["client_id"]: cl for c in cs for cl in c["clients"]}
    assert sorted(clients) == sorted(want) == ["billing-0", "billing-1"]
    for cid, row in clients.items():
        cl = want[cid]
        assert row["Hostname"] == cl["hostname"] == f"{cid}.example"
        assert row["User-Agent"] == "nsqmp-test/1.0"
        assert row["Address"] == cl["remote_address"]
        assert row["Version"] == "V2"
        for column, field in [("RDY", "ready_count"), ("In-Flight", "in_flight_count"),
                              ("Finished", "finish_count"), ("Requeued", "requeue_count"),
                              ("Messages", "message_count")]:
            assert number(row[column]) == cl[field], (cid, column)
        assert row["Connected"].endswith("s")


def test_client_attributes_snappy_deflate_sampled(cluster, browser):
    open_page(browser, cluster.admin, "/topics/flagged/flags")
    wait_for(lambda: len(table(browser, "channel-clients")) == 3, what="the three pynsq readers")
    attributes = {r["User-Agent"]: r["Attributes"] for r in table(browser, "channel-clients")}
    assert attributes == {"pynsq-snappy": "Snappy", "pynsq-deflate": "Deflate", "pynsq-sampled": "Sampled 50%"}


def test_a_hostile_user_agent_is_shown_as_text(cluster, browser):
    for path, table_id in [("/topics/orders/audit", "channel-clients"),
                           (f"/nodes/{cluster.brokers[0].http_address}", "node-clients")]:
        open_page(browser, cluster.admin, path)
        agents = [r["User-Agent"] for r in table(browser, table_id)]
        assert XSS_AGENT in agents, agents
        assert browser.find_elements(By.CSS_SELECTOR, f"#{table_id} img") == []
        assert browser.find_element(By.XPATH, f"//span[@class='user-agent' and text()='{XSS_AGENT}']").is_displayed()
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text


def test_nodes_and_node_pages(cluster, browser):
    open_page(browser, cluster.admin, "/nodes")
    rows = table(browser, "nodes-table")
    assert sorted(number(r["HTTP Port"]) for r in rows) == sorted(b.http_port for b in cluster.brokers)
    assert sorted(number(r["TCP Port"]) for r in rows) == sorted(b.tcp_port for b in cluster.brokers)
    assert all(r["Lookupd Conns."] == "1" for r in rows)
    b1 = next(r for r in rows if number(r["HTTP Port"]) == cluster.brokers[1].http_port)
    assert "events" in b1["Topics"] and "orders" in b1["Topics"]

    broker = cluster.brokers[0]
    browser.find_element(By.CSS_SELECTOR, f"a[href$='/nodes/{broker.http_address}']").click()
    wait_for(lambda: browser.find_elements(By.ID, "node-total-messages"), what="the node page")
    stats = broker.stats()
    topics = by_first(table(browser, "node-topics"), "Topic")
    assert sorted(topics) == sorted(t["topic_name"] for t in stats["topics"])
    assert number(browser.find_element(By.ID, "node-total-messages").text) == \
        sum(t["message_count"] for t in stats["topics"])
    assert number(browser.find_element(By.ID, "node-total-clients").text) == \
        sum(len(c["clients"]) for t in stats["topics"] for c in t["channels"])
    channels = table(browser, "node-channels")
    assert sorted((r["Topic"], r["Channel"]) for r in channels) == \
        sorted((t["topic_name"], c["channel_name"]) for t in stats["topics"] for c in t["channels"])
    assert f"TCP {broker.tcp_port}" in browser.find_element(By.ID, "node-info").text


def test_lookup_page_shows_what_the_lookupd_knows(cluster, browser):
    open_page(browser, cluster.admin, "/lookup")
    hosts = table(browser, "lookup-hosts")
    assert [h["nsqlookupd"] for h in hosts] == [cluster.lookupd.http_address]
    assert hosts[0]["Status"] == "ok"
    known = by_first(table(browser, "lookup-topics"), "Topic")
    assert sorted(known) == ["events", "flagged", "orders"]
    assert sorted(known["orders"]["Producers"].split()) == sorted(b.http_address for b in cluster.brokers)


def test_counter_counts_the_messages_processed(cluster, browser):
    open_page(browser, cluster.admin, "/counter")
    total = sum(c["message_count"] for b in cluster.brokers for t in b.stats()["topics"] for c in t["channels"])
    wait_for(lambda: browser.find_element(By.ID, "counter-value").text.replace(",", "") == str(total),
             what=f"the counter to show {total}")


def test_numbers_and_charts_refresh_without_a_reload(cluster, browser):
    open_page(browser, cluster.admin, "/topics/orders")
    browser.execute_script("window.__same_page = true;")
    before = next(r for r in table(browser, "topic-nodes") if r.get("_foot"))
    with Connection.connect(cluster.brokers[1].tcp_address) as pub:
        pub.mpub("orders", [b"more"] * 7)
    wait_for(lambda: number(next(r for r in table(browser, "topic-nodes") if r.get("_foot"))["Messages"])
             == number(before["Messages"]) + 7, what="the total to count 7 more messages")
    assert browser.execute_script("return window.__same_page === true;"), "the page reloaded"
    # the admin's samples reach the charts: a line with points, the publish rate seen
    wait_for(lambda: browser.execute_script(
        "return document.querySelector('[data-chart=\"Publish rate\"] polyline') !== null"
        " && Number(document.querySelector('[data-chart=\"Depth\"]').dataset.points) >= 2"),
        what="the charts to draw the samples")
    # the publish rate chart saw the burst: some sample above 0 (summed over the brokers)
    history = cluster.admin.api("/api/history/topics/orders")
    assert any(r and r > 0 for r in history["publish_rate"]), history["publish_rate"]


def test_a_broker_that_does_not_answer_shows_on_its_row(cluster, browser):
    ghost = GhostProducer(cluster.lookupd, "orders")
    try:
        open_page(browser, cluster.admin, "/topics/orders")
        wait_for(lambda: any(cluster.admin.api("/api/topics/orders")["errors"]), timeout=15,
                 what="the admin to report the ghost broker")
        wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#topic-nodes tr.failed"), timeout=15,
                 what="a failed row on the topic page")
        failed = browser.find_element(By.CSS_SELECTOR, "#topic-nodes tr.failed")
        assert ghost.node in failed.text and "unreachable" in failed.text
        # the brokers that answer are still there, with their numbers
        good = [r for r in table(browser, "topic-nodes") if not r.get("_foot") and ghost.node not in r["Broker"]]
        assert len(good) == 2 and all(number(r["Messages"]) > 0 for r in good)
        assert loads(browser) >= 1
    finally:
        ghost.close()


def test_without_admin_rights_the_pages_offer_no_actions(cluster, browser, tmp_path):
    """--admin-user: a request without that user is no admin; the UI hides what it may not do."""
    admin = Admin(tmp_path / "acl-admin.log", "--base-path", BASE_PATH, "--admin-user", "alice",
                  "--lookupd-http-address", cluster.lookupd.http_address).start()
    try:
        assert admin.api("/api/config")["is_admin"] is False
        open_page(browser, admin, "/topics/orders")
        assert table(browser, "topic-nodes")  # the numbers are there
        assert browser.find_elements(By.CSS_SELECTOR, ".actions button") == []
        assert browser.find_elements(By.CSS_SELECTOR, "button.tombstone") == []
        open_page(browser, admin, "/lookup")
        assert browser.find_elements(By.ID, "create-form") == []
    finally:
        assert admin.stop() == 0


# A 1x1 transparent PNG: what the stand-in Graphite answers for /render.
PIXEL = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                      "1f15c4890000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082")


def test_with_graphite_the_pages_draw_nsqadmins_graphs(cluster, browser, tmp_path):
    """--graphite-url: the topic page asks that Graphite for nsqadmin's render URLs."""
    seen: list[str] = []

    class Render(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            self.wfile.write(PIXEL)

        def log_message(self, *args):
            pass

    graphite = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Render)
    threading.Thread(target=graphite.serve_forever, daemon=True).start()
    admin = Admin(tmp_path / "graphite-admin.log", "--base-path", BASE_PATH,
                  "--graphite-url", f"http://127.0.0.1:{graphite.server_port}",
                  "--lookupd-http-address", cluster.lookupd.http_address).start()
    try:
        open_page(browser, admin, "/topics/orders")
        wait_for(lambda: len(seen) >= 2, what="the topic page's Graphite images")
        targets = sorted(parse_qs(urlsplit(p).query)["target"][0] for p in seen)
        assert targets == [
            "summarize(scale(sumSeries(stats.counters.nsq.*.topic.orders.message_count.count),"
            '0.016666666666666666),"60sec","avg")',
            'summarize(sumSeries(stats.gauges.nsq.*.topic.orders.depth),"60sec","avg")',
        ]
        assert all(urlsplit(p).path == "/render" for p in seen)
    finally:
        assert admin.stop() == 0
        graphite.shutdown()
        graphite.server_close()
