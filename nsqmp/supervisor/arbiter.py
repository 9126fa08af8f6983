"""The supervisor: builds everything shared, forks the roles, watches them, stops them.

One loop, no event loop and no threads: signal handlers only queue the signal (and wake
the loop through the wakeup fd); the loop reaps children, respawns the dead, kills the
hung (stale heartbeat in the control block) and performs the stop sequence.

Start order: routers and the timer first, then the acceptors, so a client never reaches
an acceptor whose routers are not there. A child that dies before it announced READY is a
boot failure: the supervisor halts instead of respawning forever.

Respawn: a crash is repaired at once (clients of the slot wait milliseconds, not the
backoff). A child that dies within QUICK_DEATH of its start right after its predecessor
did the same is crash-looping: it is replaced after --restart-backoff, doubled for each
more such death in a row (at most BACKOFF_CAP, or the backoff itself if larger), and the
CRASH_LOOP-th quick death in a row halts the broker. A child that ran QUICK_DEATH or longer
starts the count again.
The wait is a deadline the loop's select() honours, never a sleep: signals are served
meanwhile, and a stop cancels the pending respawn.

Signals: SIGTERM and SIGINT stop gracefully. SIGHUP is logged and ignored: the children
take run-time options only through the CONFIG/CONFIG_SET records of PUT /config/..., and
the supervisor has no ring to send them one; SIGCHLD wakes the loop.
"""
from __future__ import annotations

import logging
import os
import select
import signal
import sys
import time
from dataclasses import dataclass

import setproctitle

from nsqmp import sched
from nsqmp.acceptor.role import Acceptor
from nsqmp.ipc import control, mesh, shm
from nsqmp.ipc.doorbell import Doorbell
from nsqmp.roles import die_with_parent
from nsqmp.router.role import Router
from nsqmp.supervisor.datalock import LockError, lock_data_path
from nsqmp.supervisor.lifeline import Lifeline
from nsqmp.supervisor.listeners import ListenError, bind_group
from nsqmp.supervisor.steering import Steering
from nsqmp.supervisor.notify import Notifier
from nsqmp.timer.role import Timer

log = logging.getLogger("nsqmp.supervisor")

BOOT_TIMEOUT = 15.0
STOP_TIMEOUT = 15.0
# a slot whose child dies this many times in a row, each within QUICK_DEATH seconds of
# its start, is crash-looping: halt instead of respawning forever
CRASH_LOOP = 5
QUICK_DEATH = 1.0
# the longest wait before a respawn after quick deaths in a row (unless --restart-backoff
# itself is longer)
BACKOFF_CAP = 30.0
# the loop's longest sleep in select() (reaping also comes through SIGCHLD)
TICK = 0.25
# an acceptor whose heartbeat (every 0.25 s) is older than this gets no new connections
STEER_BEAT_LATE_NS = 1_000_000_000


class BootError(Exception):
    """Start-up cannot go on; the message is one line for the operator."""


@dataclass
class Child:
    slot: int
    kind: str
    index: int
    generation: int = 0
    pid: int = 0
    started: float = 0.0
    quick_deaths: int = 0
    respawn_at: float = 0.0  # monotonic time of a pending respawn; 0 when none

    @property
    def name(self) -> str:
        return f"{self.kind} {self.index}" if self.kind != "timer" else "timer"


class Supervisor:
    def __init__(self, opts) -> None:
        self.opts = opts
        self.children: dict[int, Child] = {}
        self.by_pid: dict[int, Child] = {}
        self.signals: list[int] = []
        self.stopping = False
        self.shm_names: list[str] = []
        self.exit_code = 0
        self.booted = False
        self.pid = os.getpid()  # what each child checks getppid() against right after fork
        self.notifier = Notifier()
        self.steering: Steering | None = None  # new TCP connections packed (--acceptor-steering)

    # -- start -------------------------------------------------------------------------
    def run(self) -> int:
        setproctitle.setproctitle("nsqmp supervisor")
        # it sleeps nearly always; a short slice gets a SIGKILLed supervisor onto a core
        # (to die, and so to wake its children's lifeline watchers) without waiting
        sched.set_slice(sched.MIN_SLICE_NS)
        sched.set_realtime()
        try:
            self._prepare()
        except BootError as exc:
            log.error("%s", exc)
            self._cleanup()
            return 1
        try:
            self._boot()
            self._loop()
        except BootError as exc:
            log.error("%s", exc)
            self.exit_code = 1
            self._stop_children()
        finally:
            self._cleanup()
        return self.exit_code

    def _prepare(self) -> None:
        opts = self.opts
        shm.remove_stale()
        try:
            self._lock_fd, waited = lock_data_path(opts.data_path)
        except LockError as exc:
            raise BootError(str(exc)) from None
        if waited:
            log.info("waited for the processes of a killed nsqmp to let the data path go")
            shm.remove_stale()  # theirs: their supervisor is gone, and now its children too
        # after waiting, a dead broker's listener may close a moment after its lock did
        deadline = time.monotonic() + (1.0 if waited else 0.0)
        while True:
            try:
                self._bind(opts)
                break
            except BootError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        self.plan = mesh.Plan(os.getpid(), opts.acceptors, opts.routers, opts.ring_size)
        # before the first fork: every child inherits it (see lifeline.py)
        self.lifeline = Lifeline(self.plan.slots)
        self.lifeline.hold()
        self._check_shm_space()
        try:
            self.shm_names = mesh.create_all(self.plan)
            self.control_name = shm.segment_name(os.getpid(), "control")
            self.control = control.ControlBlock.create(self.control_name, self.plan.slots)
            self.shm_names.append(self.control_name)
        except OSError as exc:
            raise BootError(f"cannot create shared memory: {exc}") from None
        self.doorbells = [Doorbell() for _ in range(self.plan.slots)]
        log.info("TCP: listening on %s:%d", *self.tcp_socks[0].getsockname()[:2])
        if self.http_socks:
            log.info("HTTP: listening on %s:%d", *self.http_socks[0].getsockname()[:2])
        if self.https_socks:
            log.info("HTTPS: listening on %s:%d", *self.https_socks[0].getsockname()[:2])
        self.wakeup_r, self.wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self.wakeup_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, self._queue_signal)

    def _check_shm_space(self) -> None:
        """Rings are sparse: a /dev/shm too small for them would SIGBUS at the first traffic."""
        need = len(self.plan.ring_names()) * (self.opts.ring_size + 4096) + (1 << 20)
        try:
            st = os.statvfs("/dev/shm")
        except OSError:
            return
        free = st.f_bavail * st.f_frsize
        if free < need:
            raise BootError(
                f"/dev/shm has {free >> 20} MiB free but the rings need {need >> 20} MiB "
                f"({len(self.plan.ring_names())} rings of {self.opts.ring_size >> 20} MiB): "
                "enlarge it (docker run --shm-size) or lower --ring-size, --acceptors or --routers")

    def _bind(self, opts) -> None:
        """The listening sockets of every acceptor slot, bound once for the broker's life."""
        try:
            self.tcp_socks = bind_group("TCP", opts.tcp_address, opts.acceptors)
            self.http_socks = bind_group("HTTP", opts.http_address, opts.acceptors) if opts.http_address else []
            # nsqd listens for HTTPS only when it has a certificate
            tls = bool(opts.tls_cert and opts.tls_key and opts.https_address)
            self.https_socks = bind_group("HTTPS", opts.https_address, opts.acceptors) if tls else []
        except ListenError as exc:
            raise BootError(str(exc)) from None
        if opts.acceptor_steering == "pack" and opts.acceptors > 1:
            self.steering = Steering(self.tcp_socks[0], opts.acceptors)
            self.steering.start()

    def _queue_signal(self, signum, frame) -> None:
        self.signals.append(signum)

    def _boot(self) -> None:
        plan = self.plan
        for j in range(plan.routers):
            self.children[plan.router_slot(j)] = Child(plan.router_slot(j), "router", j)
        self.children[plan.timer_slot] = Child(plan.timer_slot, "timer", 0)
        for i in range(plan.acceptors):
            self.children[plan.acceptor_slot(i)] = Child(plan.acceptor_slot(i), "acceptor", i)
        order = [c for c in self.children.values() if c.kind != "acceptor"]
        order += [c for c in self.children.values() if c.kind == "acceptor"]
        backend = [c for c in order if c.kind != "acceptor"]
        for child in backend:
            self._spawn(child)
        self._wait_ready(backend)
        front = [c for c in order if c.kind == "acceptor"]
        for child in front:
            self._spawn(child)
        self._wait_ready(front)
        self.booted = True
        log.info("nsqmp ready: %d acceptors, %d routers, 1 timer", plan.acceptors, plan.routers)
        self.notifier.ready(f"serving: {plan.acceptors} acceptors, {plan.routers} routers, 1 timer")

    def _wait_ready(self, children: list[Child]) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT
        pending = {c.slot for c in children}
        while pending:
            self._reap()
            for slot in list(pending):
                _, gen, state, _ = self.control.read(slot)
                if state == control.READY and gen == self.children[slot].generation:
                    pending.discard(slot)
            if not pending:
                return
            self._spawn_due()
            self.notifier.beat()
            if time.monotonic() > deadline:
                names = ", ".join(self.children[s].name for s in sorted(pending))
                raise BootError(f"{names} did not start within {BOOT_TIMEOUT:.0f}s")
            if self.signals and any(s in (signal.SIGTERM, signal.SIGINT) for s in self.signals):
                raise BootError("stopped during start-up")
            time.sleep(0.01)

    # -- children ----------------------------------------------------------------------------
    def _make_role(self, child: Child):
        opts, plan = self.opts, self.plan
        if child.kind == "acceptor":
            http = self.http_socks[child.index] if self.http_socks else None
            https = self.https_socks[child.index] if self.https_socks else None
            return Acceptor(opts, plan, child.index, child.generation, self.doorbells, self.control_name,
                            self.tcp_socks[child.index], http, https)
        if child.kind == "router":
            return Router(opts, plan, child.index, child.generation, self.doorbells, self.control_name)
        return Timer(opts, plan, child.generation, self.doorbells, self.control_name)

    def _spawn(self, child: Child) -> None:
        child.generation += 1
        self.control.reset(child.slot, child.generation)
        role = self._make_role(child)
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                die_with_parent(self.pid)  # first: the supervisor may die at any instant
                sched.set_slice(0)  # the default slice again (the role asks for its own)
                signal.set_wakeup_fd(-1)
                os.close(self.wakeup_r)
                os.close(self.wakeup_w)
                self.notifier.close()
                self.lifeline.watch(child.slot, self._listener_fds())
                code = role.run()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                logging.getLogger("nsqmp").exception("%s crashed", child.name)
                code = 3
            finally:
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        child.pid = pid
        child.started = time.monotonic()
        self.by_pid[pid] = child
        log.info("spawned %s (pid %d, generation %d)", child.name, pid, child.generation)

    def _listener_fds(self) -> list[int]:
        """Every listening socket of the broker. Each child keeps them all (only its own
        acceptor slot's are served): whichever child's lifeline watcher runs first after
        the supervisor died shuts every one of them down, so one slow child cannot keep
        the port answering."""
        return [s.fileno() for s in self.tcp_socks + self.http_socks + self.https_socks]

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.by_pid.pop(pid, None)
            if child is None:
                continue
            child.pid = 0
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:
                log.info("%s exited (%s)", child.name, _describe(code))
                continue
            _, gen, state, _ = self.control.read(child.slot)
            ready = state == control.READY and gen == child.generation
            if not self.booted and not ready:
                # a child that cannot start the first time will not start the next: halt
                raise BootError(f"{child.name} failed to start ({_describe(code)}); see the log above")
            now = time.monotonic()
            child.quick_deaths = child.quick_deaths + 1 if now - child.started < QUICK_DEATH else 0
            if child.quick_deaths >= CRASH_LOOP:
                log.warning("%s (pid %d) died: %s", child.name, pid, _describe(code))
                raise BootError(f"{child.name} died {child.quick_deaths} times in a row right after starting; halting")
            delay = restart_delay(self.opts.restart_backoff, child.quick_deaths)
            if not delay:
                log.warning("%s (pid %d) died: %s; starting a replacement", child.name, pid, _describe(code))
                self._spawn(child)
                continue
            log.warning("%s (pid %d) died: %s; starting a replacement in %.3gs (%d in a row within %gs of "
                        "starting)", child.name, pid, _describe(code), delay, child.quick_deaths, QUICK_DEATH)
            child.respawn_at = now + delay

    def _spawn_due(self) -> None:
        """Spawn the children whose respawn backoff has run out."""
        now = time.monotonic()
        for child in self.children.values():
            if child.respawn_at and child.respawn_at <= now and not self.stopping:
                child.respawn_at = 0.0
                self._spawn(child)

    def _next_wake(self) -> float:
        """Seconds the loop may wait in select(): TICK, or less if a respawn falls due."""
        due = [c.respawn_at for c in self.children.values() if c.respawn_at]
        if not due:
            return TICK
        return max(0.0, min(TICK, min(due) - time.monotonic()))

    def _check_heartbeats(self) -> None:
        limit = int(self.opts.heartbeat_timeout * 1e9)
        now = time.monotonic_ns()
        for child in self.children.values():
            if not child.pid:
                continue
            _, gen, state, beat = self.control.read(child.slot)
            if state == control.READY and gen == child.generation and now - beat > limit:
                log.error("%s (pid %d) missed its heartbeat for %.1fs; killing it",
                          child.name, child.pid, (now - beat) / 1e9)
                try:
                    os.kill(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # -- the loop ------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self.stopping:
            try:
                select.select([self.wakeup_r], [], [], self.notifier.wait_limit(self._next_wake()))
            except InterruptedError:
                pass
            try:
                while os.read(self.wakeup_r, 4096):
                    pass
            except BlockingIOError:
                pass
            while self.signals:
                sig = self.signals.pop(0)
                if sig in (signal.SIGTERM, signal.SIGINT):
                    log.info("received %s: stopping", signal.Signals(sig).name)
                    self._stop_children()
                    return
                if sig == signal.SIGHUP:
                    log.info("SIGHUP ignored: nsqmp does not reload its configuration; change run-time "
                             "options with PUT /config/<option>, the rest with a restart")
            self._reap()
            self._spawn_due()
            self._check_heartbeats()
            if self.steering is not None:
                self._steer()
            self.notifier.beat()

    def _steer(self) -> None:
        """Point new TCP connections at the first ready acceptor that is not busy
        (steering.py). One whose heartbeat is late (a stuck loop) counts as not ready."""
        assert self.steering is not None
        now = time.monotonic_ns()
        pids, conns = [], []
        for i in range(self.plan.acceptors):
            child = self.children[self.plan.acceptor_slot(i)]
            ready = False
            if child.pid:
                _, gen, state, beat = self.control.read(child.slot)
                ready = state == control.READY and gen == child.generation and now - beat < STEER_BEAT_LATE_NS
            pids.append(child.pid if ready else 0)
            conns.append(self.control.connections(child.slot))
        self.steering.update(pids, now / 1e9, conns)

    def _stop_children(self) -> None:
        """Acceptors first (they stop taking traffic), then routers, then the timer; a
        pending respawn is cancelled."""
        self.stopping = True
        self.notifier.stopping()
        for child in self.children.values():
            child.respawn_at = 0.0
        for kinds in (("acceptor",), ("router", "timer")):
            group = [c for c in self.children.values() if c.kind in kinds and c.pid]
            for c in group:
                try:
                    os.kill(c.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + STOP_TIMEOUT
            while any(c.pid for c in group) and time.monotonic() < deadline:
                self._reap()
                self.notifier.beat()
                time.sleep(0.02)
            for c in group:
                if c.pid:
                    log.error("%s did not stop in time; killing it", c.name)
                    try:
                        os.kill(c.pid, signal.SIGKILL)
                        os.waitpid(c.pid, 0)
                    except (ProcessLookupError, ChildProcessError):
                        pass
                    c.pid = 0

    def _cleanup(self) -> None:
        for name in self.shm_names:
            shm.unlink(name)
        self.shm_names = []
        for s in getattr(self, "tcp_socks", []) + getattr(self, "http_socks", []) + getattr(self, "https_socks", []):
            s.close()


def restart_delay(backoff: float, quick_deaths: int) -> float:
    """Seconds before respawning a slot whose children died quick_deaths times in a row
    within QUICK_DEATH of their start (0: the last one ran longer). The first is a crash,
    repaired at once; from the second on: backoff, doubled for each more, at most
    BACKOFF_CAP (or backoff itself if larger)."""
    if quick_deaths < 2 or backoff <= 0:
        return 0.0
    return min(backoff * 2 ** (quick_deaths - 2), max(backoff, BACKOFF_CAP))


def _describe(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"
