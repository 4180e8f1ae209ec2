"""Where the CLI writes: results to stdout, notices, warnings and progress to stderr."""

from __future__ import annotations

import sys
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


@cache
def err_console() -> Console:
    from rich.console import Console

    from gpupoolctl.cli.settings import colour_allowed

    return Console(stderr=True, no_color=not colour_allowed(), highlight=False)


@cache
def out_console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def notice(message: str, *, quiet: bool = False) -> None:
    """An informational line on stderr (suppressed by -q)."""
    if not quiet:
        sys.stderr.write(f"gpupoolctl: {message}\n")


def warn(message: str) -> None:
    sys.stderr.write(f"gpupoolctl: warning: {message}\n")


def error(message: str) -> None:
    sys.stderr.write(f"gpupoolctl: error: {message}\n")
