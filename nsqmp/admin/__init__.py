"""nsqmp's nsqadmin: a web UI and nsqadmin's JSON API over brokers' and lookupds' HTTP APIs.

The admin is its own role: it never touches the shared-memory rings, so it runs on any machine
and works against real nsqd too. ``options`` (the command line), ``server`` (aiohttp routes, CSRF,
ACL, base path), ``cluster`` (gathering from brokers and lookupds), ``stats`` (nsqadmin's
aggregation), ``actions`` (pause/empty/delete/create/tombstone + notifications), ``history`` (the
sampler behind the charts). The contract with the front end in ``static/`` is ``API.md``.
"""
from __future__ import annotations

#: the nsqadmin release whose API and command line this admin mimics
NSQADMIN_VERSION = "1.3.0"
