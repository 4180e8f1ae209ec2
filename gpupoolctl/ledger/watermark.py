"""The durable watermark: how many bytes of the journal a completed sync is known to cover.

Writers append under the lock and fdatasync after letting it go (group commit: writers
that queue behind a sync share the next one). An acknowledged record still implies that
every earlier record is durable, because fdatasync covers all of the file's dirty pages;
but a power cut may now leave several unsynced records, torn or missing anywhere in them,
not only in the last line. Every record from the first damaged one on was never
acknowledged (a sync that completed after it was written would have kept it whole), so
the next writer may cut the journal there, but only above the watermark: damage below it
is on bytes a sync already covered, which a crash cannot touch, and stays real damage
(writes refused until `ledger repair`).

P.synced holds one fixed-size, checksummed line naming the journal it describes (device,
inode, snapshot seq: compaction and repair put a new journal in place) and the end offset.
A journal is named before anything is appended to it, under the ledger's write lock and
after a sync of the folder (compaction and repair name the journal they put in place; the
first writer to a journal nobody named, one just created or left by a compaction killed
before naming it, names it): so the watermark, once synced, names the journal at P, and
that journal's name is durable. After each sync the writer raises it, never lowers it, and
only while it names the same journal. It is synced itself when a journal is named and then
every SYNC_SPAN bytes, so after a power cut it is stale by at most that much, and a stale
value is only lower (more lenient above it, never wrong below it). No valid watermark for
this journal (one a person edited, or P.synced unwritable) means that no byte is known to
be synced: every damage then counts as real, as before group commit.
"""

from __future__ import annotations

import fcntl
import json
import os
import zlib
from contextlib import suppress
from dataclasses import dataclass

from gpupoolctl.hw import sharing
from gpupoolctl.ledger import fileio
from gpupoolctl.ledger.paths import LedgerPaths

SIZE = 128  # one line, padded: an overwrite fits one disk sector and leaves no old tail
SYNC_SPAN = 256 << 10
_CRC_KEY = b',"crc":"'


@dataclass(frozen=True)
class Mark:
    dev: int
    ino: int
    snapshot_seq: int
    end: int

    def same_journal(self, other: Mark) -> bool:
        return (self.dev, self.ino, self.snapshot_seq) == (
            other.dev,
            other.ino,
            other.snapshot_seq,
        )


def encode(mark: Mark) -> bytes:
    body = json.dumps(
        {"v": 1, "dev": mark.dev, "ino": mark.ino, "snap": mark.snapshot_seq, "end": mark.end},
        separators=(",", ":"),
    )[:-1].encode()
    line = b'%s,"crc":"%08x"}' % (body, zlib.crc32(body))
    if len(line) >= SIZE:
        raise ValueError("watermark line too long")
    return line.ljust(SIZE - 1) + b"\n"


def decode(raw: bytes) -> Mark | None:
    """The mark, or None for anything that is not one whole, checksummed line."""
    line = raw.rstrip(b" \n")
    cut = line.rfind(_CRC_KEY)
    if cut < 0 or line[cut + len(_CRC_KEY) :] != b'%08x"}' % zlib.crc32(line[:cut]):
        return None
    try:
        body = json.loads(line)
        mark = Mark(int(body["dev"]), int(body["ino"]), int(body["snap"]), int(body["end"]))
    except (ValueError, KeyError, TypeError):
        return None
    return mark if mark.end >= 0 else None


def read(paths: LedgerPaths) -> Mark | None:
    try:
        with open(paths.watermark, "rb") as stream:
            return decode(stream.read(SIZE))
    except OSError:
        return None


def durable_end(paths: LedgerPaths, dev: int, ino: int, snapshot_seq: int) -> int | None:
    """Bytes of this journal known to be synced; None when nothing is known (strict)."""
    mark = read(paths)
    if mark is None or (mark.dev, mark.ino, mark.snapshot_seq) != (dev, ino, snapshot_seq):
        return None
    return mark.end


class Watermark:
    """A writer's handle on P.synced, opened on first use and kept open."""

    def __init__(self, paths: LedgerPaths) -> None:
        self.paths = paths
        self._fd: int | None = None
        self._pid = 0

    def _open(self) -> int:
        # A forked child opens its own: sharing the parent's open file description would make
        # their flocks one, and two read-compare-writes at once could lower the mark.
        if self._fd is None or self._pid != os.getpid():
            existed = self.paths.watermark.exists()
            self._fd = fileio.open_file(
                self.paths.watermark,
                os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                sharing.file_mode(self.paths.folder),
            )
            self._pid = os.getpid()
            if not existed:
                fileio.sync_dir(self.paths.folder)
        return self._fd

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def __del__(self) -> None:
        # A handle dropped without close() (a library caller's, a test's) must not keep its
        # descriptor for the life of the process: a long-running one would run out, and
        # select() (paramiko's) refuses descriptors above 1023.
        with suppress(Exception):  # at interpreter exit there is nothing left to tell
            self.close()

    def names(self, dev: int, ino: int, snapshot_seq: int) -> bool:
        """Whether the watermark names this journal (False when it cannot be read)."""
        try:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                current = decode(os.pread(fd, SIZE, 0))
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            return False
        return current is not None and current.same_journal(Mark(dev, ino, snapshot_seq, 0))

    def advance(self, mark: Mark) -> None:
        """After a sync of `mark.end` bytes returned: raise the watermark to it, if it names
        the same journal and is lower. A watermark of another journal is left alone: the
        journal at P was named before anything was appended to it (`reset`, under the
        ledger's write lock), so another name means that a compaction or repair has put a
        newer journal there since this writer's append."""
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)  # read-compare-write: never lower it
        try:
            current = decode(os.pread(fd, SIZE, 0))
            if current is None or not current.same_journal(mark) or current.end >= mark.end:
                return
            fileio.write_at(fd, encode(mark), 0)
            if current.end // SYNC_SPAN != mark.end // SYNC_SPAN:
                fileio.sync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def reset(self, mark: Mark) -> None:
        """Name a journal whose name and `mark.end` bytes are durable: one just put in place
        whole and synced (compaction, repair), or one named before its first append
        (Ledger). The caller holds the ledger's write lock."""
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            fileio.write_at(fd, encode(mark), 0)
            fileio.sync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
