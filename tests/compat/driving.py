"""The pytest side of the client drivers: run one, read its events, judge them.

A driver (drivers/*_driver.py, js/driver.js) is a subprocess in its own process group;
everything it prints is a JSON line (drivers/cli.py). The checks here are shared by the
per-library test modules, so every library is held to the same assertions.
"""
from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson

from tests.harness import Broker, wait_for

ROOT = Path(__file__).resolve().parents[2]
JS_DIR = Path(__file__).resolve().parent / "js"
ROUNDTRIP_COUNT = 10_000


def command(library: str) -> list[str]:
    if library == "nsqjs":
        return ["node", str(JS_DIR / "driver.js")]
    return [sys.executable, "-m", f"tests.compat.drivers.{library}_driver"]


class Driver:
    """One running driver: its events arrive on a queue filled by a reader thread."""

    def __init__(self, library: str, address: str, scenario: str, topic: str, **options) -> None:
        argv = command(library) + ["--address", address, "--scenario", scenario, "--topic", topic]
        for key, value in options.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                argv.append(flag)
            elif value not in (False, None):
                argv += [flag, str(value)]
        self.argv = argv
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.events: queue.Queue = queue.Queue()
        self.stderr: list[bytes] = []
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.put(orjson.loads(line))
            except orjson.JSONDecodeError:
                self.events.put({"event": "unparsable", "line": line.decode(errors="replace")})
        self.events.put({"event": "eof"})

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def expect(self, event: str, timeout: float = 60.0) -> dict:
        """The next event, which must be `event`."""
        try:
            got = self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no {event!r} from {self.argv} in {timeout}s; stderr:\n{self.stderr_text()}")
        assert got["event"] == event, f"expected {event!r}, got {str(got)[:500]}; stderr:\n{self.stderr_text()}"
        return got

    def stderr_text(self) -> str:
        return b"".join(self.stderr).decode(errors="replace")[-4000:]

    def release(self) -> None:
        """Write the line a holding driver waits for."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 15.0) -> int:
        """Wait for the driver to exit (it must print ``done`` and exit 0)."""
        self.expect("done", timeout)
        code = self.proc.wait(timeout)
        assert code == 0, f"driver exited {code}; stderr:\n{self.stderr_text()}"
        return code

    def stop(self) -> None:
        """End the driver's process group (ours) if it is still there; close the pipes."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        for t in self._threads:
            t.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass


def channel_stats(broker: Broker, topic: str, channel: str = "compat") -> dict | None:
    for t in broker.stats(topic=topic)["topics"]:
        if t["topic_name"] != topic:
            continue
        for c in t["channels"]:
            if c["channel_name"] == channel:
                return c
    return None


def check_roundtrip(broker: Broker, library: str, topic: str, feature: str | None = None,
                    count: int = ROUNDTRIP_COUNT) -> None:
    """`count` bodies published by the library and consumed by it: every one exactly once,
    and the broker saw the consumer connection with `feature` (tls, snappy, deflate) on."""
    options = {feature: True} if feature else {}
    d = Driver(library, broker.tcp_address, "roundtrip", topic, count=count, prefix=topic, **options)
    try:
        published = d.expect("published", 120)
        assert published["errors"] == [], published["errors"][:5]
        received = d.expect("received", 120)
        d.expect("holding", 10)
        expected = {f"{topic}-{i:06d}" for i in range(count)}
        got = collections.Counter(received["bodies"])
        missing = expected - got.keys()
        unexpected = got.keys() - expected
        dupes = [b for b, n in got.items() if n > 1]
        assert not missing, f"{len(missing)} of {count} missing, e.g. {sorted(missing)[:3]}"
        assert not unexpected, sorted(unexpected)[:3]
        assert not dupes, f"{len(dupes)} duplicated, e.g. {dupes[:3]}"
        assert len(received["bodies"]) == count
        assert {int(k): v for k, v in received["attempts"].items()} == {1: count}
        # the connection was live: the broker knows the consumer and its negotiated features
        chan = wait_for(lambda: channel_stats(broker, topic), 10, what="channel in /stats")
        assert chan["client_count"] >= 1, chan
        for client in chan["clients"]:
            assert client["tls"] is (feature == "tls"), client
            assert client["snappy"] is (feature == "snappy"), client
            assert client["deflate"] is (feature == "deflate"), client
        assert (chan["message_count"], chan["depth"], chan["in_flight_count"]) == (count, 0, 0), chan
        assert (chan["requeue_count"], chan["timeout_count"]) == (0, 0), chan
        d.release()
        d.finish()
    finally:
        d.stop()


def check_redelivery(broker: Broker, library: str, topic: str, scenario: str, count: int = 3,
                     msg_timeout_ms: int = 0, **options) -> list[dict]:
    """requeue: attempt 1 requeued (REQ 0) comes back with attempts 2. timeout: attempt 1
    left unanswered past msg_timeout comes back with attempts 2, not before the timeout."""
    d = Driver(library, broker.tcp_address, scenario, topic, count=count, prefix=topic,
               msg_timeout_ms=msg_timeout_ms or None, deadline=30, **options)
    try:
        result = d.expect("deliveries", 60)
        d.finish()
    finally:
        d.stop()
    assert result["errors"] == [], result["errors"]
    first = "req" if scenario == "requeue" else "hold"
    by_body: dict[str, list[dict]] = collections.defaultdict(list)
    for item in result["items"]:
        by_body[item["body"]].append(item)
    assert sorted(by_body) == [f"{topic}-{i:06d}" for i in range(count)], result["items"]
    for body, items in by_body.items():
        assert [(i["attempts"], i["action"]) for i in items] == [(1, first), (2, "fin")], items
        if scenario == "timeout":
            waited = items[1]["t"] - items[0]["t"]
            # the message must not come back before its msg_timeout (minus the timer's slack)
            assert waited >= 0.8 * (msg_timeout_ms or 1000) / 1000, items
    chan = channel_stats(broker, topic)
    assert chan is not None
    key = "requeue_count" if scenario == "requeue" else "timeout_count"
    assert chan[key] == count, chan
    assert (chan["depth"], chan["in_flight_count"]) == (0, 0), chan
    return result["items"]


def check_heartbeat_disconnect(broker: Broker, library: str, topic: str, heartbeat_ms: int = 1000) -> float:
    """A consumer with heartbeat_interval `heartbeat_ms` stays connected while it answers
    heartbeats; once the process is stopped (SIGSTOP: it answers nothing) the broker
    drops it after about two intervals. Returns seconds from SIGSTOP to gone."""
    d = Driver(library, broker.tcp_address, "heartbeat", topic, heartbeat_ms=heartbeat_ms)
    try:
        d.expect("subscribed", 30)
        wait_for(lambda: (channel_stats(broker, topic) or {}).get("client_count") == 1, 10,
                 what="the consumer in /stats")
        first = channel_stats(broker, topic)["clients"][0]["remote_address"]
        # answering: the same connection is still there after three intervals (the time is what is tested)
        time.sleep(3 * heartbeat_ms / 1000)
        clients = channel_stats(broker, topic)["clients"]
        assert [c["remote_address"] for c in clients] == [first], "dropped although it answers heartbeats"
        os.killpg(d.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        wait_for(lambda: channel_stats(broker, topic)["client_count"] == 0, 6 * heartbeat_ms / 1000 + 5,
                 what="the silent consumer to be disconnected")
        gone_after = time.monotonic() - stopped
        # nsqd's read deadline is two intervals after the last command (slack for /stats polling)
        assert gone_after <= 2 * heartbeat_ms / 1000 + 1.5, gone_after
        # how the library copes with the lost connection is not the broker's business:
        # resume it and end it
        os.killpg(d.proc.pid, signal.SIGCONT)
    finally:
        d.stop()
    return gone_after
