"""`gpupoolctl health`: per GPU ok / degraded / failed / unknown, with reasons and the
vendor's action; `--drain` drains what failed and lifts the health drains of GPUs that are
ok again (never an admin's)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupoolctl.cli import pool
from gpupoolctl.cli.console import notice, warn
from gpupoolctl.cli.render import Column, emit
from gpupoolctl.cli.settings import Settings
from gpupoolctl.errors import ExitCode

SUMMARY = "GPU health per card: ok / degraded / failed / unknown, with reasons and the action."

COLUMNS = (
    Column("host", "HOST"),
    Column("index", "GPU", "right"),
    Column("model", "MODEL"),
    Column("verdict", "HEALTH"),
    Column("reason", "REASON"),
    Column("action", "ACTION"),
    Column("unknown", "UNKNOWN"),
)


def register(app: typer.Typer) -> None:
    app.command("health")(health)


def health(
    ctx: typer.Context,
    drain: Annotated[
        bool,
        typer.Option(
            "--drain",
            help="Drain every failed GPU (source health) and lift the health drains of GPUs "
            "that are ok again; an admin's drain is never lifted, a degraded GPU not drained.",
        ),
    ] = False,
) -> None:
    """GPU health per card: ok / degraded / failed / unknown, with reasons and the action.

    The signals are read with the rest of the facts (one exec per node): uncorrected ECC,
    row remapping and page retirement, a lost GPU, critical XIDs (kernel log, NVML events),
    clock slowdowns and temperature on NVIDIA; uncorrectable and deferred ECC, bad pages and
    driver events on AMD. A signal that cannot be read is listed as unknown, never taken for
    ok. Exit 4 when a GPU failed, else 3 when a host could not be read.
    """
    from gpupoolctl import health as pool_health

    settings: Settings = ctx.obj
    selection = pool.select(settings)
    results = pool.fan_out(settings, selection.targets(), {"v": 1, "verb": "facts", "args": {}})
    rows = pool_health.gpu_rows(results)
    changes: dict[str, Any] | None = _apply_drains(settings, rows) if drain else None
    hosts = [{"host": r.name, "outcome": r.outcome, "error": r.error} for r in results if not r.ok]
    data: dict[str, Any] = {
        "gpus": [_json_row(row) for row in rows],
        "hosts": hosts,
    }
    if changes is not None:
        data["drains"] = changes
    table_rows = [
        {
            **row,
            "reason": "; ".join(row["reasons"] + row["notes"]) or None,
            "unknown": row["unknown"] or None,
        }
        for row in rows
    ]
    table_rows += [
        {"host": h["host"], "index": None, "verdict": h["outcome"], "reason": h["error"]}
        for h in hosts
    ]
    emit(settings, data=data, rows=table_rows, columns=COLUMNS)
    for host in hosts:
        warn(f"{host['host']}: {host['outcome']}: {host['error']}")
    if any(row["verdict"] == "failed" for row in rows):
        raise typer.Exit(int(ExitCode.CHECK_FAILED))
    if hosts:
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("host", "index", "card", "uuid", "model", "vendor", "verdict", "reasons", "action",
            "unknown", "notes")  # fmt: skip
    return {key: row.get(key) for key in keys}


def _apply_drains(settings: Settings, rows: list[dict[str, Any]]) -> dict[str, Any]:
    from gpupoolctl import health as pool_health
    from gpupoolctl.cli.handles import open_ledger
    from gpupoolctl.cli.ledger_cmd import discover_slices
    from gpupoolctl.ledger import drains

    ledger = open_ledger(settings)
    if any(row["verdict"] == "failed" for row in rows):
        discover_slices(settings, ledger)  # a fresh ledger learns the cards it drains
    current = ledger.read().state.drains if ledger.path.exists() else {}
    plan = pool_health.plan(rows, current)
    drained: list[dict[str, Any]] = []
    for target, reason in plan.drain:
        done = drains.drain(ledger, [target], reason, source=pool_health.SOURCE)
        for message in done.warnings:
            warn(message)
        drained.append({"target": target, "reason": reason})
        notice(f"drained {target}: {reason}", quiet=settings.quiet)
    lifted: list[str] = []
    if plan.lift:
        done = drains.lift(ledger, plan.lift, pool_health.SOURCE)
        for message in done.warnings:
            warn(message)
        lifted = list(done.value)
        for target in lifted:
            notice(f"undrained {target}: healthy again", quiet=settings.quiet)
    return {"drained": drained, "undrained": lifted}
