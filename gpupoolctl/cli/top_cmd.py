"""`top`: the whole pool in one live view (or one frame with --once), and what `pool --html`
writes. The frame comes from gpupoolctl.board; this module gathers its inputs (the ledger,
why queued jobs wait, the nodes' facts with --facts) and picks the view."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupoolctl.cli.console import warn
from gpupoolctl.cli.settings import OutputFormat, Settings
from gpupoolctl.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from gpupoolctl.board.frame import Frame


def register(app: typer.Typer) -> None:
    """Add `top` to the root command."""
    app.command("top")(top)


def top(
    ctx: typer.Context,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Print one frame and exit: plain text (for cron mail, CI logs, scripts), or "
            "the frame's values with -o json. What `top` does anyway when stdout is not a "
            "terminal.",
        ),
    ] = False,
    facts: Annotated[
        str | None,
        typer.Option(
            "--facts",
            metavar="INTERVAL",
            help="Also ask the nodes for their facts every INTERVAL (30s, 2m): memory in use, "
            "utilization and temperature per GPU. Without it, top reads only the ledger.",
        ),
    ] = None,
    interval: Annotated[
        str,
        typer.Option(
            "--interval", metavar="INTERVAL", help="How often the live view reads the ledger."
        ),
    ] = "2s",
    filter_text: Annotated[
        str | None,
        typer.Option(
            "--filter",
            metavar="WORDS",
            help="Start filtered, as `/` does: host=sg-*, owner=ann, team=search, or a bare "
            "glob matching any of them; all words must hold.",
        ),
    ] = None,
) -> None:
    """The whole pool in one live view: each node's GPUs drawn as their slices, the running
    jobs, the queue with why each entry waits, recent events and utilization.

    Keys: q quit, / filter (enter applies, esc cancels), tab next pane, up/down (or j/k)
    move, enter details of the selected job or GPU (esc closes). Reads the ledger as other
    readers do (only what was appended since the last look) and never takes its write lock;
    asks nodes only with --facts. A node whose facts could not be read is named in the
    view's last line; with --once on stderr, and the exit code is 3."""
    from gpupoolctl.board.frame import Filter
    from gpupoolctl.policy.values import duration_s

    settings: Settings = ctx.obj
    every = duration_s(interval, "--interval", most_s=3600.0)
    if every < 0.1:
        raise UsageError(f"--interval: {interval!r} is too short; give at least 0.1s")
    facts_every = None if facts is None else duration_s(facts, "--facts", most_s=86400.0)
    if facts_every is not None and facts_every < 1.0:
        raise UsageError(f"--facts: {facts!r} is too short; give at least 1s")
    try:
        chosen = Filter.parse(filter_text or "")
    except ValueError as exc:
        raise UsageError(f"--filter: {exc}") from None
    fmt = settings.resolved_output()
    if fmt is OutputFormat.csv:
        raise UsageError("top has no CSV form: use -o json or -o yaml (or `pool -o csv`)")
    from gpupoolctl.cli.top_source import FrameSource

    source = FrameSource(settings, facts_every)
    # Keys come from stdin: a live view needs a terminal on both ends.
    terminal = sys.stdout.isatty() and sys.stdin.isatty()
    live = not once and terminal and settings.output is OutputFormat.auto
    if not live:
        frame = source.frame(chosen, wait_for_facts=True)
        if fmt is OutputFormat.json:
            sys.stdout.write(json.dumps(frame_values(frame), indent=2) + "\n")
        elif fmt is OutputFormat.yaml:
            import yaml

            sys.stdout.write(yaml.safe_dump(frame_values(frame), sort_keys=False))
        else:
            from gpupoolctl.cli.top_text import frame_text

            sys.stdout.write(frame_text(frame, _width()))
        for line in source.facts_failed:  # also in the frame; stderr is what scripts read
            warn(f"{line} (its facts are not shown)")
        if source.facts_failed:
            raise typer.Exit(int(ExitCode.HOSTS_FAILED))
        return
    from gpupoolctl.cli.top_live import run_live

    code = run_live(source, chosen, every)
    if code:
        raise typer.Exit(code)


def frame_values(frame: Frame) -> dict[str, Any]:
    """The frame as JSON values (`top --once -o json`): each site an object with its nodes."""
    values = dataclasses.asdict(frame)
    values["sites"] = [{"site": site, "nodes": nodes} for site, nodes in values["sites"]]
    return values


def _width() -> int:
    try:
        return int(os.environ.get("COLUMNS") or os.get_terminal_size().columns)
    except (OSError, ValueError):
        return 120
