"""`drain` and `undrain`: hosts and cards (host/gpuN) that take no new work."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupoolctl.cli.console import notice, warn
from gpupoolctl.cli.handles import open_ledger
from gpupoolctl.cli.ledger_cmd import discover_slices
from gpupoolctl.cli.render import Column, emit
from gpupoolctl.cli.settings import OutputFormat, Settings
from gpupoolctl.errors import UsageError

COLUMNS = (
    Column("target", "TARGET"),
    Column("reason", "REASON"),
    Column("source", "SOURCE"),
    Column("actor", "BY"),
    Column("ts", "SINCE"),
)

Targets = Annotated[
    list[str] | None,
    typer.Argument(metavar="[HOST|HOST/gpuN]...", help="Hosts or cards, as `pool` names them."),
]


def register(app: typer.Typer) -> None:
    """Add `drain` and `undrain` to the root command."""
    app.command("drain")(drain)
    app.command("undrain")(undrain)


def drain(
    ctx: typer.Context,
    targets: Targets = None,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why (required to drain): shown with it.")
    ] = None,
    now: Annotated[
        bool,
        typer.Option(
            "--now",
            help="Also stop the jobs running there (SIGTERM, grace, SIGKILL): those submitted "
            "with --requeue are queued again, others are recorded cancelled. Another "
            "user's job is stopped only by a pool admin.",
        ),
    ] = False,
    grace: Annotated[
        float | None,
        typer.Option(
            "--grace",
            min=0,
            max=86400,
            help="With --now: seconds between SIGTERM and SIGKILL "
            "(default: each job's own --grace).",
        ),
    ] = None,
) -> None:
    """Drain hosts or cards: no new work is placed there, by `submit`, `alloc` or elastic
    re-cuts (what runs there goes on, unless --now). Without a target: list what is
    drained."""
    from gpupoolctl.ledger import drains

    settings: Settings = ctx.obj
    ledger = open_ledger(settings)
    if grace is not None and not now:
        raise UsageError("--grace goes with --now")
    if not targets:
        if reason is not None or now:
            raise UsageError("--reason and --now need a host or card to drain")
        state = ledger.read().state if ledger.path.exists() else None
        rows = [d for held in state.drains.values() for d in held.values()] if state else []
        emit(settings, data=rows, rows=rows, columns=COLUMNS)
        return
    if reason is None:
        raise UsageError("say why with --reason (it is shown with the drain)")
    discover_slices(settings, ledger)  # a fresh ledger learns the pool's hosts and cards first
    if now:
        _drain_now(settings, targets, reason, grace)
        return
    done = drains.drain(ledger, targets, reason)
    _show(settings, done.warnings, list(done.value), "drained")


def _drain_now(settings: Settings, targets: list[str], reason: str, grace: float | None) -> None:
    """Drain and stop what runs there: one transaction decides both (a refusal records
    nothing), then the jobs are stopped."""
    from gpupoolctl.cli.handles import open_jobs
    from gpupoolctl.cli.jobs_cmd import _finish
    from gpupoolctl.jobs.draining import drain_now

    jobs = open_jobs(settings)
    drained, stopped = drain_now(jobs, targets, reason, grace)
    _show(settings, [], drained, "drained")
    for job in stopped:
        said = job.get("reason") or job.get("error") or ""
        notice(f"{job['id']}: {job.get('state')}: {said}", quiet=settings.quiet)
    _finish(settings, jobs)


def undrain(ctx: typer.Context, targets: Targets = None) -> None:
    """Lift drains: the hosts or cards take new work again.

    An admin's drain is lifted first: a card the health check drained too (it failed while
    drained for maintenance) stays drained, and is said so; `undrain` it again to put it
    back to work anyway."""
    from gpupoolctl.ledger import drains

    settings: Settings = ctx.obj
    done = drains.undrain(open_ledger(settings), targets or [])
    rows = []
    for lifted in done.value:
        still = lifted.still
        rows.append({"target": lifted.target, "source": lifted.source, "still": still})
        if still is not None:
            warn(
                f"{lifted.target} is still drained by {still['source']} since {still['ts']}: "
                f"{still['reason']} (`gpupoolctl undrain {lifted.target}` again lifts it)"
            )
    _show(settings, done.warnings, rows, "undrained")


def _show(settings: Settings, warnings: list[str], rows: list[dict[str, Any]], verb: str) -> None:
    for message in warnings:
        warn(message)
    if settings.resolved_output() is OutputFormat.table:
        for row in rows:
            why = f": {row['reason']}" if row.get("reason") else ""
            print(f"{verb} {row['target']}{why}")
        return
    columns = COLUMNS if verb == "drained" else (COLUMNS[0], COLUMNS[2])
    emit(settings, data=rows, rows=rows, columns=columns)
