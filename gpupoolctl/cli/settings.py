"""Global options, parsed once by the root callback and handed to every command."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

# `--mem` of submit and alloc: one parser (gpupoolctl.ledger.units), one explanation.
MEM_HELP = (
    "At least this much memory per slice: 10G or 10GB (decimal, as MIG profile names count: "
    "1g.10gb fits), 10GiB (binary), 512MiB; a bare number is GB."
)


class OutputFormat(StrEnum):
    auto = "auto"  # a rich table on a terminal, a plain table otherwise
    table = "table"
    json = "json"
    yaml = "yaml"
    csv = "csv"


@dataclass
class Settings:
    inventory: Path | None
    limit: str | None
    forks: int
    output: OutputFormat
    ledger: Path | None
    verbosity: int  # -1 quiet, 0 normal, 1+ verbose
    accept_new_host_keys: bool
    connect_timeout: float
    command_timeout: float | None  # None: the command's own default
    pool_policy: Path | None = None  # --pool-policy / GPUPOOL_POLICY; None: the default path

    @property
    def quiet(self) -> bool:
        return self.verbosity < 0

    def resolved_output(self) -> OutputFormat:
        if self.output is OutputFormat.auto:
            return OutputFormat.table
        return self.output

    @property
    def rich_tables(self) -> bool:
        """Rich only on a terminal: machines reading plain text get a stable layout."""
        return self.output in (OutputFormat.auto, OutputFormat.table) and sys.stdout.isatty()


def colour_allowed() -> bool:
    return "NO_COLOR" not in os.environ and sys.stderr.isatty()
