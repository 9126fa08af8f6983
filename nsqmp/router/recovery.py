"""Rebuilding a router's topics from the files, when it starts (first boot, restart, crash).

For every topic directory this router owns (Plan.router_of(name) == index):
  1. meta.json gives the channels (ids, start points, paused flags);
  2. acks.log gives, per channel id, the positions already finished;
  3. every segment is scanned in (acceptor, seq) order; each record is outstanding for
     each channel that existed when it was published and has no ack for it. Deferred
     records keep their original due time; one already due is ready at once. An
     outstanding record never delivered before is queued as a file range
     (router/filequeue.py), read back when consumers want it, not held as an object.
The last position seen per acceptor stream becomes the topic's high-water mark, so the
PUBLISH descriptors still waiting in the rings for records recovered here are skipped.
What was in flight or REQ'd with a delay comes back ready (at worst an early redelivery);
a message finished after the last ack reached the log is delivered again (a duplicate,
never a loss).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from nsqmp.diskqueue import acklog
from nsqmp.diskqueue import meta as metafile
from nsqmp.diskqueue.layout import list_topics
from nsqmp.diskqueue.segment import ScanStats, parse_name, scan
from nsqmp.layouts import DUE, MESSAGE_HEAD, RECORD_HEAD
from nsqmp.protocol.names import is_ephemeral
from nsqmp.router import retention
from nsqmp.router.readback import Message, read_messages


@dataclass
class Summary:
    topics: int = 0
    channels: int = 0
    messages: int = 0
    deferred: int = 0
    damaged: int = 0  # damaged records skipped (see segment.scan)
    skipped_bytes: int = 0


def _message(payload: bytes, seg, offset: int) -> Message:
    """The Message of the record at offset of seg whose message encoding scan() verified.

    scan() checks every record's CRC and resyncs past damage (read_messages trusts its
    input and does neither), so the records come from scan() and each is parsed by
    read_messages as a record of its own (the due time stays with scan()'s result)."""
    return read_messages(RECORD_HEAD.pack(len(payload), 0) + payload, offset, 1, seg)[0][0][0]


def recover_owned(router) -> Summary:
    """Rebuild every topic this router owns (the module's steps), after taking the
    retention options (the topics made from here on keep finished files with them)."""
    retention.configure(router.links, router.opts)
    summary = Summary()
    for name in list_topics(router.opts.data_path):
        raw = name.encode()
        if is_ephemeral(raw) or router.plan.router_of(raw) != router.index:
            continue
        recover_topic(router, raw, summary)
    return summary


def rescan_acceptor(router, acceptor: int) -> int:
    """Adopt records of `acceptor` found in the files past each owned topic's high-water mark."""
    found = 0
    for name in list_topics(router.opts.data_path):
        raw = name.encode()
        if is_ephemeral(raw) or router.plan.router_of(raw) != router.index:
            continue
        topic = router.topic(raw)
        last = topic.hwm.get(acceptor, (-1, -1))
        seqs = sorted(p[1] for p in (parse_name(f) for f in os.listdir(topic.dir))
                      if p is not None and p[0] == acceptor and p[1] >= last[0])
        for seq in seqs:
            seg = topic.segment(acceptor, seq)
            msgs, nbytes = [], 0
            # the acceptor's new incarnation may be appending to its newest file right now:
            # a record half copied reads as damage, and resyncing past it to a later whole
            # record would move the mark over it, so that neither this scan nor its
            # PUBLISH descriptor ever adopts it. Stop there; the descriptor brings the rest.
            for offset, payload, due in scan(seg.path, resync=seq != seqs[-1]):
                if (seq, offset) <= last:
                    continue
                msgs.append((_message(payload, seg, offset), due))
                nbytes += len(payload) - MESSAGE_HEAD.size
                size = RECORD_HEAD.size + len(payload) + (DUE.size if due else 0)
                topic.count_bytes(seg, size, 1, offset + size)
                topic.hwm[acceptor] = (seq, offset)
            if msgs:
                found += len(msgs)
                topic.adopt(msgs, nbytes)
    return found


def recover_topic(router, name: bytes, summary: Summary) -> None:
    """Rebuild one topic: its channels from meta.json, then what each still has to
    deliver from its segment files less the ack log (the module's steps 1-3)."""
    topic = router.topic(name)
    summary.topics += 1
    meta = metafile.read(topic.dir)
    if meta is not None:
        topic.meta = meta
        topic.paused = meta.paused
        if meta.retention is not None:  # before the scan: it decides which finished files stay
            retention.apply(topic, *meta.retention)
        for cm in meta.channels:
            topic.add_channel(cm.name.encode(), cm.start, cm.id, cm.paused)
            summary.channels += 1
    # kept files (router/retention.py) that no channel may still want are not read
    wanted, known = _kept_files(topic, meta)
    finished, acked = _read_acks(topic.dir, {ch.id for ch in topic.channels.values() if ch.id}, known)
    saved = _take_saved(meta)
    files = sorted(p for p in (parse_name(f) for f in os.listdir(topic.dir)) if p is not None)
    newest = {a: q for a, q in files}  # sorted: the last seq wins
    # routers start before acceptors; a restarted router has live writers, whose newest
    # file may end in a record still being copied: don't resync past that one
    live_writers = router.generation > 1
    scan_of = _TopicScan(topic, finished, saved, summary)
    for acceptor, seq in files:
        seg = topic.segment(acceptor, seq)
        seg.acked = acked.pop((acceptor, seq), 0)
        if (acceptor, seq) in known:
            _known_file(topic, seg, known[acceptor, seq])
        else:
            scan_of.segment(seg, resync=not (live_writers and newest[acceptor] == seq),
                            channels=wanted.get((acceptor, seq)))
        # a segment nobody needs any more (every record finished) goes now, unless it is
        # its acceptor's newest: that one may still be written to
        topic.release(seg, 0)
    topic.dead_acks += sum(acked.values())  # entries of files gone before this start
    if meta is not None and meta.counts:
        topic.restore_counts()  # the numbers /stats showed before the stop, not a recount
    if any(saved.values()):
        topic.save_meta()  # the deferred lists are applied: don't apply them twice
    stats = scan_of.stats
    if stats.damaged:
        router.log.error("%s: skipped %d damaged records (%d bytes) and kept reading after them",
                         name.decode(), stats.damaged, stats.skipped_bytes)
    summary.damaged += stats.damaged
    summary.skipped_bytes += stats.skipped_bytes


def _kept_files(topic, meta) -> tuple[dict, dict]:
    """meta.json's kept files: (file -> the channels that may still want it, for those
    some may; file -> its entry, for those none may: not read at all). A channel may want
    a kept file when its id is K or more (a rewind, or made since) and its start lies
    before the file's end; a first channel (start None) never: its backlog is unfinished
    records, and a kept file has none."""
    wanted: dict = {}
    known: dict = {}
    for entry in (meta.kept if meta is not None else []):
        acceptor, seq, _, end, _, k, _ = entry
        chans = [ch for ch in topic.channels.values()
                 if ch.id >= k and ch.start is not None and ch.start.get(acceptor) is not None
                 and tuple(ch.start[acceptor]) < (seq, end)]
        if chans:
            wanted[acceptor, seq] = chans
        else:
            known[acceptor, seq] = entry
    return wanted, known


def _known_file(topic, seg, entry) -> None:
    """A kept file no channel wants: its figures from meta.json, without reading it."""
    acceptor, seq, records, end, nbytes, _, marks = entry
    topic.count_bytes(seg, nbytes, records, end)
    seg.marks = [(int(o), int(n)) for o, n in marks]
    if (seq, end - 1) > topic.hwm.get(acceptor, (-1, -1)):
        topic.hwm[acceptor] = (seq, end - 1)


def _read_acks(path: str, ids: set[int], known: dict) -> tuple[dict[int, set[tuple[int, int, int]]], dict[tuple[int, int], int]]:
    """The ack log: the positions each channel id of `ids` finished (entries of other ids,
    a deleted channel's or one a rewind replaced, and of the `known` kept files are only
    counted), and the entries per file."""
    finished: dict[int, set[tuple[int, int, int]]] = {}
    acked: dict[tuple[int, int], int] = {}  # ack log entries per file
    for cid, acceptor, seq, offset in acklog.read(path):
        if cid in ids and (acceptor, seq) not in known:
            finished.setdefault(cid, set()).add((acceptor, seq, offset))
        acked[acceptor, seq] = acked.get((acceptor, seq), 0) + 1
    return finished, acked


def _take_saved(meta) -> dict[int, dict[tuple[int, int, int], tuple[int, int]]]:
    """REQ-deferred messages a graceful stop wrote down: position -> (due, attempts), per
    channel, and the attempts of queued messages already delivered before the stop (due
    0). Taken out of the meta: applied once."""
    saved: dict[int, dict[tuple[int, int, int], tuple[int, int]]] = {}
    if meta is not None:
        for cm in meta.channels:
            saved[cm.id] = {(a, q, o): (0, tries) for a, q, o, tries in cm.attempts}
            saved[cm.id].update({(a, q, o): (due, tries) for a, q, o, due, tries in cm.deferred})
            cm.deferred = []
            cm.attempts = []
    return saved


class _TopicScan:
    """What recovering one topic's segments needs, file after file."""

    def __init__(self, topic, finished: dict, saved: dict, summary: Summary) -> None:
        self.topic = topic
        self.channels = list(topic.channels.values())
        self.finished = finished
        self.saved = saved
        self.summary = summary
        self.paused_at = topic.meta.paused_at if topic.paused else None
        self.now = time.time_ns()
        self.stats = ScanStats()

    def segment(self, seg, resync: bool, channels: list | None = None) -> None:
        """Every record of seg goes where it is outstanding: held at the topic, or in each
        channel (of `channels`: those that may want a kept file) that has not finished it
        (as a file range when never delivered)."""
        topic, summary, now = self.topic, self.summary, self.now
        channels = self.channels if channels is None else channels
        acceptor, seq = seg.acceptor, seg.seq
        per_channel: dict = {ch: [] for ch in channels}
        tries: dict = {ch: {} for ch in channels}
        paused_at = self.paused_at
        head, due_size = RECORD_HEAD.size, DUE.size  # a record's bytes past its payload
        for offset, payload, due in scan(seg.path, self.stats, resync):
            size = head + len(payload) + (due_size if due else 0)
            m = None  # a Message only for what does not wait as a file range
            topic.hwm[acceptor] = (seq, offset)
            topic.count_bytes(seg, size, 1, offset + size)
            due = due if due > now else 0
            summary.messages += 1
            if due:
                summary.deferred += 1
                m = _message(payload, seg, offset)
            emptied = topic.meta.backlog_start.get(acceptor)
            # held at the topic: no channel yet, or published after a pause still in force
            if not channels or (paused_at is not None and (seq, offset) > paused_at.get(acceptor, (-1, -1))):
                if emptied is None or (seq, offset) > tuple(emptied):
                    if m is not None:
                        topic.backlog.append((m, due))
                    else:
                        topic.backlog_pending.add(seg, offset, offset + size, 1)
                    seg.refs += 1
                continue
            pos = (acceptor, seq, offset)
            for ch in channels:
                # a first channel (start None) took the backlog, less what /topic/empty dropped
                began = emptied if ch.start is None else ch.start.get(acceptor)
                if began is not None and (seq, offset) <= tuple(began):
                    continue
                if pos in self.finished.get(ch.id, ()):
                    continue
                kept = self.saved.get(ch.id, {}).get(pos)
                if kept is None and not due:
                    # outstanding, never delivered: it waits in the file (router/filequeue.py)
                    ch.pending.add(seg, offset, offset + size, 1)
                    ch.message_count += 1
                    seg.refs += 1
                    continue
                if m is None:
                    m = _message(payload, seg, offset)
                if kept is not None:
                    tries[ch][m] = kept[1]
                    if kept[0] > now:
                        per_channel[ch].append((m, kept[0]))
                        continue
                per_channel[ch].append((m, due))
        for ch, entries in per_channel.items():
            if entries:
                ch.enqueue(entries, tries[ch])
