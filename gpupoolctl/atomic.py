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

from gpupoolctl.errors import GpupoolError


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable (raises OSError)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    """Replace `path` with `data` atomically; `mode` from the start (a secret never sits in
    a wider-open file). Raises OSError; the temp file is gone either way."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            if durable:
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def write_file(path: Path, text: str, *, mode: int = 0o600, what: str = "") -> None:
    """replace_file for the CLI's outputs: a failure is one GpupoolError line naming the
    file (`what` says what it was: "the report")."""
    try:
        replace_file(path, text.encode("utf-8"), mode=mode)
    except OSError as exc:
        label = f" {what}" if what else ""
        raise GpupoolError(f"{path}: cannot write{label}: {exc.strerror or exc}") from None
