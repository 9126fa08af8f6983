"""What every child role does the same way: process title, loop, heartbeat, signals.

A role object is built in the supervisor with plain data only (build before fork); its
run() executes in the child, creates the event loop, attaches shared memory and opens
files (set up after fork), and the child ends in os._exit.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
from collections.abc import Callable

import setproctitle
import uvloop

from nsqmp import memstats, sched
from nsqmp.golog import LEVELS
from nsqmp.ipc.control import READY, ControlBlock
from nsqmp.ipc.doorbell import Doorbell
from nsqmp.ipc.mesh import Endpoint, Plan, attach_to_loop

BEAT_INTERVAL = 0.25
_PR_SET_PDEATHSIG = 1
# glibc malloc's thresholds, fixed (mallopt): blocks of MMAP_THRESHOLD bytes or more are
# mapped on their own and unmapped at free; a heap gives back its free top beyond
# TRIM_THRESHOLD. Left alone, glibc raises both after every large free (to the block's
# size, up to 32 MiB, and twice that), so a burst's freed memory stayed resident: after the
# reader bench a router kept 40 MiB of its 73 MiB PSS in a thread's arena (the syncing
# thread's: an ack-log rewrite reads the whole log). 4 MiB is above every ring record (at
# most a quarter of an 8 MiB ring: DELIVER records) and the 1 MiB read-back buffer, so no
# hot-path block is mapped and unmapped per use, and a pass's records freed at its end
# stay below the trim threshold. malloc_trim(0) once a second was measured instead: 16-75
# ms a call on a fragmented heap (a madvise per free chunk), too long a stall for the loop.
MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 4 << 20
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters
_M_MMAP_THRESHOLD = -3


def fix_malloc_thresholds() -> None:
    """Fix glibc malloc's mmap and trim thresholds (see MMAP_THRESHOLD); no-op where
    there is no glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def die_with_parent(parent: int = 0) -> None:
    """Ask the kernel to SIGKILL us if the supervisor dies without stopping us.

    Called first thing after fork. The request covers only a parent still alive when it
    is made: if the supervisor (pid ``parent``) died between our fork and this call, we
    were already handed to another parent and no signal will ever come, so exit at once."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:
        os._exit(1)


class Role:
    """Base of acceptor, router and timer: subclasses fill in setup(), stop(), and the
    record kind -> handler table `handlers` that on_record() dispatches through."""

    title = "nsqmp role"
    # the time slice this role asks the kernel for (nsqmp/sched.py); 0 keeps the default
    slice_ns = 0

    def __init__(self, opts, plan: Plan, slot: int, generation: int, doorbells: list[Doorbell],
                 control_name: str) -> None:
        self.opts = opts
        self.plan = plan
        self.slot = slot
        self.generation = generation
        self.doorbells = doorbells
        self.control_name = control_name
        self.log = logging.getLogger(f"nsqmp.{self.title.split()[1]}")
        self.loop: asyncio.AbstractEventLoop
        self.endpoint: Endpoint
        self.control: ControlBlock
        self._stopping = False
        self.handlers: dict[int, Callable[[int, bytes], None]] = {}

    def run(self) -> int:
        setproctitle.setproctitle(self.title)
        fix_malloc_thresholds()
        memstats.install()
        if self.slice_ns:
            sched.set_slice(self.slice_ns)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        self.loop = uvloop.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.control = ControlBlock.attach(self.control_name)
        self.endpoint = Endpoint(self.plan, self.slot, self.doorbells)
        self.setup()
        attach_to_loop(self.loop, self.endpoint, self.on_record, self.poll_rings)
        self.loop.add_signal_handler(signal.SIGTERM, self.begin_stop)
        self.loop.add_signal_handler(signal.SIGINT, self.begin_stop)
        self.control.announce(self.slot, os.getpid(), self.generation, READY)
        self._beat()
        self.started()
        self.loop.run_forever()
        self.endpoint.flush()
        return 0

    def _beat(self) -> None:
        self.control.beat(self.slot)
        self.loop.call_later(BEAT_INTERVAL, self._beat)
        # an empty ring quiet since the last beat gives its pages back: 250-500 ms after
        # a burst (the reader bench reads the broker's memory soon after its drain)
        self.endpoint.release_idle()

    def begin_stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.loop.create_task(self._stop())

    async def _stop(self) -> None:
        try:
            await self.stop()
        finally:
            self.endpoint.flush()
            self.loop.stop()

    def apply_config(self, overrides: dict) -> None:
        """Options changed at run time (PUT /config/...): the values and the log level."""
        self.opts = self.opts.replace(**overrides)
        if "log_level" in overrides:
            logging.getLogger().setLevel(LEVELS[self.opts.log_level])

    # -- for subclasses -------------------------------------------------------
    def setup(self) -> None:
        """Open files and servers; runs in the child before the first record."""

    def started(self) -> None:
        """Runs once the role is attached and announced (say hello to peers here)."""

    def on_record(self, src: int, rec: bytes) -> None:
        """One ring record from slot src, to its kind's handler (self.handlers)."""
        handler = self.handlers.get(rec[0])
        if handler is None:
            self.log.error("unexpected record kind %d from slot %d", rec[0], src)
            return
        handler(src, rec)

    def poll_rings(self) -> bool:
        """True while records may wait a millisecond (see attach_to_loop's poll_while)."""
        return False

    async def stop(self) -> None:
        """Graceful stop (SIGTERM)."""
