"""Where a ledger lives: the journal and the files that sit beside it.

For a journal at P: P.lock (the flock target; never replaced, so compaction can swap the
journal underneath waiting writers), P.snapshot, P.archive/ (compressed old journals),
P.synced (how much of the journal is known durable: watermark.py) and P.quarantine (damaged
lines moved aside by `ledger repair`). Every file is created 0600, or 0660 in a folder
shared with its group (setgid: gpupoolctl.hw.sharing), and keeps its mode when replaced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from gpupoolctl.atomic import replace_file
from gpupoolctl.hw import sharing
from gpupoolctl.ledger import fileio

DIR_MODE = 0o700


def default_path() -> Path:
    """~/.local/state/gpupoolctl/ledger.jsonl, or under $XDG_STATE_HOME when it is set."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    root = Path(base) if base.strip() else Path.home() / ".local" / "state"
    return root / "gpupoolctl" / "ledger.jsonl"


@dataclass(frozen=True)
class LedgerPaths:
    """The names are worked out once per ledger (a writer looks them up on every
    transaction: building a Path is a few microseconds each time)."""

    journal: Path

    @cached_property
    def lock(self) -> Path:
        return self.journal.with_name(self.journal.name + ".lock")

    @cached_property
    def snapshot(self) -> Path:
        return self.journal.with_name(self.journal.name + ".snapshot")

    @cached_property
    def archive_dir(self) -> Path:
        return self.journal.with_name(self.journal.name + ".archive")

    @cached_property
    def watermark(self) -> Path:
        return self.journal.with_name(self.journal.name + ".synced")

    @cached_property
    def quarantine(self) -> Path:
        return self.journal.with_name(self.journal.name + ".quarantine")

    @cached_property
    def folder(self) -> Path:
        return self.journal.parent

    def exists(self) -> bool:
        return self.journal.exists() or self.snapshot.exists()


def ensure_folder(folder: Path, *, create: bool) -> None:
    """The default folder is created (0700); a folder the user named must already exist."""
    if folder.is_dir():
        return
    if not create:
        from gpupoolctl.ledger.errors import LedgerError

        raise LedgerError(f"ledger folder {folder} does not exist")
    folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """temp file, fsync, rename over `path`, fsync the folder: readers see old or new, never
    half (and after a crash, one of the two survives). The new file has the old one's mode;
    through fileio, as every ledger write."""
    replace_file(path, data, mode=sharing.replacing_mode(path), durable=durable, fs=fileio)
