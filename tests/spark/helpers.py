"""Helpers of the Spark tests: publishing and broker statistics."""
from __future__ import annotations

from nsqmp.client.sync import Connection


def make_channel(address: str, topic: str, channel: str) -> None:
    """Create topic and channel before publishing, so the channel gets every message."""
    with Connection.connect(address) as c:
        c.identify()
        c.sub(topic, channel)


def publish(address: str, topic: str, bodies: list[bytes], batch: int = 500) -> None:
    with Connection.connect(address) as c:
        for i in range(0, len(bodies), batch):
            c.mpub(topic, bodies[i:i + batch])


def channel_stats(broker, topic: str, channel: str) -> dict | None:
    for t in broker.stats(topic=topic).get("topics", []):
        if t["topic_name"] == topic:
            for ch in t["channels"]:
                if ch["channel_name"] == channel:
                    return ch
    return None
