"""The broker's /metrics: a snapshot of /stats-shaped data rendered by prometheus_client.

The acceptor that answers gathers a :class:`Snapshot` per scrape (every router's topics and
channels, the fire lateness histograms, the processes, rings, connections and segment
files); :class:`BrokerCollector` turns it into metric families, and :func:`render` writes
them with prometheus_client's own encoders: text format 0.0.4, or OpenMetrics when the
Accept header asks for ``application/openmetrics-text``. Nothing is kept between scrapes
and no global registry is used, so a deleted topic or channel is simply absent from the
next scrape. Names, types and labels: docs/metrics.md.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from nsqmp import lateness


@dataclass
class ProcessFigures:
    """One broker process: its role and index, CPU seconds, resident bytes, restarts."""

    role: str
    index: int
    cpu_seconds: float
    resident_bytes: int
    restarts: int


@dataclass
class Snapshot:
    """Everything one scrape reports, gathered by the acceptor that answers."""

    version: str
    start_time: int
    healthy: bool
    topics: list[dict]
    fire_lateness: dict[tuple[str, int], dict] = field(default_factory=dict)  # (kind, router) -> snapshot
    processes: list[ProcessFigures] = field(default_factory=list)
    connections: dict[str, int] = field(default_factory=dict)  # listener -> established
    rings: list[tuple[str, int, int]] = field(default_factory=list)  # (ring, used, capacity)
    ring_peaks: dict[str, int] = field(default_factory=dict)  # ring -> high-water mark (bytes)
    segment_files: int = 0
    segment_bytes: int = 0
    syncs: dict[tuple[str, int], dict] = field(default_factory=dict)  # (role, index) -> SyncTimes snapshot


# (stats key, metric suffix, help) of the per-topic and per-channel figures
_TOPIC_COUNTERS = (
    ("message_count", "messages", "Messages published to the topic."),
    ("message_bytes", "message_bytes", "Bytes of message bodies published to the topic."),
    ("nsqmp_dropped_count", "dropped_messages", "Messages dropped by the topic's max-topic-bytes cap."),
    ("expired_count", "expired_messages", "Messages that passed the topic's TTL while it held them itself "
     "(paused, or no channel yet), dropped."),
)
_TOPIC_GAUGES = (
    ("depth", "depth", "Messages the topic holds for a first channel (backend_depth included)."),
    ("backend_depth", "backend_depth", "Of the topic's depth, messages still only in the segment files."),
)
_CHANNEL_COUNTERS = (
    ("message_count", "messages", "Messages the channel received from its topic."),
    ("requeue_count", "requeued", "Messages requeued (REQ, or their consumer left)."),
    ("timeout_count", "timed_out", "Messages whose msg_timeout passed in flight."),
    ("nsqmp_delivery_count", "delivered", "Messages handed to the channel's consumers (since its router started)."),
    ("nsqmp_finish_count", "finished", "Messages FINished by the channel's consumers (since its router started)."),
    ("expired_count", "expired_messages", "Messages that passed their topic's TTL in the channel, dropped."),
    ("dead_letter_count", "dead_lettered_messages", "Messages sent to the channel's dead-letter topic after "
     "max_attempts deliveries."),
)
_CHANNEL_GAUGES = (
    ("depth", "depth", "Messages queued in the channel (backend_depth included)."),
    ("backend_depth", "backend_depth", "Of the channel's depth, messages still only in the segment files."),
    ("in_flight_count", "in_flight", "Messages delivered and not yet finished, requeued or timed out."),
    ("deferred_count", "deferred", "Messages deferred (DPUB, or REQ with a delay)."),
    ("client_count", "consumers", "Consumers subscribed to the channel."),
)


class BrokerCollector(Collector):
    """Metric families built from one :class:`Snapshot` (a collector per scrape)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        """Broker-wide families, then per topic, per channel, processes, rings, lateness."""
        yield from self._broker()
        yield from self._topics()
        yield from self._channels()
        yield from self._processes()
        yield from self._rings()
        yield from self._lateness()
        yield from self._syncs()

    def _broker(self) -> Iterator[Metric]:
        s = self.snap
        info = GaugeMetricFamily("nsqmp_info", "The broker's nsqd-compatible version.", labels=["version"])
        info.add_metric([s.version], 1)
        yield info
        yield GaugeMetricFamily("nsqmp_start_time_seconds", "When the broker started (unix seconds).",
                                value=s.start_time)
        yield GaugeMetricFamily("nsqmp_healthy", "1 while the disk takes writes (/ping OK), else 0.",
                                value=1 if s.healthy else 0)
        yield GaugeMetricFamily("nsqmp_topics", "Topics the broker has.", value=len(s.topics))
        yield GaugeMetricFamily("nsqmp_channels", "Channels the broker has.",
                                value=sum(len(t["channels"]) for t in s.topics))
        yield CounterMetricFamily("nsqmp_published_messages", "Messages published to the topics the broker "
                                  "has now (a deleted topic's count goes with it).",
                                  value=sum(t["message_count"] for t in s.topics))
        yield CounterMetricFamily("nsqmp_published_bytes", "Bytes of message bodies published to the topics "
                                  "the broker has now.", value=sum(t["message_bytes"] for t in s.topics))
        channels = [c for t in s.topics for c in t["channels"]]
        yield CounterMetricFamily("nsqmp_fanout_messages", "Messages the channels received (the fan-out), "
                                  "summed over the channels the broker has now.",
                                  value=sum(c["message_count"] for c in channels))
        yield CounterMetricFamily("nsqmp_delivered_messages", "Messages handed to consumers, summed over the "
                                  "channels the broker has now (each since its router started).",
                                  value=sum(c.get("nsqmp_delivery_count", 0) for c in channels))
        yield CounterMetricFamily("nsqmp_finished_messages", "Messages FINished, summed likewise.",
                                  value=sum(c.get("nsqmp_finish_count", 0) for c in channels))
        conns = GaugeMetricFamily("nsqmp_connections", "Established client connections to the broker's "
                                  "listeners, every acceptor's.", labels=["listener"])
        for listener, n in sorted(s.connections.items()):
            conns.add_metric([listener], n)
        yield conns
        yield GaugeMetricFamily("nsqmp_segment_files", "Segment files under the data path.", value=s.segment_files)
        yield GaugeMetricFamily("nsqmp_segment_bytes", "Bytes the segment files occupy on disk (allocated).",
                                value=s.segment_bytes)

    def _topics(self) -> Iterator[Metric]:
        topics = self.snap.topics
        for key, suffix, doc in _TOPIC_COUNTERS:
            fam = CounterMetricFamily(f"nsqmp_topic_{suffix}", doc, labels=["topic"])
            for t in topics:
                fam.add_metric([t["topic_name"]], t.get(key, 0))
            yield fam
        for key, suffix, doc in _TOPIC_GAUGES:
            fam = GaugeMetricFamily(f"nsqmp_topic_{suffix}", doc, labels=["topic"])
            for t in topics:
                fam.add_metric([t["topic_name"]], t[key])
            yield fam
        paused = GaugeMetricFamily("nsqmp_topic_paused", "1 while the topic is paused.", labels=["topic"])
        for t in topics:
            paused.add_metric([t["topic_name"]], 1 if t["paused"] else 0)
        yield paused

    def _channels(self) -> Iterator[Metric]:
        pairs = [(t["topic_name"], c) for t in self.snap.topics for c in t["channels"]]
        for key, suffix, doc in _CHANNEL_COUNTERS:
            fam = CounterMetricFamily(f"nsqmp_channel_{suffix}", doc, labels=["topic", "channel"])
            for topic, c in pairs:
                fam.add_metric([topic, c["channel_name"]], c.get(key, 0))
            yield fam
        for key, suffix, doc in _CHANNEL_GAUGES:
            fam = GaugeMetricFamily(f"nsqmp_channel_{suffix}", doc, labels=["topic", "channel"])
            for topic, c in pairs:
                fam.add_metric([topic, c["channel_name"]], c[key])
            yield fam
        paused = GaugeMetricFamily("nsqmp_channel_paused", "1 while the channel is paused.",
                                   labels=["topic", "channel"])
        e2e = GaugeMetricFamily("nsqmp_channel_e2e_processing_latency_seconds", "Percentiles of the time from "
                                "publish to FIN (--e2e-processing-latency-percentile).",
                                labels=["topic", "channel", "quantile"])
        for topic, c in pairs:
            paused.add_metric([topic, c["channel_name"]], 1 if c["paused"] else 0)
            for p in (c.get("e2e_processing_latency") or {}).get("percentiles") or ():
                e2e.add_metric([topic, c["channel_name"], repr(p["quantile"])], p["value"] / 1e9)
        yield paused
        yield e2e

    def _processes(self) -> Iterator[Metric]:
        labels = ["role", "index"]
        cpu = CounterMetricFamily("nsqmp_process_cpu_seconds", "User and system CPU seconds of the process "
                                  "(its current incarnation).", labels=labels)
        rss = GaugeMetricFamily("nsqmp_process_resident_memory_bytes", "Resident memory of the process.",
                                labels=labels)
        restarts = CounterMetricFamily("nsqmp_process_restarts", "Times the supervisor restarted the slot's "
                                       "process.", labels=labels)
        for p in self.snap.processes:
            key = [p.role, str(p.index)]
            cpu.add_metric(key, p.cpu_seconds)
            rss.add_metric(key, p.resident_bytes)
            restarts.add_metric(key, p.restarts)
        yield cpu
        yield rss
        yield restarts

    def _rings(self) -> Iterator[Metric]:
        used = GaugeMetricFamily("nsqmp_ring_used_bytes", "Bytes written to the ring and not yet consumed "
                                 "(a{i}r{j}: acceptor i to router j; r{j}a{i}; r{j}t; tr{j}).", labels=["ring"])
        cap = GaugeMetricFamily("nsqmp_ring_capacity_bytes", "Bytes of the ring's data area.", labels=["ring"])
        peak = GaugeMetricFamily("nsqmp_ring_high_water_bytes", "The most bytes the ring held since the router "
                                 "at its end started (seen after each push and before each drain).",
                                 labels=["ring"])
        for ring, n, capacity in self.snap.rings:
            used.add_metric([ring], n)
            cap.add_metric([ring], capacity)
            if ring in self.snap.ring_peaks:
                peak.add_metric([ring], self.snap.ring_peaks[ring])
        yield used
        yield cap
        yield peak

    def _lateness(self) -> Iterator[Metric]:
        hist = HistogramMetricFamily("nsqmp_fire_lateness_seconds", "How long after its deadline a timed-out "
                                     "flight or a deferred message was back in its queue, per router (one "
                                     "bucket per doubling; no _sum: the routers keep none).",
                                     labels=["kind", "router"])
        top = GaugeMetricFamily("nsqmp_fire_lateness_max_seconds", "The largest fire lateness seen.",
                                labels=["kind", "router"])
        for (kind, router), snap in sorted(self.snap.fire_lateness.items()):
            hist.add_metric([kind, str(router)], lateness_buckets([snap]), None)
            top.add_metric([kind, str(router)], snap["max_ns"] / 1e9)
        yield hist
        yield top

    def _syncs(self) -> Iterator[Metric]:
        hist = HistogramMetricFamily("nsqmp_fsync_seconds", "Durations of background fdatasyncs: an "
                                     "acceptor's segment files, a router's ack logs.", labels=["role", "index"])
        for (role, index), snap in sorted(self.snap.syncs.items()):
            buckets, total = sync_buckets([snap])
            hist.add_metric([role, str(index)], buckets, total)
        yield hist


def sync_buckets(snaps: list[dict]) -> tuple[list[tuple[str, float]], float]:
    """Several processes' SyncTimes snapshots as cumulative buckets (bound 2**i us) and the
    sum in seconds."""
    counts = [sum(col) for col in zip(*(s["counts"] for s in snaps))] if snaps else [0]
    out: list[tuple[str, float]] = []
    seen = 0
    for i, c in enumerate(counts):
        seen += c
        if i < len(counts) - 1:
            out.append((repr(2 ** i / 1e6), seen))
    out.append(("+Inf", seen))
    return out, sum(s["total_ns"] for s in snaps) / 1e9


def lateness_buckets(snaps: list[dict]) -> list[tuple[str, float]]:
    """The routers' FireLateness snapshots merged as cumulative Prometheus buckets: every
    fourth bound of nsqmp.lateness (one per doubling of microseconds), exact at each, +Inf
    last."""
    counts = lateness.merged_counts(snaps)
    out: list[tuple[str, float]] = []
    seen = 0
    for i, c in enumerate(counts):
        seen += c
        if i % lateness.STEPS == 0 and i < len(counts) - 1:
            out.append((repr(lateness.bound_seconds(i)), seen))
    out.append(("+Inf", seen))
    return out


def render(collector: Collector, accept: str) -> tuple[bytes, str]:
    """(body, content type) for a scrape: OpenMetrics if Accept asks for it, else text 0.0.4."""
    encoder, content_type = choose_encoder(accept)
    registry = CollectorRegistry(auto_describe=False)  # per scrape: nothing outlives it
    registry.register(collector)
    return encoder(registry), content_type
