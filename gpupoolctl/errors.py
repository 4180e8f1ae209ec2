"""Typed errors raised by the library; the CLI maps each to an exit code and a one-line message."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes shared by every command (see DESIGN.md, Conventions)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    HOSTS_FAILED = 3
    CHECK_FAILED = 4
    NO_CAPACITY = 5
    INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


class GpupoolError(Exception):
    """Base class: a message fit for one line on stderr, and the exit code it implies."""

    exit_code: ExitCode = ExitCode.ERROR


class NotFound(GpupoolError):
    """An id or host the user named that the pool does not have (exit 1)."""


class LocalStateError(GpupoolError):
    """A folder of this workstation that gpupoolctl keeps state in cannot be used: one
    local error (exit 1), not a failure of every host that would have used it."""


class UsageError(GpupoolError):
    """The user asked for something malformed (bad option value, bad pattern)."""

    exit_code = ExitCode.USAGE


class NothingFits(GpupoolError):
    """No free slice (or not enough of them) matches the request (exit 5)."""

    exit_code = ExitCode.NO_CAPACITY


class SourceError(GpupoolError):
    """A file the user gave is malformed: names the file and line, and what was expected."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.detail = message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


class InventoryError(SourceError):
    """An inventory file, group_vars/host_vars file or --limit @file is malformed."""
