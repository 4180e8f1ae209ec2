"""`gpupoolctl sim`: manage the simulated nodes (hosts whose vars say `sim: <template>`)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpupoolctl.cli import pool
from gpupoolctl.cli.console import warn
from gpupoolctl.cli.render import Column, emit
from gpupoolctl.cli.settings import Settings
from gpupoolctl.errors import ExitCode, UsageError

app = typer.Typer(help="Simulated hardware: reset nodes, list templates.", no_args_is_help=True)


@app.command("reset")
def reset(
    ctx: typer.Context,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also reset nodes whose slices the ledger says are held (the holds are left "
            "on slices that may be gone: release or cancel them).",
        ),
    ] = False,
) -> None:
    """Put every selected simulated node back to its template's initial state.

    Works over SSH too: the node's own agent rewrites its state file. Where a ledger is
    kept, the nodes' new slices are recorded in it (as `partition apply` does). A node with
    held slices (an allocation, a job) is left alone, like a busy GPU in `partition reset`,
    unless --force; exit 3 when some node was left alone or could not be reset.
    """
    from gpupoolctl.cli.ledger_cmd import holds_by_host, record_slices_of

    settings: Settings = ctx.obj
    selection = pool.select(settings)
    targets = [t for t in selection.targets() if t.sim is not None]
    skipped = len(selection.hosts) - len(targets)
    if skipped:
        warn(f"{skipped} selected host(s) are real hardware and were left alone")
    if not targets:
        raise UsageError("none of the selected hosts is simulated (no `sim:` var)")
    busy = {} if force else holds_by_host(settings, {t.name for t in targets})
    for name, holders in sorted(busy.items()):
        warn(
            f"{name}: not reset: slices held by {', '.join(holders)} (release or cancel "
            "them, or --force)"
        )
    chosen = [t for t in targets if t.name not in busy]
    results = pool.fan_out(settings, chosen, {"v": 1, "verb": "sim_reset", "args": {}})
    rows = [
        {
            "host": r.name,
            "template": r.data.get("template") if r.ok else None,
            "outcome": r.outcome,
            "error": r.error,
        }
        for r in results
    ]
    rows += [
        {"host": name, "template": None, "outcome": "refused", "error": "slices held"}
        for name in sorted(busy)
    ]
    columns = [
        Column("host", "HOST"),
        Column("template", "TEMPLATE"),
        Column("outcome", "OUTCOME"),
        Column("error", "ERROR"),
    ]
    emit(settings, data={"hosts": rows}, rows=rows, columns=columns)
    failed = [r for r in results if not r.ok]
    # Reset re-cuts the cards: the ledger must not hand out the slices they had before.
    by_name = {t.name: t for t in targets}
    record_slices_of(settings, [by_name[r.name] for r in results if r.ok])
    for result in failed:
        warn(f"{result.name}: {result.outcome}: {result.error} (not reset)")
    if failed or busy:
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


@app.command("templates")
def templates(ctx: typer.Context) -> None:
    """List the node templates a host's `sim:` var can name."""
    from gpupoolctl.sim import templates as registry

    settings: Settings = ctx.obj
    rows = [{"template": name} for name in registry.names()]
    emit(
        settings,
        data={"templates": registry.names()},
        rows=rows,
        columns=[Column("template", "TEMPLATE")],
    )
