"""Client-visible errors of the TCP protocol.

Two classes, as in nsqd: a ClientError is sent as an error frame and the connection stays
open (only E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED); a FatalClientError is sent and
then the connection is closed. The text is always "<CODE> <description>"; internal causes
are logged, never sent.
"""
from __future__ import annotations


class ClientError(Exception):
    """An error frame that leaves the connection open."""

    fatal = False

    def __init__(self, code: str, description: str = "") -> None:
        super().__init__(code, description)
        self.code = code
        self.description = description

    @property
    def wire(self) -> bytes:
        text = f"{self.code} {self.description}" if self.description else self.code
        # bytes quoted from the wire were decoded with surrogateescape: they go back as they came
        return text.encode("utf-8", "surrogateescape")


class FatalClientError(ClientError):
    """An error frame after which the connection is closed."""

    fatal = True


E_BAD_PROTOCOL = "E_BAD_PROTOCOL"
E_INVALID = "E_INVALID"
E_BAD_BODY = "E_BAD_BODY"
E_IDENTIFY_FAILED = "E_IDENTIFY_FAILED"
E_BAD_TOPIC = "E_BAD_TOPIC"
E_BAD_CHANNEL = "E_BAD_CHANNEL"
E_BAD_MESSAGE = "E_BAD_MESSAGE"
E_PUB_FAILED = "E_PUB_FAILED"
E_MPUB_FAILED = "E_MPUB_FAILED"
E_DPUB_FAILED = "E_DPUB_FAILED"
E_SUB_FAILED = "E_SUB_FAILED"
E_FIN_FAILED = "E_FIN_FAILED"
E_REQ_FAILED = "E_REQ_FAILED"
E_TOUCH_FAILED = "E_TOUCH_FAILED"
E_AUTH_FIRST = "E_AUTH_FIRST"
E_AUTH_FAILED = "E_AUTH_FAILED"
E_UNAUTHORIZED = "E_UNAUTHORIZED"
E_AUTH_DISABLED = "E_AUTH_DISABLED"
