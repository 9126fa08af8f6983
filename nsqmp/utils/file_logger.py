"""One topic's output file for ``nsqmp to-file``: naming, rotation, gzip, sync and the
move from --work-dir to --output-dir, as nsq_to_file's FileLogger does them.

A message is FINished only after the file holding it was synced (fsync; with --gzip the
gzip member is closed first, so the file ends with a complete member whose trailer
checks everything acknowledged). The caller (nsqmp.utils.to_file) keeps the written,
not yet FINished messages and finishes them after sync() or close() return.
"""
from __future__ import annotations

import datetime
import gzip
import logging
import os
import socket
import time
from types import SimpleNamespace
from typing import BinaryIO

log = logging.getLogger("nsqmp.utils")

# jehiah/go-strftime, as nsq_to_file copies it: these codes, anything else kept as is
_STRFTIME = set("BbmAadHIMSYypZz%")


def strftime(fmt: str, when: datetime.datetime) -> str:
    """nsq_to_file's strftime: the codes Go's copy knows, the rest literally."""
    out = []
    i = 0
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt) and fmt[i + 1] in _STRFTIME:
            out.append(when.strftime("%" + fmt[i + 1]) if fmt[i + 1] != "%" else "%")
            i += 2
            continue
        out.append(fmt[i])
        i += 1
    return "".join(out)


def filename_format(opts: SimpleNamespace, topic: str) -> str:
    """computeFilenameFormat: <TOPIC>, <HOST>, <PID> replaced; <REV> required with gzip,
    rotation or a work dir, dropped otherwise; ``.gz`` added with gzip. ValueError if
    <REV> is missing where it is required."""
    hostname = socket.gethostname()
    short = hostname.split(".")[0]
    identifier = short
    if opts.host_identifier:
        identifier = opts.host_identifier.replace("<SHORT_HOST>", short).replace("<HOSTNAME>", hostname)
    fmt = opts.filename_format
    if opts.gzip or opts.rotate_size > 0 or opts.rotate_interval > 0 or opts.work_dir != opts.output_dir:
        if "<REV>" not in fmt:
            raise ValueError("missing <REV> in --filename-format when gzip, rotation, or work dir enabled")
    else:
        fmt = fmt.replace("<REV>", "")
    fmt = fmt.replace("<TOPIC>", topic).replace("<HOST>", identifier).replace("<PID>", str(os.getpid()))
    if opts.gzip and not fmt.endswith(".gz"):
        fmt += ".gz"
    return fmt


class FileLogger:
    """The file one topic is written to."""

    def __init__(self, opts: SimpleNamespace, topic: str) -> None:
        self.opts = opts
        self.topic = topic
        self.fmt = filename_format(opts, topic)
        self.tag = f"[{topic}/{opts.channel}]"
        self.out: BinaryIO | None = None
        self.writer: BinaryIO | gzip.GzipFile | None = None
        self.path = ""
        self.filename = ""  # the current name, <REV> not yet replaced
        self.open_time = 0.0
        self.filesize = 0
        self.rev = 0
        self._named_at = -1
        self._name = ""

    def current_filename(self) -> str:
        """The name for now (<DATETIME> filled in; formatted once a second at most: it is
        asked for each message)."""
        second = int(time.time())
        if second != self._named_at:
            self._named_at = second
            self._name = self.fmt.replace("<DATETIME>", strftime(self.opts.datetime_format, datetime.datetime.now()))
        return self._name

    def needs_rotation(self, now: float) -> bool:
        """No file yet, a new <DATETIME>, --rotate-interval passed or --rotate-size exceeded."""
        if self.out is None:
            return True
        filename = self.current_filename()
        if filename != self.filename:
            log.info("%s new filename %s, rotating...", self.tag, filename)
            return True
        if self.opts.rotate_interval > 0 and now - self.open_time > self.opts.rotate_interval:
            log.info("%s %.1fs since last open, rotating...", self.tag, now - self.open_time)
            return True
        if self.opts.rotate_size > 0 and self.filesize > self.opts.rotate_size:
            log.info("%s %s currently %d bytes (> %d), rotating...", self.tag, self.path, self.filesize,
                     self.opts.rotate_size)
            return True
        return False

    def write(self, body: bytes) -> None:
        """The message and a newline (counted in uncompressed bytes, as nsq counts them)."""
        assert self.writer is not None
        self.writer.write(body + b"\n")
        self.filesize += len(body) + 1

    def sync(self) -> None:
        """Everything written is on disk: with gzip the member is closed (its trailer
        written) and a new one started."""
        if self.out is None:
            return
        if isinstance(self.writer, gzip.GzipFile):
            self.writer.close()
            self.out.flush()
            os.fsync(self.out.fileno())
            self.writer = gzip.GzipFile(fileobj=self.out, mode="wb", compresslevel=self.opts.gzip_level)
        else:
            self.out.flush()
            os.fsync(self.out.fileno())

    def close(self) -> None:
        """Finish the gzip member, fsync, close; move the file from the work dir."""
        if self.out is None:
            return
        if isinstance(self.writer, gzip.GzipFile):
            self.writer.close()
        self.out.flush()
        os.fsync(self.out.fileno())
        self.out.close()
        self.out = self.writer = None
        if self.opts.work_dir != self.opts.output_dir:
            self._move(self.path)

    def _move(self, src: str) -> None:
        rel = os.path.relpath(src, self.opts.work_dir)
        dst = os.path.join(self.opts.output_dir, rel)
        log.info("%s moving finished file %s to %s", self.tag, src, dst)
        if _exclusive_rename(src, dst):
            return
        template = os.path.join(os.path.dirname(dst), os.path.basename(self.filename))
        rev = self.rev + 1
        while True:
            log.warning("%s destination file already exists: %s", self.tag, dst)
            dst = template.replace("<REV>", f"-{rev:06d}")
            if _exclusive_rename(src, dst):
                log.info("%s renamed finished file %s to %s to avoid overwrite", self.tag, src, dst)
                return
            rev += 1

    def update_file(self, now: float) -> None:
        """Close the current file and open the next (a new name, or the next <REV>)."""
        self.close()
        filename = self.current_filename()
        self.rev = 0 if filename != self.filename else self.rev + 1
        self.filename = filename
        self.open_time = now
        full = os.path.join(self.opts.work_dir, filename)
        os.makedirs(os.path.dirname(full) or ".", mode=0o770, exist_ok=True)
        exclusive = self.opts.gzip or self.opts.rotate_interval > 0
        while True:
            path = full.replace("<REV>", f"-{self.rev:06d}")
            if self.opts.work_dir != self.opts.output_dir:
                final = os.path.join(self.opts.output_dir, os.path.relpath(path, self.opts.work_dir))
                os.makedirs(os.path.dirname(final) or ".", mode=0o770, exist_ok=True)
                if os.path.exists(final):
                    log.warning("%s output file already exists: %s", self.tag, final)
                    self.rev += 1
                    continue
            flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_APPEND)
            try:
                fd = os.open(path, flags, 0o666)
            except FileExistsError:
                log.warning("%s working file already exists: %s", self.tag, path)
                self.rev += 1
                continue
            log.info("%s opening %s", self.tag, path)
            self.filesize = os.fstat(fd).st_size
            if self.opts.rotate_size > 0 and self.filesize > self.opts.rotate_size:
                log.info("%s %s currently %d bytes (> %d), rotating...", self.tag, path, self.filesize,
                         self.opts.rotate_size)
                os.close(fd)
                self.rev += 1
                continue
            break
        self.path = path
        self.out = os.fdopen(fd, "ab")
        self.writer = (gzip.GzipFile(fileobj=self.out, mode="wb", compresslevel=self.opts.gzip_level)
                       if self.opts.gzip else self.out)


def _exclusive_rename(src: str, dst: str) -> bool:
    """link + unlink: never replaces dst. False if dst exists."""
    try:
        os.link(src, dst)
    except FileExistsError:
        return False
    os.remove(src)
    return True
