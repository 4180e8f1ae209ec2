"""Ledger errors; each carries its exit code (see gpupoolctl.errors)."""

from __future__ import annotations

from gpupoolctl.errors import GpupoolError, SourceError

# Raised by sched's choice inside a ledger transaction; named here as it always was.
from gpupoolctl.errors import NothingFits as NothingFits


class LedgerError(GpupoolError):
    """A ledger operation could not be done (unknown allocation, unreadable file, ...)."""


def holders_text(holders: tuple[tuple[int, str | None], ...]) -> str:
    """A lock's holders as messages name them: `pid 4242 (gpupoolctl), pid 17`."""
    return ", ".join(f"pid {pid} ({comm})" if comm else f"pid {pid}" for pid, comm in holders)


class LedgerBusy(LedgerError):
    """The ledger lock stayed taken for the whole wait (GPUPOOL_LEDGER_LOCK_TIMEOUT).

    `holders` are (pid, command name or None) as far as this host can see them; when it sees
    none, `unknown_why` says why. Exit 1 like every ledger error: DESIGN.md has no "try again
    later" code.
    """

    def __init__(
        self,
        lock: str,
        *,
        waited: float,
        timeout: float,
        env: str,
        holders: tuple[tuple[int, str | None], ...],
        unknown_why: str,
    ) -> None:
        self.lock = lock
        self.waited = waited
        self.holders = holders
        who = f"held by {holders_text(holders)}" if holders else f"holder not known ({unknown_why})"
        super().__init__(
            f"ledger lock {lock} is busy: waited {waited:.1f} s, {who}; "
            f"to wait longer set {env} (seconds; now {timeout:g})"
        )


class LedgerDamaged(SourceError):
    """The journal or snapshot is damaged somewhere other than a torn last line: writers
    refuse until `gpupoolctl ledger repair`. Names the file and line."""
