"""A consumer's or producer's settings, named as go-nsq's Config names them.

The nsq_* utilities pass ``--consumer-opt`` / ``--producer-opt`` through to go-nsq's
Config as ``key,value`` (go-nsq's ConfigFlag); :meth:`Config.set_opt` reads the same text
for the keys this client honours. Durations are Go's (``90s``, ``15m``) or an integer
number of milliseconds.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass, field, fields

from nsqmp.config.options import parse_duration

_DURATIONS = ("dial_timeout", "read_timeout", "lookupd_poll_interval", "heartbeat_interval",
              "msg_timeout", "default_requeue_delay", "max_requeue_delay")
_INTS = ("max_in_flight", "max_attempts")
_FLOATS = ("lookupd_poll_jitter",)
_STRINGS = ("client_id", "hostname", "user_agent", "auth_secret")


@dataclass
class Config:
    """go-nsq's defaults; durations in seconds."""

    dial_timeout: float = 1.0
    read_timeout: float = 60.0
    lookupd_poll_interval: float = 60.0
    lookupd_poll_jitter: float = 0.3
    heartbeat_interval: float = 30.0
    msg_timeout: float = 0.0  # 0: the broker's default
    default_requeue_delay: float = 90.0
    max_requeue_delay: float = 900.0
    max_in_flight: int = 1
    max_attempts: int = 5
    client_id: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    hostname: str = field(default_factory=socket.gethostname)
    user_agent: str = "nsqmp-client"
    auth_secret: str = ""

    def set_opt(self, text: str) -> None:
        """go-nsq's ConfigFlag: ``key,value`` (a bare ``key`` means true). ValueError names
        an unknown key or a bad value."""
        key, _, value = text.partition(",")
        key = key.strip()
        if key in _DURATIONS:
            seconds = parse_duration(int(value) if value.strip().isdigit() else value)
            setattr(self, key, seconds)
        elif key in _INTS:
            setattr(self, key, int(value))
        elif key in _FLOATS:
            setattr(self, key, float(value))
        elif key in _STRINGS:
            setattr(self, key, value)
        else:
            known = sorted(f.name for f in fields(self))
            raise ValueError(f"invalid option {key!r} (this client knows: {', '.join(known)})")

    def identify(self) -> dict:
        """The IDENTIFY body these settings send."""
        body: dict = {"client_id": self.client_id, "hostname": self.hostname, "user_agent": self.user_agent,
                      "feature_negotiation": True, "heartbeat_interval": int(self.heartbeat_interval * 1000)}
        if self.msg_timeout > 0:
            body["msg_timeout"] = int(self.msg_timeout * 1000)
        return body

    def requeue_delay(self, attempts: int) -> float:
        """go-nsq's delay for ``Requeue(-1)``: default_requeue_delay x attempts, at most
        max_requeue_delay."""
        return min(self.default_requeue_delay * attempts, self.max_requeue_delay)
