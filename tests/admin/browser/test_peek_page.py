"""The channel page's Peek section (nsqmp, issue 23) in a real browser: the rows are the
brokers' own /channel/peek, bodies are shown as text, and nothing is consumed."""
from __future__ import annotations

import base64

import orjson
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from nsqmp.client import Connection
from tests.admin.browser.cluster import XSS_AGENT
from tests.admin.browser.driving import channel_stats, number, open_page, table
from tests.harness import wait_for


def test_peek_section_lists_the_next_messages_as_text(cluster, browser):
    b0, b1 = cluster.brokers
    if b0.__class__.__name__ != "Broker":  # NSQ's nsqd has no peek: the section stays hidden
        open_page(browser, cluster.admin, "/topics/orders/audit")
        wait_for(lambda: not browser.find_element(By.ID, "peek").is_displayed(), what="the hidden Peek section")
        return
    with Connection.connect(b1.tcp_address) as pub:
        pub.identify()
        pub.mpub("events", [XSS_AGENT.encode(), b"\x00\x01\xffbinary"])
    before = channel_stats(cluster.brokers, "orders", "audit")
    open_page(browser, cluster.admin, "/topics/orders/audit")
    Select(browser.find_element(By.ID, "peek-n")).select_by_value("100")
    status, body, _ = b0.http("GET", "/channel/peek?topic=orders&channel=audit&n=100")
    assert status == 200, body
    want = orjson.loads(body)["messages"]
    wait_for(lambda: len(table(browser, "channel-peek")) == len(want), what="every peeked row")
    rows = table(browser, "channel-peek")
    assert [r["ID"] for r in rows] == [m["id"] for m in want]
    assert [number(r["Attempts"]) for r in rows] == [m["attempts"] for m in want]
    assert [r["Body"] for r in rows] == [base64.b64decode(m["body"]).decode() for m in want]
    assert [r["State"] for r in rows] == [
        "queued" if m["state"] == "queued" else f"in flight {m['client']['client_id']}" for m in want]
    assert want[0]["state"] == "queued" and want[-1]["state"] == "in_flight"  # the audit-0 consumer's
    assert rows[-1]["When"].startswith("times out in ")
    assert _counts(channel_stats(cluster.brokers, "orders", "audit")) == _counts(before)  # nothing consumed

    open_page(browser, cluster.admin, "/topics/events/archive")
    wait_for(lambda: any(r["Body"] == XSS_AGENT for r in table(browser, "channel-peek")), what="the XSS body")
    rows = table(browser, "channel-peek")
    assert rows[-1]["Body"] == "\ufffd\ufffd\ufffdbinary"  # control bytes and bad UTF-8 shown as U+FFFD
    assert browser.find_elements(By.CSS_SELECTOR, "#channel-peek img") == []


def _counts(stats: list[dict]) -> list[tuple]:
    return [(c["depth"], c["in_flight_count"], c["message_count"], c["requeue_count"], c["timeout_count"])
            for c in stats]
