"""How a child learns that the supervisor died, and dies at once (fast path).

The guarantee is PR_SET_PDEATHSIG=SIGKILL, set by each child right after fork
(roles.die_with_parent), plus a getppid() check for a supervisor that died before it.
But the kernel sends that signal late: from exit_notify, after it has freed the dead
supervisor's memory and closed its files, and each child then frees its own memory
before its listening sockets close (9-21 ms idle, 15-57 ms loaded, measured with
`nsqmp bench death`).

The fast path: one robust, process-shared mutex per child slot in an anonymous shared
mapping made before the first fork (nothing in /dev/shm). The supervisor holds every
one. Each child starts a native thread (no Python, every signal blocked) that waits
for its slot's mutex. The kernel walks a dead thread's robust futex list at the start
of exit_mm, before any page is freed, and wakes the waiter with EOWNERDEAD: the thread
shuts down the child's listening sockets, then every TCP socket of the process (lookupd
and client connections get their FIN), then SIGKILLs its own process. Details and the
figures: docs/lifecycle.md.
"""
from __future__ import annotations

import logging
import mmap

log = logging.getLogger("nsqmp.supervisor")

try:
    from nsqmp.supervisor import _lifeline
except ImportError:  # extension not built: the parent-death signal alone (slower death)
    _lifeline = None


class Lifeline:
    """Built and held by the supervisor before its first fork; watched by each child."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.enabled = _lifeline is not None
        if self.enabled:
            size = max(mmap.PAGESIZE, slots * _lifeline.SLOT_SIZE)
            self.buf = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        else:
            log.warning("nsqmp.supervisor._lifeline is not built: after a SIGKILL of the supervisor its "
                        "children stop only when the kernel's parent-death signal reaches them")

    def hold(self) -> None:
        """Supervisor, once, before forking: lock every slot's mutex for the rest of its life."""
        if self.enabled:
            _lifeline.hold(self.buf, self.slots)

    def watch(self, slot: int, fds: list[int]) -> None:
        """Child, right after fork: when the supervisor dies, shut down fds (its listening
        sockets) and every TCP socket, and SIGKILL this process."""
        if self.enabled:
            _lifeline.watch(self.buf, slot, fds)
