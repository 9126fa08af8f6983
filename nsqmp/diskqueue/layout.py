"""Where a topic's files live under the data path.

    <data-path>/
      .lock                    flock'ed by the supervisor
      topics/<topic>/
        meta.json              channels, their ids, start points and paused flags (meta.py)
        acks.log               FINs, 16 bytes each (acklog.py)
        NN.SSSSSSSS.seg        segment SSSSSSSS written by acceptor NN (segment.py)

Topic names may be "." or ".." (NSQ allows them); those two are written as "%2E" and
"%2E%2E" so no name can leave topics/ (names never contain '%').
"""
from __future__ import annotations

import os


def topics_root(data_path: str) -> str:
    return os.path.join(data_path, "topics")


def topic_dir(data_path: str, name: str) -> str:
    safe = name if name not in (".", "..") else name.replace(".", "%2E")
    return os.path.join(topics_root(data_path), safe)


def list_topics(data_path: str) -> list[str]:
    """Names of the topics that have a directory."""
    try:
        entries = os.listdir(topics_root(data_path))
    except FileNotFoundError:
        return []
    return sorted(e.replace("%2E", ".") for e in entries if not e.endswith(".tmp"))
