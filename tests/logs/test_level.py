"""`PUT /config/log_level` changes the level of every acceptor and router of the broker:
their debug lines appear after it, and not before (issue 21)."""
from __future__ import annotations

import re
import zlib

from nsqmp.client import Connection
from tests.harness import wait_for

ROUTERS = 2


def _topic_of(router: int, tag: str) -> str:
    """A topic name the broker places on this router (crc32(name) % routers)."""
    return next(name for i in range(1000) if zlib.crc32((name := f"{tag}{i}").encode()) % ROUTERS == router)


def _pids(text: str, level: str, role: str) -> set[int]:
    return {int(pid) for pid in re.findall(rf" {level} nsqmp\.{role}\[(\d+)\]: ", text)}


def _identified(text: str, tag: str) -> set[int]:
    """The acceptors that logged the IDENTIFY of a client of this visit (tag)."""
    return {int(pid) for pid in re.findall(rf" INFO nsqmp\.acceptor\[(\d+)\]: .* IDENTIFY: {{ClientID:{tag}-", text)}


def _visit_every_process(broker, tag: str) -> None:
    """Connections until every acceptor has taken one (each IDENTIFYs and SUBs to a topic
    of each router): every acceptor and router has then done what it logs at debug."""
    acceptors = {pid for title, pid in broker.children().items() if title.startswith("nsqmp acceptor")}
    for n in range(60):
        with Connection.connect(broker.tcp_address) as c:
            c.identify(client_id=f"{tag}-{n}")
            c.sub(_topic_of(n % ROUTERS, tag), "c")
        if n >= ROUTERS and acceptors <= _identified(broker.log_text(), tag):
            return
    raise AssertionError(f"some acceptor never took a connection:\n{broker.log_text()[-3000:]}")


def test_put_log_level_reaches_every_acceptor_and_router(make_broker):
    # spread: the connections reach every acceptor (the default steering packs them on one)
    b = make_broker("--acceptors", "2", "--routers", str(ROUTERS), "--acceptor-steering", "spread")
    children = b.children()
    acceptors = {pid for title, pid in children.items() if title.startswith("nsqmp acceptor")}
    routers = {pid for title, pid in children.items() if title.startswith("nsqmp router")}
    assert len(acceptors) == 2 and len(routers) == ROUTERS

    _visit_every_process(b, "before")
    wait_for(lambda: routers <= _pids(b.log_text(), "INFO", "router"), what="a topic created on each router")
    assert " DEBUG " not in b.log_text()

    status, body, _ = b.http("PUT", "/config/log_level", b"debug")
    assert (status, body) == (200, b'"debug"')
    _visit_every_process(b, "after")

    def debug_everywhere() -> bool:
        text = b.log_text()
        return acceptors <= _pids(text, "DEBUG", "acceptor") and routers <= _pids(text, "DEBUG", "router")

    wait_for(debug_everywhere, what=lambda: f"debug lines of every acceptor and router:\n{b.log_text()[-3000:]}")
    text = b.log_text()
    assert re.search(r" DEBUG nsqmp\.acceptor\[\d+\]: PROTOCOL\(V2\): \[127\.0\.0\.1:\d+\] \{ClientID:after-0 ", text)
    assert re.search(r" DEBUG nsqmp\.router\[\d+\]: CHANNEL\(c\): new client\(127\.0\.0\.1:\d+\) of topic after",
                     text)
    assert "ClientID:before-" not in "\n".join(ln for ln in text.splitlines() if " DEBUG " in ln)
