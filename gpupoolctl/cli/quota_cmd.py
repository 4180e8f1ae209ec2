"""`gpupoolctl quota`: the teams' quotas in force now (time windows applied) and what each
team holds of them; then what each time window gives. Parse, call gpupoolctl.jobs.teams,
render."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupoolctl.cli.render import Column, emit, table
from gpupoolctl.cli.settings import OutputFormat, Settings
from gpupoolctl.errors import UsageError

COLUMNS = (
    Column("team", "TEAM"),
    Column("scope", "SCOPE"),
    Column("resource", "RESOURCE"),
    Column("nominal", "GUARANTEED", "right"),
    Column("limit", "LIMIT", "right"),
    Column("in_use", "IN USE", "right"),
    Column("borrowed", "BORROWED", "right"),
    Column("lendable", "LENDS AT MOST", "right"),
)
WINDOW_COLUMNS = (
    Column("window", "WINDOW"),
    Column("active", "NOW"),
    Column("when", "WHEN"),
    Column("team", "TEAM"),
    Column("scope", "SCOPE"),
    Column("resource", "RESOURCE"),
    Column("nominal", "GUARANTEED", "right"),
)


def register(app: typer.Typer) -> None:
    app.command("quota")(quota)


def quota(
    ctx: typer.Context,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Show the quotas in force at this time (ISO-8601, e.g. 2026-12-07T08:00:00Z) "
            "instead of now: which windows apply then, against what is held now.",
        ),
    ] = None,
) -> None:
    """The teams' quotas in force now (time windows applied) and what each team holds of them.

    Per team: guaranteed (nominal) quota, the most it may hold (nominal + borrowing
    limit; "-" is no limit), what it holds now and how much of that is borrowed from others'
    idle share, and the most of its idle share it lends; per scope (the whole pool, a site,
    a vendor or a model) and resource (GPU memory, whole cards, slices, profiles). Then each
    time window and the quota it gives each team while it is active (NOW: yes).

    Teams and windows come from the pool policy file (--pool-policy, GPUPOOL_POLICY or
    ~/.config/gpupoolctl/pool.yaml). Exit 0; 1 when there is no policy file or it has no
    teams; 2 when --at is not a time.
    """
    settings: Settings = ctx.obj
    from gpupoolctl.cli.handles import open_ledger
    from gpupoolctl.errors import GpupoolError, SourceError
    from gpupoolctl.jobs.teams import quota_report
    from gpupoolctl.ledger.units import format_ts, parse_ts
    from gpupoolctl.policy import resolve_policy

    policy = resolve_policy(settings.pool_policy)
    if policy.source is None:
        raise GpupoolError(
            "no pool policy file (--pool-policy, GPUPOOL_POLICY or "
            "~/.config/gpupoolctl/pool.yaml): nothing is limited by team"
        )
    if not policy.teams.enabled:
        raise SourceError(policy.source, None, "has no teams: section; nothing is limited by team")
    moment = None
    if at is not None:
        try:
            moment = parse_ts(at)
        except UsageError:
            raise UsageError(
                f"--at {at[:40]!r}: expected an ISO-8601 time, e.g. 2026-12-07T08:00:00Z"
            ) from None
    view = open_ledger(settings).read()
    now = format_ts(moment) if moment is not None else view.now
    report = quota_report(policy, view.state, now)
    fmt = settings.resolved_output()
    if fmt in (OutputFormat.json, OutputFormat.yaml):
        emit(settings, data=report, rows=[], columns=COLUMNS)
        return
    rows = [_shown(row) for row in report["teams"]]
    if fmt is OutputFormat.csv:
        emit(settings, data=report, rows=report["teams"], columns=_csv(COLUMNS))
        return
    active = ", ".join(report["active_windows"]) or "none"
    table(settings, rows, COLUMNS, title=f"Quotas at {now} (windows in force: {active})")
    if report["windows"]:
        windows = [
            {
                **_shown(w),
                "active": "yes" if w["active"] else "",
                "when": f"{_days(w['days'])} {w['hours']} {w['timezone']}",
            }
            for w in report["windows"]
        ]
        print()
        table(settings, windows, WINDOW_COLUMNS, title="Time windows")


def _days(days: str) -> str:
    """'mon,tue,...,sun' -> 'daily'; other sets as they are."""
    return "daily" if days.count(",") == 6 else days


def _csv(columns: tuple[Column, ...]) -> list[Column]:
    return [Column(c.key, c.key) for c in columns]


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """Amounts for people: GPU memory in GiB, counts as they are, no limit as '-'."""
    out = dict(row)
    for key in ("nominal", "limit", "in_use", "borrowed", "lendable"):
        if key not in row:
            continue
        value = row[key]
        if value is None:
            out[key] = "-"
        elif row["resource"] == "gpu-memory":
            out[key] = f"{value / 1024:g} GiB"
        else:
            out[key] = str(value)
    return out
