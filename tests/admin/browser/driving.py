"""Reading the admin's pages in the browser: open a page and wait for its data, read a
table as rows of {column: text}, sum broker /stats the way the pages show them."""
from __future__ import annotations

import socket
import struct
import time

import orjson
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By

from tests.harness import wait_for


def open_page(browser, admin, path: str, timeout: float = 15.0) -> None:
    """Load admin page `path` (below the base path) and wait until it has shown its data."""
    browser.get(admin.url + path)
    wait_for(lambda: int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") or 0) >= 1,
             timeout, what=f"{path} to load its data")


def loads(browser) -> int:
    """How many polls the current page has finished (body[data-loaded])."""
    return int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") or 0)


def table(browser, table_id: str) -> list[dict[str, str]]:
    """The body rows of table #table_id as {header text: cell text (without its buttons)};
    a footer row too, keyed the same way, with "_foot": "1"."""
    for _ in range(5):
        try:
            return _read_table(browser, table_id)
        except StaleElementReferenceException:  # a poll replaced a cell while we read
            time.sleep(0.1)
    return _read_table(browser, table_id)


def _read_table(browser, table_id: str) -> list[dict[str, str]]:
    data = browser.execute_script("""
        const t = document.getElementById(arguments[0]);
        if (!t) return null;
        const heads = [...t.tHead.rows[t.tHead.rows.length - 1].cells].map((c) => c.textContent.trim());
        const text = (cell) => {  // what the cell says, without its buttons' glyphs
            const copy = cell.cloneNode(true);
            copy.querySelectorAll('button').forEach((b) => b.remove());
            return copy.textContent.trim();
        };
        const read = (tr, foot) => Object.assign(Object.fromEntries(
            [...tr.cells].map((c, i) => [heads[i], text(c)])), foot ? {_foot: '1'} : {});
        return [...[...t.tBodies[0].rows].map((r) => read(r, false)),
                ...[...t.tFoot.rows].map((r) => read(r, true))];
    """, table_id)
    assert data is not None, f"no table #{table_id} on {browser.current_url}"
    return data


def number(text: str) -> int:
    """A cell's number ("1,234" -> 1234)."""
    return int(text.replace(",", ""))


def topic_stats(brokers, topic: str) -> list[dict]:
    """The topic as each broker's /stats reports it (brokers without it left out)."""
    out = []
    for b in brokers:
        for t in b.stats(topic=topic)["topics"]:
            if t["topic_name"] == topic:
                out.append({**t, "node": b.http_address})
    return out


def channel_stats(brokers, topic: str, channel: str) -> list[dict]:
    """The channel as each broker's /stats reports it, with "node" added."""
    out = []
    for t in topic_stats(brokers, topic):
        for c in t["channels"]:
            if c["channel_name"] == channel:
                out.append({**c, "node": t["node"]})
    return out


class GhostProducer:
    """A broker that registers with the lookupd (its TCP protocol) and whose HTTP port
    accepts connections but never answers: the slow broker the pages must survive."""

    def __init__(self, lookupd, topic: str) -> None:
        self.http = socket.socket()
        self.http.bind(("127.0.0.1", 0))
        self.http.listen(16)  # never accept(): requests wait until the admin gives up
        port = self.http.getsockname()[1]
        self.node = f"127.0.0.1:{port}"
        self.conn = socket.create_connection(("127.0.0.1", lookupd.tcp_port), timeout=10)
        self.conn.sendall(b"  V1")
        body = orjson.dumps({"broadcast_address": "127.0.0.1", "hostname": "ghost", "tcp_port": port,
                             "http_port": port, "version": "1.3.0"})
        self.conn.sendall(b"IDENTIFY\n" + struct.pack(">I", len(body)) + body)
        self._response()
        self.conn.sendall(f"REGISTER {topic}\n".encode())
        assert self._response() == b"OK"

    def _response(self) -> bytes:
        size = struct.unpack(">I", self._read(4))[0]
        return self._read(size)

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.conn.recv(n - len(data))
            if not chunk:
                raise EOFError("lookupd closed the connection")
            data += chunk
        return data

    def close(self) -> None:
        self.conn.close()
        self.http.close()


def click_action(browser, action: str) -> None:
    """Click the page's action button data-action=`action` (empty, delete, pause, unpause)."""
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, f".actions button[data-action='{action}']"),
             what=f"the {action} button")
    browser.find_element(By.CSS_SELECTOR, f".actions button[data-action='{action}']").click()


def answer_confirm(browser, ok: bool = True) -> str:
    """Wait for the confirmation dialog, click Confirm (or Cancel); returns its text."""
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#confirm-dialog[open]"), what="the confirm dialog")
    text = browser.find_element(By.CSS_SELECTOR, "#confirm-dialog .confirm-text").text
    browser.find_element(By.ID, "confirm-ok" if ok else "confirm-cancel").click()
    wait_for(lambda: not browser.find_elements(By.CSS_SELECTOR, "#confirm-dialog[open]"), what="the dialog to close")
    return text
