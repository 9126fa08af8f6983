"""Type stub for the C extension nsqmp.bench._client (source: native/bench/client.c)."""

from typing_extensions import Buffer

def fin_replies(buf: Buffer, /) -> tuple[bytes, int, int, bytes | None]:
    """(replies, messages, consumed, error): FIN per message frame, NOP per heartbeat."""
def publish_loop(fd: int, command: bytes, until: float, /) -> tuple[int, tuple[int, bytes] | None, float]:
    """Send command, wait for its response (answering heartbeats with NOP), until
    time.monotonic() passes until: (OKs, error, the longest wait for an OK in seconds)."""
