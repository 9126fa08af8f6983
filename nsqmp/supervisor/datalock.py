"""The data path's lock: one broker per data directory, and a restart right after a kill.

The supervisor takes ``flock`` on ``<data-path>/.lock`` before it binds or forks, and
writes its pid into the file. Its children inherit the descriptor, so the lock is free
only once every process of the broker is gone: a new broker can never write the files
while a dying router still does. A harness that SIGKILLs the supervisor and starts the
next broker at once may find the lock still held for the few milliseconds the old
children take to die; the lock file names a supervisor that no longer exists, so the
new one waits for them (at most DYING_WAIT) instead of failing.
"""
from __future__ import annotations

import errno
import fcntl
import os
import time

# how long a start waits for the children of a dead supervisor to let the lock go
DYING_WAIT = 5.0


class LockError(Exception):
    """The data path cannot be used; the message is one line for the operator."""


def _writable(path: str) -> None:
    os.makedirs(path, exist_ok=True)
    probe = os.path.join(path, ".nsqmp-write-test")
    with open(probe, "w") as f:
        f.write("ok")
    os.unlink(probe)


def _holder_gone(fd: int) -> bool:
    """The lock file names a supervisor pid that is no longer alive."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return False
    if not text.isdigit():
        return False
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def lock_data_path(path: str) -> tuple[int, bool]:
    """Check the path is writable, lock it, write our pid; returns the descriptor and
    whether we waited for a dead broker's children to let it go."""
    try:
        _writable(path)
        fd = os.open(os.path.join(path, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise LockError(f"data path {path!r} is not writable: {exc.strerror}") from None
    deadline = 0.0
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise LockError(f"cannot lock data path {path!r}: {exc.strerror}") from None
        if not deadline and _holder_gone(fd):
            deadline = time.monotonic() + DYING_WAIT
        if not deadline or time.monotonic() > deadline:
            os.close(fd)
            raise LockError(f"data path {path!r} is in use by another nsqmp or nsqd") from None
        time.sleep(0.002)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd, bool(deadline)
