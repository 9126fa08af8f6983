"""Benchmarks and load generators, kept apart from the broker's packages (`nsqmp bench ...`).

Load generators against a broker: `tool` (writer, reader), `latency`, `timer`, `answers`,
`backlog`, `floor`, `tuning` and the `make bench` `suite`. One part alone: `ring` (the
shared-memory ring), `heap` (the timer's deadline heap), `inflight` (the router's consume
calls), `parser` (the command parser), `lookupd` (/lookup latency), `spark` (the PySpark
source and sink). `_client` is the bench client's C loops (native/bench/client.c), an
extension of its own: the broker's `nsqmp._native` holds only the broker.
"""
