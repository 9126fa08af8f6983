"""A test-side fix for pynsq 0.9.1's snappy and deflate sockets on tornado 6.

pynsq wraps the stream's socket after the upgrade (nsq/snappy_socket.py, nsq/deflate_socket.py);
its `_recv` decompresses each chunk the kernel hands it, and when that gives nothing (the
chunk is only part of a snappy block, or only deflate's 00 00 ff ff flush marker) it raises
``socket.error(errno.EWOULDBLOCK)``. With one argument that is a plain OSError whose errno is
None, not a BlockingIOError: tornado >= 6 only treats BlockingIOError as "nothing to read yet"
(IOStream.read_from_fd), so it closes the stream, and pynsq reports
``IntegrityError('failed to unpack size')`` and reconnects 15 s later (nsqio/pynsq#258, open).

Any TCP read may end inside a compressed frame, so every broker triggers it now and then:
nsqd 1.3.0 writes a small snappy frame's chunk header and its data in two writes (golang/snappy's
unbuffered Writer) and deflate's flush marker apart from the data, so it hits pynsq's window
during the upgrade itself; nsqmp writes each compressed frame whole and hits it only with
frames bigger than a read (tests/compat/test_pynsq_split_reads.py has both).

`patch_compressed_reads()` makes such a read "nothing yet", as pynsq meant: the decompressor
keeps the partial chunk and the next read completes it.
"""
from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def _recv(self: Any, size: int, method: Callable[[int], bytes]) -> bytes:
    """pynsq's SnappySocket/DeflateSocket._recv, raising a real BlockingIOError when the
    chunk read decompresses to nothing yet."""
    if self._bootstrapped:
        data = self._bootstrapped
        self._bootstrapped = None
        return data
    chunk = method(size)
    if not chunk:
        return chunk  # EOF
    uncompressed = self._decompressor.decompress(chunk)
    if not uncompressed:
        raise BlockingIOError(errno.EWOULDBLOCK, "a compressed frame is not complete yet")
    return uncompressed


def _classes() -> tuple[type, type]:
    from nsq import deflate_socket, snappy_socket

    return snappy_socket.SnappySocket, deflate_socket.DeflateSocket


_ORIGINAL: dict[type, Callable[..., bytes]] = {}  # pynsq's own _recv, kept at the first patch


def patch_compressed_reads() -> None:
    """Install the fixed `_recv` on pynsq's SnappySocket and DeflateSocket (idempotent;
    affects every pynsq connection of the process from now on)."""
    for cls in _classes():
        _ORIGINAL.setdefault(cls, cls.__dict__["_recv"])
        cls._recv = _recv


@contextmanager
def compressed_reads(fixed: bool) -> Iterator[None]:
    """pynsq's compressed sockets with the fix (fixed=True) or as released, for the body of
    the with; the state before comes back after it."""
    saved = [(cls, cls.__dict__["_recv"]) for cls in _classes()]
    patch_compressed_reads()
    if not fixed:
        for cls in _classes():
            cls._recv = _ORIGINAL[cls]
    try:
        yield
    finally:
        for cls, recv in saved:
            cls._recv = recv
