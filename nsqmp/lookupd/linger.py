"""Closing a connection without losing our last words."""
from __future__ import annotations

import asyncio

LINGER = 0.5  # seconds


def linger_close(transport: asyncio.Transport) -> None:
    """Send FIN after what is queued, drop whatever still arrives for a moment, then close.

    Closing a socket that has unread input sends a RST, and a RST can destroy the error or
    response we just wrote before the peer has read it. The caller stops parsing first.
    """
    if transport.is_closing():
        return
    try:
        transport.write_eof()
    except (OSError, RuntimeError, NotImplementedError):
        transport.close()
        return
    asyncio.get_running_loop().call_later(LINGER, transport.close)
