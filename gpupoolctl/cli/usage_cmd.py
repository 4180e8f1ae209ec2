"""`gpupoolctl usage`: what was held over a period, per team, user, host, model or job, from
the ledger's journal and its archives (so the sums survive compactions).

Parse, call gpupoolctl.ledger.usage, render. Warnings go to stderr.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupoolctl.cli.console import warn
from gpupoolctl.cli.render import Column, emit
from gpupoolctl.cli.settings import OutputFormat, Settings
from gpupoolctl.errors import UsageError

SUMMARY = "What was held over a period: GPU-hours, GiB-hours and slice-hours per team or user."

KEY_HEADERS = {"team": "TEAM", "user": "USER", "host": "HOST", "model": "MODEL", "job": "JOB"}
MEASURE_COLUMNS = (
    Column("gpu_hours", "GPU-HOURS", "right"),
    Column("gib_hours", "GiB-HOURS", "right"),
    Column("slice_hours", "SLICE-HOURS", "right"),
    Column("holds", "HOLDS", "right"),
)
DIGITS = 6  # in json/yaml/csv: a millisecond of a whole card is 3e-7 GPU-hours


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)


def usage(
    ctx: typer.Context,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="SEQ|AGE|ISO",
            help="Start of the period: a seq (120: from that record's time), a time back from "
            "now (30d, 8h) or an ISO-8601 time. Default: all history the ledger has.",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            metavar="ISO",
            help="End of the period, an ISO-8601 time (default: now). Holds still open count "
            "up to now.",
        ),
    ] = None,
    by: Annotated[
        list[str] | None,
        typer.Option(
            "--by",
            metavar="team|user|host|model|job",
            help="Group by team (the request's team, - when none), user (the owner), host, "
            "model (per slice: a hold over several hosts is split) or job (- for holds "
            "taken by hand). Repeatable; default: --by team --by user.",
        ),
    ] = None,
) -> None:
    """What was held over a period: GPU-hours, GiB-hours and slice-hours per team or user.

    A hold runs from its alloc record to its release or expire record, or to its expiry
    time when that comes first, or to now while it is held; only its part inside the
    period counts. Each slice counts as it was when the hold began.

    GPU-hours: hours times the slice's share of its card (its memory over the card's, for
    MIG instances; 1 for a whole card). GiB-hours: hours times the slice's memory in GiB (a
    1g.10gb for an hour is about 10). Slice-hours: hours per slice. Holds: holds that
    overlap the period (in the total, each hold once).

    Read from the journal and every archive, so compaction loses nothing; when the oldest
    archives are gone, usage before the snapshot's seq is unknown (a warning says so).
    """
    from gpupoolctl.cli.handles import open_ledger
    from gpupoolctl.ledger.units import format_ts, parse_since, parse_ts
    from gpupoolctl.ledger.usage import check_by, measure

    settings: Settings = ctx.obj
    keys = check_by(by)
    since_seq, since_ts = parse_since(since)
    until_ts = None
    if until is not None:
        try:
            until_ts = format_ts(parse_ts(until))
        except UsageError:
            raise UsageError(
                f"bad --until {until!r}: use an ISO-8601 time (2025-06-01T12:00:00Z)"
            ) from None
        if since_ts is not None and since_ts > until_ts:
            raise UsageError(f"--since {since} is after --until {until}")
    ledger = open_ledger(settings)
    try:
        now = format_ts(ledger.clock())
        found = measure(
            ledger, now=now, by=keys, since=since_ts, since_seq=since_seq, until=until_ts
        )
    finally:
        ledger.close()
    for message in found.warnings:
        warn(message)
    rows = [_rounded(row) for row in found.rows]
    total = _rounded(found.total)
    columns = [Column(k, KEY_HEADERS[k]) for k in keys] + list(MEASURE_COLUMNS)
    data: dict[str, Any] = {
        "since": found.since,
        "until": found.until,
        "by": list(keys),
        "rows": rows,
        "total": total,
    }
    if found.known_after_seq is not None:
        data["known_after_seq"] = found.known_after_seq
    if settings.resolved_output() in (OutputFormat.table, OutputFormat.auto):
        shown = [_shown(row) for row in rows]
        shown.append(_shown({keys[0]: "TOTAL", **total}))
        emit(settings, data=data, rows=shown, columns=columns)
        return
    emit(settings, data=data, rows=rows, columns=columns)


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, DIGITS) if isinstance(v, float) else v for k, v in row.items()}


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    return {k: f"{v:.2f}" if isinstance(v, float) else v for k, v in row.items()}
