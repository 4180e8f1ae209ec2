"""A progress bar on stderr for fan-outs, only when stderr is a terminal."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def host_progress(total: int, *, enabled: bool = True) -> Iterator[Callable[[Any], None]]:
    if not enabled or total < 2 or not sys.stderr.isatty():
        yield lambda _result: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from gpupoolctl.cli.console import err_console

    columns = (
        TextColumn("hosts"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
    )
    with Progress(*columns, console=err_console(), transient=True) as progress:
        task = progress.add_task("hosts", total=total, last="")

        def advance(result: Any) -> None:
            progress.update(task, advance=1, last=getattr(result, "name", ""))

        yield advance
