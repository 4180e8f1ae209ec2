"""The system calls that change a ledger on disk, in one place.

Writers reach the disk only through these functions (file contents, new files, renames and
the syncs of files and folders), so that the crash-image tests can run the real write path
through a recording layer (tests/crashimages.py) and rebuild what a power cut or a SIGKILL
at any moment could leave behind. The lock file, which holds no data, is the exception.

The module itself fits `gpupoolctl.atomic.FileOps`: the ledger's files replaced whole
(snapshot, a compacted or repaired journal) go through it too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gpupoolctl.atomic import fsync_dir
from gpupoolctl.hw import sharing


def append(fd: int, data: bytes) -> None:
    """Write all of `data` at the end of a file opened O_APPEND, or at the position of a
    file just created (no sync)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_at(fd: int, data: bytes, offset: int) -> None:
    """Write all of `data` at `offset` (no sync)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def sync(fd: int) -> None:
    """Make everything written to the file so far durable.

    fdatasync also writes the size that an append changed; it skips only timestamps. It
    covers every dirty page of the file, whoever wrote it: that is what lets writers share
    one sync (group commit). A new file's name is durable only after `sync_dir`."""
    getattr(os, "fdatasync", os.fsync)(fd)


def truncate(fd: int, size: int) -> None:
    os.ftruncate(fd, size)


def open_file(path: Path, flags: int, mode: int) -> int:
    """os.open: how a ledger file is opened, and created with exactly `mode` (the umask takes
    nothing: a shared folder's 0660, hw.sharing) when `flags` has O_CREAT."""
    if flags & os.O_CREAT:
        return sharing.open_file(path, flags, mode)
    return os.open(path, flags)


def create_temp(folder: Path, prefix: str) -> tuple[int, Path]:
    """A new, empty, uniquely named file (mode 0600) in `folder`, open for writing."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
    return fd, Path(name)


def make_dir(path: Path, mode: int) -> None:
    """Create one folder with exactly `mode` (FileExistsError when it is there); durable
    after `sync_dir` of its parent."""
    path.mkdir(mode=mode)
    os.chmod(path, mode)  # the umask may have taken the group's bits


def rename(src: Path, dst: Path) -> None:
    """Put `src` at `dst` in one step (replacing what was there); durable after `sync_dir`."""
    os.replace(src, dst)


def unlink(path: Path) -> None:
    os.unlink(path)


def sync_dir(folder: Path) -> None:
    """Make the names created, renamed or removed in `folder` so far durable."""
    fsync_dir(folder)


class Appender:
    """A write-only file object over `fd` whose writes go through `append`: what a
    streaming writer (gzip) needs to write a ledger file through this module."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: bytes) -> int:
        append(self.fd, bytes(data))
        return len(data)

    def flush(self) -> None:
        """Nothing is buffered here."""
