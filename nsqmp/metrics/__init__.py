"""Operators' view of the broker: Prometheus exposition (exposition.py), nsqd's statsd push
(statsd.py), and the figures the kernel and the shared memory hold (procfs.py).

Shared code: it imports no role. The acceptor gathers /stats-shaped data from its routers
(nsqmp/acceptor/http_metrics.py) and hands it here; the lookupd hands its registry.
"""
