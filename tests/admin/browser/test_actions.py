"""Every action of the admin run through its pages in a real browser, each destructive
one through its confirmation dialog, and its effect checked on the brokers and the
lookupd themselves (their /stats, /lookup, /topics)."""
from __future__ import annotations

from selenium.webdriver.common.by import By

from nsqmp.client import Connection
from tests.admin.browser.driving import answer_confirm, click_action, open_page, topic_stats
from tests.harness import wait_for


def paused_on(brokers, topic: str, channel: str | None = None) -> list[bool]:
    """The paused flag of the topic (or its channel) on each broker that has it."""
    out = []
    for t in topic_stats(brokers, topic):
        if channel is None:
            out.append(t["paused"])
        else:
            out += [c["paused"] for c in t["channels"] if c["channel_name"] == channel]
    return out


def test_cancel_in_the_dialog_does_nothing(cluster, browser):
    open_page(browser, cluster.admin, "/topics/orders")
    click_action(browser, "delete")
    assert "orders" in answer_confirm(browser, ok=False)
    open_page(browser, cluster.admin, "/topics/orders")
    assert len(topic_stats(cluster.brokers, "orders")) == 2


def test_pause_and_unpause_a_topic(cluster, browser):
    open_page(browser, cluster.admin, "/topics/orders")
    click_action(browser, "pause")
    answer_confirm(browser)
    wait_for(lambda: paused_on(cluster.brokers, "orders") == [True, True], what="orders paused on both brokers")
    click_action(browser, "unpause")  # the page now offers unpause (no confirmation: it is not destructive)
    wait_for(lambda: paused_on(cluster.brokers, "orders") == [False, False], what="orders unpaused")


def test_pause_and_unpause_a_channel(cluster, browser):
    open_page(browser, cluster.admin, "/topics/orders/billing")
    click_action(browser, "pause")
    answer_confirm(browser)
    wait_for(lambda: paused_on(cluster.brokers, "orders", "billing") == [True, True], what="billing paused")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, ".page-header .badge-paused"), what="the paused badge")
    click_action(browser, "unpause")
    wait_for(lambda: paused_on(cluster.brokers, "orders", "billing") == [False, False], what="billing unpaused")


def test_empty_a_channel(cluster, browser):
    assert sum(c["depth"] for t in topic_stats(cluster.brokers, "orders") for c in t["channels"]
               if c["channel_name"] == "billing") > 0
    open_page(browser, cluster.admin, "/topics/orders/billing")
    click_action(browser, "empty")
    assert "billing" in answer_confirm(browser)
    wait_for(lambda: all(c["depth"] == 0 for t in topic_stats(cluster.brokers, "orders") for c in t["channels"]
                         if c["channel_name"] == "billing"), what="billing emptied on both brokers")


def test_empty_a_topic(cluster, browser):
    b = cluster.brokers[0]
    with Connection.connect(b.tcp_address) as pub:
        pub.mpub("backlog", [b"x"] * 5)  # a topic without channels keeps its messages
    assert topic_stats([b], "backlog")[0]["depth"] == 5
    open_page(browser, cluster.admin, "/topics/backlog")
    click_action(browser, "empty")
    answer_confirm(browser)
    wait_for(lambda: topic_stats([b], "backlog")[0]["depth"] == 0, what="backlog emptied")


def test_delete_a_channel(cluster, browser):
    open_page(browser, cluster.admin, "/topics/orders/audit")
    click_action(browser, "delete")
    answer_confirm(browser)
    wait_for(lambda: all(c["channel_name"] != "audit" for t in topic_stats(cluster.brokers, "orders")
                         for c in t["channels"]), what="audit deleted")
    wait_for(lambda: browser.current_url == cluster.admin.url + "/topics/orders", what="the topic page")


def test_delete_a_topic(cluster, browser):
    open_page(browser, cluster.admin, "/topics/events")
    click_action(browser, "delete")
    assert "events" in answer_confirm(browser)
    wait_for(lambda: topic_stats(cluster.brokers, "events") == [], what="events deleted on the brokers")
    wait_for(lambda: "events" not in cluster.lookupd.get("/topics")["topics"], what="events gone from the lookupd")
    wait_for(lambda: browser.current_url.rstrip("/") == cluster.admin.url, what="the topic list")


def test_create_a_topic_and_channel_then_delete_them_as_inactive(cluster, browser):
    open_page(browser, cluster.admin, "/lookup")
    browser.find_element(By.ID, "create-topic").send_keys("planned")
    browser.find_element(By.ID, "create-channel").send_keys("workers")
    browser.find_element(By.ID, "create-submit").click()
    wait_for(lambda: "planned" in cluster.lookupd.get("/topics")["topics"], what="planned on the lookupd")
    wait_for(lambda: cluster.lookupd.get("/channels?topic=planned")["channels"] == ["workers"],
             what="workers on the lookupd (created after its topic)")
    # no broker produces it: the lookup page lists it as inactive, with delete buttons
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#inactive-topics li[data-topic='planned']"),
             what="planned among the inactive topics")
    item = browser.find_element(By.CSS_SELECTOR, "#inactive-topics li[data-channel='workers'] button")
    item.click()
    answer_confirm(browser)
    wait_for(lambda: cluster.lookupd.get("/channels?topic=planned")["channels"] == [], what="workers deleted")
    wait_for(lambda: not browser.find_elements(By.CSS_SELECTOR, "#inactive-topics li[data-channel='workers']"),
             what="the lookup page to drop workers")
    browser.find_element(By.CSS_SELECTOR, "#inactive-topics li[data-topic='planned'] > button").click()
    answer_confirm(browser)
    wait_for(lambda: "planned" not in cluster.lookupd.get("/topics")["topics"], what="planned deleted")


def test_tombstone_a_topic_producer(cluster, browser):
    victim = cluster.brokers[1]
    open_page(browser, cluster.admin, "/topics/orders")
    browser.find_element(By.CSS_SELECTOR, f"button.tombstone[data-node='{victim.http_address}']").click()
    assert victim.http_address in answer_confirm(browser)
    def lookup() -> list[int]:
        return sorted(p["http_port"] for p in cluster.lookupd.get("/lookup?topic=orders")["producers"])

    wait_for(lambda: lookup() == [cluster.brokers[0].http_port], what="the lookupd to hide the tombstoned broker")
    wait_for(lambda: topic_stats([victim], "orders") == [], what="orders deleted on the tombstoned broker")
