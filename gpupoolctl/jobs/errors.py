"""Typed errors of the jobs library (the CLI maps each to its exit code)."""

from __future__ import annotations

from gpupoolctl.errors import ExitCode, GpupoolError


class JobError(GpupoolError):
    """A job could not be launched, signalled or read."""


class NoSuchJob(JobError):
    pass


class NeverFits(GpupoolError):
    """The pool could never satisfy the request, not just now (exit 5)."""

    exit_code = ExitCode.NO_CAPACITY
