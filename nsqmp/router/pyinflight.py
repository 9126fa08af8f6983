"""Pure-Python twins of ``InFlightMap`` (``native/inflight.c``) and ``Flight``
(``native/flight.h``): same API, same results, same field names.

A channel's messages in flight, by message id: (message, attempts, flight) each.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from nsqmp.diskqueue.acklog import pack_file

__all__ = ["Flight", "InFlightMap"]


@dataclass(slots=True, eq=False)
class Flight:
    """The messages one delivery pass handed to one consumer: one deadline, one timer entry.

    A message leaves its flight when it is finished, requeued or touched (a TOUCH gives it
    a flight of its own); the timer entry is disarmed when the last one has left, and the
    flight's messages still in it time out together when it fires. Which members are
    still in it is the channel's InFlightMap's to say (each entry names its flight).
    """
    token: int
    consumer: Any  # the router's Consumer
    deadline: int  # CLOCK_MONOTONIC ns
    delivered: int  # CLOCK_MONOTONIC ns; TOUCH never moves a deadline past delivered + max-msg-timeout
    live: int = 0  # members still in this flight
    # what it went out with, flat: Message, attempts, Message, attempts, ... (the map's
    # land/expire put them back in the queue from this; see native/inflight.c)
    members: list = field(default_factory=list)


def _check(members: list) -> None:
    if not isinstance(members, list) or len(members) % 2:
        raise TypeError("members must be a list of message, attempts, ...")


class InFlightMap:
    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map: dict[bytes, tuple] = {}  # id -> (message, attempts, flight)

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, msg_id: object) -> bool:
        return msg_id in self._map

    def get(self, msg_id: bytes) -> tuple | None:
        """(message, attempts, flight) of the message in flight with this id, or None."""
        return self._map.get(msg_id)

    def put(self, message, attempts: int, flight) -> None:
        """message.id is in flight in `flight` with `attempts` (replacing any entry of that id)."""
        if not isinstance(message.id, bytes) or len(message.id) != 16:
            raise ValueError("a message id must be 16 bytes")
        if not 0 <= attempts <= 0xFFFFFFFF:
            raise OverflowError("attempts does not fit in 32 bits")
        self._map[message.id] = (message, attempts, flight)

    def remove(self, msg_id: bytes) -> None:
        """Takes the message with this id out of flight; KeyError if it is not in flight."""
        del self._map[msg_id]

    def move(self, msg_id: bytes, flight) -> None:
        """The message with this id is now in `flight` (TOUCH); KeyError if not in flight."""
        message, attempts, _ = self._map[msg_id]
        self._map[msg_id] = (message, attempts, flight)

    @property
    def stale(self) -> int:
        """Entries kept for timed-out messages not yet in flight again: none here (expire()
        removes them at once); the native map keeps them to spare the lookups."""
        return 0

    def fly(self, ready: deque, n: int, flight, members: list, out: list | None) -> int:
        """One delivery pass for one consumer: up to n entries from the left of `ready`
        go in flight in `flight` with attempts + 1; message and attempts + 1 are appended
        to the flat list `members`, (message, attempts + 1) to `out` (None: not made;
        pack_members frames them from `members`). Returns how many."""
        took = 0
        while took < n and ready:
            message, attempts = ready.popleft()
            attempts += 1
            self.put(message, attempts, flight)
            members += (message, attempts)
            if out is not None:
                out.append((message, attempts))
            took += 1
        return took

    def land(self, members: list, flight, ready: deque) -> int:
        """Every message of the flat list `members` (message, attempts, ...) still in flight
        in `flight` leaves it and is appended to `ready` as (message, attempts), in
        members' order. Returns how many."""
        _check(members)
        landed = 0
        for message in members[::2]:
            entry = self._map.get(message.id)
            if entry is not None and entry[0] is message and entry[2] is flight:
                del self._map[message.id]
                ready.append((message, entry[1]))
                landed += 1
        return landed

    def expire(self, members: list, flight, ready: deque) -> int:
        """land() for a flight every member of which is still in it. Returns how many."""
        return self.land(members, flight, ready)

    def forget(self, messages: list) -> None:
        """Messages that left the queue without flying again: nothing to do here."""
        if not isinstance(messages, list):
            raise TypeError("messages must be a list")

    def alive(self, members: list, flight) -> list:
        """The members of the flat list `members` whose message is still in flight in
        `flight`, in order, as a flat list."""
        _check(members)
        held = self._map
        out: list = []
        for i in range(0, len(members), 2):
            m = members[i]
            if (e := held.get(m.id)) is not None and e[0] is m and e[2] is flight:
                out += members[i:i + 2]
        return out

    def finish(self, ids, start: int, consumer, bad: list, emptied: list, channel: int | None = None,
               acks: bytearray | None = None) -> tuple[list, list]:
        """FIN of the 16-byte ids packed in `ids` from `start`, in order: each one in
        flight in a flight of `consumer` leaves it (a flight whose `live` count reaches 0
        is appended to `emptied`); any other id is appended to `bad`. Returns (messages,
        runs): the finished messages in order, and [segment, [offset, ...]] for each run
        of consecutive messages of one segment (those without a segment left out).

        With a channel id and a bytearray `acks` the files' accounting is done here too
        (native/finrun.h): returns (messages, drained), see settle_runs."""
        if acks is not None:
            if channel is None or not 0 <= channel <= 0xFFFF:
                raise OverflowError("a channel id is a u16")
            messages, runs = self.finish(ids, start, consumer, bad, emptied)
            return messages, settle_runs(runs, channel, acks)
        held = self._map
        messages: list = []
        runs: list = []
        for pos in range(max(0, start), len(ids) - 15, 16):
            msg_id = bytes(ids[pos:pos + 16])
            entry = held.get(msg_id)
            if entry is None or entry[2].consumer is not consumer:
                bad.append(msg_id)
                continue
            del held[msg_id]
            message, _, flight = entry
            flight.live -= 1
            if not flight.live:
                emptied.append(flight)
            messages.append(message)
            segment = message.segment
            if segment is None:
                continue
            if not runs or runs[-1][0] is not segment:
                runs.append([segment, []])
            runs[-1][1].append(message.offset)
        return messages, runs

    def entries(self) -> list:
        """Every (message, attempts, flight) in flight, in no particular order."""
        return list(self._map.values())

    def clear(self) -> None:
        """Nothing is in flight any more."""
        self._map.clear()


def settle_runs(runs: list, channel: int, acks: bytearray) -> list:
    """The files' accounting of finish()'s runs (twin of native/finrun.c): the ack log
    entries of a durable channel (id != 0) appended to acks, each segment's refs (and
    acked, when durable) updated; the segments whose refs a run took to 0 or below."""
    drained = []
    for segment, offsets in runs:
        n = len(offsets)
        if channel:
            acks += pack_file(channel, segment.acceptor, segment.seq, offsets)
            segment.acked += n
        segment.refs -= n
        if segment.refs <= 0 < segment.refs + n:
            drained.append(segment)
    return drained
