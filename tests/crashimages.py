"""Crash images of a ledger: run real writers through a recording layer, then rebuild what a
power cut after any recorded step could leave on disk.

The ledger reaches the disk only through gpupoolctl.ledger.fileio; `Recorder` wraps those
functions, keeps every write, truncate and sync of the journal and of its watermark in one
global order, and lets the writers' own code run unchanged (real flock, real files). A sync
is recorded but not performed: durability is what the images model, and skipping the real
fdatasync keeps the run fast.

The model of a power cut after step i, per file:
* bytes written before the file's last sync (up to i) are there, exactly;
* of the bytes written after it, each 512-byte sector independently arrived, arrived in
  part (a prefix, zeros after), or did not arrive (zeros); the file's size may be anything
  from the synced size to the written size;
* the watermark file holds its content as of its last sync or any later write (one sector,
  written whole), or is absent if it was never synced.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.ledger import fileio, watermark
from gpupoolctl.ledger.paths import LedgerPaths

SECTOR = 512
SYNC_PAUSE_S = 0.002  # long enough for other writers to append behind a sync
WATERMARK_SIZE = watermark.SIZE


@dataclass
class Event:
    kind: str  # write | truncate | sync | ack
    file: str  # journal | watermark | other | "" (ack)
    offset: int = 0
    data: bytes = b""
    ack: Any = None


@dataclass
class Recorder:
    paths: LedgerPaths
    events: list[Event] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _name(self, fd: int) -> str:
        st = os.fstat(fd)
        for name, path in (("journal", self.paths.journal), ("watermark", self.paths.watermark)):
            try:
                other = os.stat(path)
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino):
                return name
        return "other"

    def append(self, fd: int, data: bytes) -> None:
        with self._lock:
            offset = os.fstat(fd).st_size
            self._real_append(fd, data)
            self.events.append(Event("write", self._name(fd), offset, bytes(data)))

    def write_at(self, fd: int, data: bytes, offset: int) -> None:
        with self._lock:
            self._real_write_at(fd, data, offset)
            self.events.append(Event("write", self._name(fd), offset, bytes(data)))

    def sync(self, fd: int) -> None:
        # A sync covers what was written when it began; while it runs (a pause here, with
        # the other writers free to append) it covers nothing more.
        with self._lock:
            name = self._name(fd)
            covered = os.fstat(fd).st_size
            content = os.pread(fd, WATERMARK_SIZE, 0) if name == "watermark" else b""
        if name == "journal":
            time.sleep(SYNC_PAUSE_S)
        with self._lock:
            self.events.append(Event("sync", name, covered, content))

    def truncate(self, fd: int, size: int) -> None:
        with self._lock:
            self._real_truncate(fd, size)
            self.events.append(Event("truncate", self._name(fd), size))

    def ack(self, what: Any) -> None:
        """A writer's call returned: what it wrote is acknowledged from here on."""
        with self._lock:
            self.events.append(Event("ack", "", ack=what))

    @contextmanager
    def installed(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
        self._real_append = fileio.append
        self._real_write_at = fileio.write_at
        self._real_truncate = fileio.truncate
        for name in ("append", "write_at", "sync", "truncate"):
            monkeypatch.setattr(fileio, name, getattr(self, name))
        try:
            yield self
        finally:
            monkeypatch.undo()


@dataclass
class FileAt:
    """One file as of a step: what was written, what a sync covered."""

    content: bytearray = field(default_factory=bytearray)
    synced: int = 0  # journal: bytes covered by the last sync
    versions: list[bytes] = field(default_factory=list)  # watermark: since its last sync
    durable: bytes | None = None  # watermark: content as of its last sync


def replay(events: list[Event], upto: int) -> tuple[FileAt, FileAt, list[Any]]:
    """Journal, watermark and the acknowledgements after events[:upto]."""
    journal_file, mark_file, acks = FileAt(), FileAt(), []
    for event in events[:upto]:
        if event.kind == "ack":
            acks.append(event.ack)
            continue
        target = {"journal": journal_file, "watermark": mark_file}.get(event.file)
        if target is None:
            continue
        if event.kind == "write":
            end = event.offset + len(event.data)
            if len(target.content) < end:
                target.content.extend(b"\0" * (end - len(target.content)))
            target.content[event.offset : end] = event.data
            if target is mark_file:
                target.versions.append(bytes(target.content))
        elif event.kind == "truncate":
            del target.content[event.offset :]
            target.synced = min(target.synced, event.offset)
        elif event.kind == "sync":
            target.synced = max(target.synced, min(event.offset, len(target.content)))
            if target is mark_file:
                target.durable = event.data
                target.versions = []  # its writes and sync happen under its own flock
    return journal_file, mark_file, acks


def crash_journal(file: FileAt, rng: random.Random) -> bytes:
    content = bytes(file.content)
    synced = min(file.synced, len(content))
    size = rng.randint(synced, len(content))
    image = bytearray(content[:size])
    for start in range(synced - synced % SECTOR, size, SECTOR):
        low, high = max(start, synced), min(start + SECTOR, size)
        fate = rng.random()
        if fate < 0.5:
            continue  # arrived
        cut = low if fate < 0.8 else rng.randint(low, high)  # nothing, or a prefix
        image[cut:high] = b"\0" * (high - cut)
    return bytes(image)


def crash_watermark(file: FileAt, rng: random.Random) -> bytes | None:
    choices = [file.durable, *file.versions]
    return rng.choice(choices)


def write_image(
    folder: Path,
    original: LedgerPaths,
    journal_bytes: bytes,
    mark_bytes: bytes | None,
) -> LedgerPaths:
    """The image as files; a watermark that named the original journal names the image's."""
    folder.mkdir(parents=True)
    paths = LedgerPaths(folder / original.journal.name)
    paths.journal.write_bytes(journal_bytes)
    os.chmod(paths.journal, 0o600)
    if mark_bytes is not None:
        mark = watermark.decode(mark_bytes)
        if mark is not None:
            image = os.stat(paths.journal)
            mark = watermark.Mark(image.st_dev, image.st_ino, mark.snapshot_seq, mark.end)
            mark_bytes = watermark.encode(mark)
        paths.watermark.write_bytes(mark_bytes)
        os.chmod(paths.watermark, 0o600)
    return paths


def run_writers(count: int, work: Callable[[int], None]) -> None:
    """`work(i)` in `count` threads at once; re-raises the first failure."""
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            work(index)
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
