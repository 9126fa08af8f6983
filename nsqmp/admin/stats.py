"""nsqadmin's aggregation of brokers' /stats (internal/clusterinfo/types.go), on plain dicts.

A broker's topic or channel becomes nsqadmin's TopicStats/ChannelStats dict (only the fields
nsqadmin keeps, plus "node" and "hostname"); `add_topic` and `add_channel` sum one node's into
the cluster-wide one ("node": "*") as TopicStats.Add/ChannelStats.Add do. One deliberate
difference: nsqadmin's topic aggregate adopts the first node's channel object (a shared Go
pointer), so its aggregated channel lists the other nodes only; ours starts each aggregated
channel empty and lists every node.
"""
from __future__ import annotations

import time
from typing import Any

_CLIENT_FIELDS = (
    ("remote_address", ""), ("version", ""), ("client_id", ""), ("hostname", ""), ("user_agent", ""),
    ("connect_ts", 0), ("in_flight_count", 0), ("ready_count", 0), ("finish_count", 0),
    ("requeue_count", 0), ("message_count", 0), ("sample_rate", 0), ("deflate", False),
    ("snappy", False), ("authed", False), ("auth_identity", ""), ("auth_identity_url", ""),
    ("tls", False), ("tls_cipher_suite", ""), ("tls_version", ""), ("tls_negotiated_protocol", ""),
    ("tls_negotiated_protocol_is_mutual", False),
)
_CHANNEL_SUMS = ("depth", "memory_depth", "backend_depth", "in_flight_count", "deferred_count",
                 "requeue_count", "timeout_count", "message_count", "client_count")
_TOPIC_SUMS = ("depth", "memory_depth", "backend_depth", "message_count")


def e2e_node(raw: dict | None) -> dict:
    """One broker's e2e_processing_latency as nsqadmin reads it: each percentile gains
    min/max/average (= its value) and count (= the sample count); topic, channel and host are
    what the broker said (nsqd says none: "")."""
    raw = raw or {}
    count = raw.get("count") or 0
    percentiles = raw.get("percentiles")
    if percentiles:
        percentiles = [dict(p, min=p.get("value", 0), max=p.get("value", 0),
                            average=p.get("value", 0), count=float(count)) for p in percentiles]
    return {"count": count, "percentiles": percentiles if percentiles is not None else None,
            "topic": raw.get("topic", ""), "channel": raw.get("channel", ""), "host": raw.get("host", "")}


def e2e_add(agg: dict, other: dict) -> None:
    """E2eProcessingLatencyAggregate.Add: merge `other` into `agg` per quantile (nsqadmin's
    arithmetic, its min quirk included: min ends as the last node's max)."""
    agg["host"] = "*"
    agg["count"] += other["count"]
    mine = agg["percentiles"] or []
    for value in other["percentiles"] or ():
        slot = next((p for p in mine if p.get("quantile") == value.get("quantile")), None)
        if slot is None:
            slot = {"quantile": value.get("quantile", 0)}
            mine.append(slot)
        slot["max"] = max(value.get("max", 0), slot.get("max", 0))
        slot["min"] = min(value.get("max", 0), slot["max"])
        slot["count"] = slot.get("count", 0) + value.get("count", 0)
        if slot["count"] == 0:
            slot["average"] = 0
            continue
        avg = slot.get("average", 0)
        slot["average"] = avg + (value.get("average", 0) - avg) * value.get("count", 0) / slot["count"]
    agg["percentiles"] = mine or None


def client_node(raw: dict, addr: str, now: int) -> dict:
    """A broker's client as nsqadmin's ClientStats: "connected" is ns since connect_ts."""
    out: dict[str, Any] = {"node": addr}
    for name, default in _CLIENT_FIELDS:
        out[name] = raw.get(name, default)
    out["connected"] = (now - int(out["connect_ts"])) * 1_000_000_000
    return out


def channel_node(raw: dict, topic: str, addr: str, hostname: str, now: int) -> dict:
    """A broker's channel as nsqadmin's ChannelStats for that node."""
    depth, backend = raw.get("depth", 0), raw.get("backend_depth", 0)
    clients = raw.get("clients")
    return {
        "node": addr, "hostname": hostname, "topic_name": topic, "channel_name": raw.get("channel_name", ""),
        "depth": depth, "memory_depth": depth - backend, "backend_depth": backend,
        "in_flight_count": raw.get("in_flight_count", 0), "deferred_count": raw.get("deferred_count", 0),
        "requeue_count": raw.get("requeue_count", 0), "timeout_count": raw.get("timeout_count", 0),
        "message_count": raw.get("message_count", 0), "client_count": raw.get("client_count", 0),
        "nodes": None,
        "clients": [client_node(c, addr, now) for c in clients] if clients is not None else None,
        "paused": bool(raw.get("paused", False)),
        "e2e_processing_latency": e2e_node(raw.get("e2e_processing_latency")),
    }


def topic_node(raw: dict, addr: str, hostname: str, now: int) -> dict:
    """A broker's topic as nsqadmin's TopicStats for that node (channels included)."""
    name = raw.get("topic_name", "")
    depth, backend = raw.get("depth", 0), raw.get("backend_depth", 0)
    channels = raw.get("channels") or ()
    return {
        "node": addr, "hostname": hostname, "topic_name": name, "depth": depth,
        "memory_depth": depth - backend, "backend_depth": backend,
        "message_count": raw.get("message_count", 0), "nodes": None,
        "channels": [channel_node(c, name, addr, hostname, now) for c in channels] or None,
        "paused": bool(raw.get("paused", False)),
        "e2e_processing_latency": e2e_node(raw.get("e2e_processing_latency")),
    }


def empty_channel(topic: str, channel: str) -> dict:
    """The cluster-wide ChannelStats before any node is added."""
    return {"node": "*", "hostname": "", "topic_name": topic, "channel_name": channel,
            **{k: 0 for k in _CHANNEL_SUMS}, "nodes": None, "clients": None, "paused": False,
            "e2e_processing_latency": None}


def empty_topic(topic: str) -> dict:
    """The cluster-wide TopicStats before any node is added ("node" becomes "*" with the first)."""
    return {"node": "", "hostname": "", "topic_name": topic, **{k: 0 for k in _TOPIC_SUMS},
            "nodes": None, "channels": None, "paused": False, "e2e_processing_latency": None}


def _by_host(row: dict) -> str:
    return row["hostname"]


def add_channel(agg: dict, node: dict) -> None:
    """ChannelStats.Add: sum one node's channel into the aggregate."""
    agg["node"] = "*"
    for k in _CHANNEL_SUMS:
        agg[k] += node[k]
    agg["paused"] = agg["paused"] or node["paused"]
    agg["nodes"] = sorted((agg["nodes"] or []) + [node], key=_by_host)
    if agg["e2e_processing_latency"] is None:
        agg["e2e_processing_latency"] = {"count": 0, "percentiles": None, "topic": agg["topic_name"],
                                         "channel": agg["channel_name"], "host": "*"}
    e2e_add(agg["e2e_processing_latency"], node["e2e_processing_latency"])
    if node["clients"]:
        agg["clients"] = sorted((agg["clients"] or []) + node["clients"], key=_by_host)


def add_topic(agg: dict, node: dict) -> None:
    """TopicStats.Add: sum one node's topic (and its channels) into the aggregate."""
    agg["node"] = "*"
    for k in _TOPIC_SUMS:
        agg[k] += node[k]
    agg["paused"] = agg["paused"] or node["paused"]
    channels = {c["channel_name"]: c for c in agg["channels"] or ()}
    for ch in node["channels"] or ():
        mine = channels.get(ch["channel_name"])
        if mine is None:
            mine = channels[ch["channel_name"]] = empty_channel(agg["topic_name"], ch["channel_name"])
            agg["channels"] = (agg["channels"] or []) + [mine]
        add_channel(mine, ch)
    agg["nodes"] = sorted((agg["nodes"] or []) + [node], key=_by_host)
    if agg["e2e_processing_latency"] is None:
        agg["e2e_processing_latency"] = {"count": 0, "percentiles": None, "topic": agg["topic_name"],
                                         "channel": "", "host": "*"}
    e2e_add(agg["e2e_processing_latency"], node["e2e_processing_latency"])


def now_seconds() -> int:
    """Go's time.Now().Truncate(time.Second), as ClientStats' "connected" is measured from."""
    return int(time.time())
