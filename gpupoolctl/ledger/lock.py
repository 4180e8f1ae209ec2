"""flock on P.lock: shared for readers, exclusive for writers.

The lock file is never replaced, unlike the journal (compaction and repair rename a new one
into place), so a writer that waited for the lock always appends to the current journal.
The kernel drops the lock when a holder dies, SIGKILL included.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpupoolctl.ledger.paths import FILE_MODE


class FileLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = 0

    def _descriptor(self) -> int:
        # A forked child must not share its parent's open file description: flock would then
        # treat both as one holder.
        if self._fd is None or self._pid != os.getpid():
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
            except PermissionError:  # a read-only user of someone else's ledger
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            self._fd, self._pid = fd, os.getpid()
        return self._fd

    @contextmanager
    def _held(self, mode: int) -> Iterator[None]:
        fd = self._descriptor()
        fcntl.flock(fd, mode)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def shared(self) -> contextmanager[None]:  # type: ignore[valid-type]
        return self._held(fcntl.LOCK_SH)

    def exclusive(self) -> contextmanager[None]:  # type: ignore[valid-type]
        return self._held(fcntl.LOCK_EX)

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None
