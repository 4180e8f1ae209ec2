"""The few system calls that change a journal or its watermark, in one place.

Writers reach the disk only through these functions, so that the crash-image tests can run
the real write path through a recording layer (tests/crashimages.py) and rebuild what a
power cut at any moment could leave behind.
"""

from __future__ import annotations

import os


def append(fd: int, data: bytes) -> None:
    """Write all of `data` at the end of a file opened O_APPEND (no sync)."""
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
    one sync (group commit)."""
    getattr(os, "fdatasync", os.fsync)(fd)


def truncate(fd: int, size: int) -> None:
    os.ftruncate(fd, size)
