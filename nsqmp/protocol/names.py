"""Topic and channel name rules (nsqd's protocol.IsValidTopicName / IsValidChannelName)."""
from __future__ import annotations

import re

# fullmatch: Python's "$" also matches before a final newline, Go's does not
_NAME = re.compile(rb"[.a-zA-Z0-9_-]+(#ephemeral)?")
EPHEMERAL_SUFFIX = b"#ephemeral"


def is_valid_name(name: bytes) -> bool:
    """1..64 bytes including any '#ephemeral' suffix, of [.a-zA-Z0-9_-]."""
    return 0 < len(name) <= 64 and _NAME.fullmatch(name) is not None


def is_ephemeral(name: bytes) -> bool:
    return name.endswith(EPHEMERAL_SUFFIX)
