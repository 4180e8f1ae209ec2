"""Files replaced whole: a reader (or a crash) sees the old file or the new one, never half.

Write to a temp file in the same folder, fsync it, rename it over the target, fsync the
folder so the rename itself survives a crash. One place for the ledger's snapshots, saved
stress results, reports and the Prometheus textfile.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Protocol

from gpupoolctl.errors import GpupoolError


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable (raises OSError)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileOps(Protocol):
    """The calls `replace_file` makes; the ledger passes its own (gpupoolctl.ledger.fileio),
    through which its crash tests see every write, rename and sync."""

    def create_temp(self, folder: Path, prefix: str) -> tuple[int, Path]: ...
    def append(self, fd: int, data: bytes) -> None: ...
    def sync(self, fd: int) -> None: ...
    def rename(self, src: Path, dst: Path) -> None: ...
    def unlink(self, path: Path) -> None: ...
    def sync_dir(self, folder: Path) -> None: ...


class _OsFiles:
    """FileOps straight on the operating system."""

    @staticmethod
    def create_temp(folder: Path, prefix: str) -> tuple[int, Path]:
        fd, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
        return fd, Path(name)

    @staticmethod
    def append(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    @staticmethod
    def sync(fd: int) -> None:
        os.fsync(fd)

    @staticmethod
    def rename(src: Path, dst: Path) -> None:
        os.replace(src, dst)

    @staticmethod
    def unlink(path: Path) -> None:
        os.unlink(path)

    @staticmethod
    def sync_dir(folder: Path) -> None:
        fsync_dir(folder)


OS_FILES: FileOps = _OsFiles()


def replace_file(
    path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True, fs: FileOps = OS_FILES
) -> None:
    """Replace `path` with `data` atomically; `mode` from the start (a secret never sits in
    a wider-open file). Raises OSError; the temp file is gone either way."""
    fd, tmp = fs.create_temp(path.parent, f".{path.name}.")
    try:
        try:
            os.fchmod(fd, mode)
            fs.append(fd, data)
            if durable:
                fs.sync(fd)
        finally:
            os.close(fd)
        fs.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.unlink(tmp)
        raise
    if durable:
        fs.sync_dir(path.parent)


def write_file(path: Path, text: str, *, mode: int = 0o600, what: str = "") -> None:
    """replace_file for the CLI's outputs: a failure is one GpupoolError line naming the
    file (`what` says what it was: "the report")."""
    try:
        replace_file(path, text.encode("utf-8"), mode=mode)
    except OSError as exc:
        label = f" {what}" if what else ""
        raise GpupoolError(f"{path}: cannot write{label}: {exc.strerror or exc}") from None
