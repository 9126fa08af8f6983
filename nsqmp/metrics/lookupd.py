"""nsqlookupd's /metrics: what its registry knows, and its own process.

The lookupd hands a :class:`LookupdFigures` per scrape (read from its registration DB);
rendering is nsqmp.metrics.exposition.render, as for the broker.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nsqmp.metrics import procfs


@dataclass
class LookupdFigures:
    """One scrape of a lookupd."""

    version: str
    brokers: int  # active broker connections (registered, heard from within the inactive timeout)
    tombstoned: int  # (topic, broker) pairs tombstoned now
    channels: int
    topic_producers: dict[str, int] = field(default_factory=dict)  # topic -> active, untombstoned brokers


class LookupdCollector(Collector):
    """Metric families of one :class:`LookupdFigures`, and this process's CPU and memory."""

    def __init__(self, figures: LookupdFigures) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        """The registry's counts, per topic producers, the process."""
        f = self.figures
        info = GaugeMetricFamily("nsqmp_lookupd_info", "The nsqlookupd-compatible version.", labels=["version"])
        info.add_metric([f.version], 1)
        yield info
        yield GaugeMetricFamily("nsqmp_lookupd_brokers", "Brokers registered and heard from within "
                                "--inactive-producer-timeout.", value=f.brokers)
        yield GaugeMetricFamily("nsqmp_lookupd_topics", "Topics registered.", value=len(f.topic_producers))
        yield GaugeMetricFamily("nsqmp_lookupd_channels", "Channels registered.", value=f.channels)
        yield GaugeMetricFamily("nsqmp_lookupd_tombstones", "Topic producers tombstoned now.", value=f.tombstoned)
        per_topic = GaugeMetricFamily("nsqmp_lookupd_topic_producers", "Brokers /lookup returns for the topic "
                                      "(active, not tombstoned).", labels=["topic"])
        for topic, n in sorted(f.topic_producers.items()):
            per_topic.add_metric([topic], n)
        yield per_topic
        figures = procfs.cpu_and_rss(os.getpid())
        if figures is not None:
            yield CounterMetricFamily("nsqmp_lookupd_process_cpu_seconds", "User and system CPU seconds of the "
                                      "lookupd process.", value=figures[0])
            yield GaugeMetricFamily("nsqmp_lookupd_process_resident_memory_bytes", "Resident memory of the "
                                    "lookupd process.", value=figures[1])
