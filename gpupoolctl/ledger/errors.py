"""Ledger errors; each carries its exit code (see gpupoolctl.errors)."""

from __future__ import annotations

from gpupoolctl.errors import ExitCode, GpupoolError, SourceError


class LedgerError(GpupoolError):
    """A ledger operation could not be done (unknown allocation, unreadable file, ...)."""


class LedgerDamaged(SourceError):
    """The journal or snapshot is damaged somewhere other than a torn last line: writers
    refuse until `gpupoolctl ledger repair`. Names the file and line."""


class NothingFits(GpupoolError):
    """No free slice (or not enough of them) matches the request."""

    exit_code = ExitCode.NO_CAPACITY
