"""`gpupoolctl policy`: check and show the pool policy file (what the scheduling loop may do)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupoolctl.cli.render import Column, emit, table
from gpupoolctl.cli.settings import OutputFormat, Settings
from gpupoolctl.errors import UsageError

app = typer.Typer(
    help="The pool policy file: which cards the scheduling loop may re-cut (elastic), when a "
    "silent node is lost (health), teams and their quotas, time windows, pool admins.",
    no_args_is_help=True,
)

COLUMNS = [
    Column("rule", "#", "right"),
    Column("line", "LINE", "right"),
    Column("hosts", "HOSTS"),
    Column("vendor", "VENDOR"),
    Column("model", "MODEL"),
    Column("elastic", "ELASTIC"),
    Column("into", "MAY BE CUT INTO"),
    Column("keep_whole", "KEEP WHOLE", "right"),
]


@app.command("check")
def check(
    ctx: typer.Context,
    file: Annotated[
        str | None,
        typer.Argument(
            help="The policy file ('-' reads stdin). Default: --pool-policy, GPUPOOL_POLICY "
            "or ~/.config/gpupoolctl/pool.yaml.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Validate a pool policy file and summarize what it allows: elastic rules, health,
    teams and their quotas, windows, admins.

    Exit 0 when it is valid; 1 with one line naming FILE:LINE when it is not; 2 when there
    is no file to check.
    """
    from gpupoolctl.policy.load import load_policy
    from gpupoolctl.policy.where import default_policy_path, policy_path

    settings: Settings = ctx.obj
    path = file if file is not None else policy_path(settings.pool_policy)
    if path is None:
        raise UsageError(
            "no pool policy file to check: give FILE, --pool-policy or GPUPOOL_POLICY, or "
            f"write {default_policy_path()}"
        )
    policy = load_policy(path)
    _render(settings, policy.as_dict() | {"valid": True}, f"{policy.source}: valid")


@app.command("show")
def show(ctx: typer.Context) -> None:
    """The policy in force: its file (--pool-policy, GPUPOOL_POLICY or
    ~/.config/gpupoolctl/pool.yaml) and what it allows (elastic rules, health, teams and
    their quotas, windows, admins); without one, a static pool."""
    from gpupoolctl.policy.where import resolve_policy

    settings: Settings = ctx.obj
    policy = resolve_policy(settings.pool_policy)
    head = f"policy file: {policy.source}" if policy.source else "no policy file: static pool"
    _render(settings, policy.as_dict(), head)


def _render(settings: Settings, data: dict[str, Any], head: str) -> None:
    elastic = data["elastic"]
    rows = [_row(number, rule) for number, rule in enumerate(elastic["rules"], 1)]
    if settings.resolved_output() is not OutputFormat.table:
        emit(settings, data=data, rows=rows, columns=COLUMNS)
        return
    typer.echo(head)
    typer.echo(_health_line(data["health"]))
    for line in _summary(elastic):
        typer.echo(line)
    if rows:
        table(settings, rows, COLUMNS)
    for line in _people(data):
        typer.echo(line)


def _health_line(health: dict[str, Any]) -> str:
    from gpupoolctl.policy.values import duration_text

    back = (
        "answers again: its stale runs are killed, then it takes work again"
        if health["return_to_service"] == "auto"
        else "answers again: it stays drained until `undrain`"
    )
    return (
        f"health: a node silent {duration_text(health['node_dead_after_s'])} with running jobs "
        f"is lost (its jobs end or restart elsewhere); when it {back}"
    )


def _summary(elastic: dict[str, Any]) -> list[str]:
    from gpupoolctl.policy.values import duration_text

    if not elastic["enabled"]:
        off = ["elastic: off (no card is re-cut: the pool is static)"]
        return off + (["rules, not used while elastic is off:"] if elastic["rules"] else [])
    lines = [
        f"elastic: on; a card idle {duration_text(elastic['min_idle_s'])} may be re-cut, at "
        f"most {elastic['max_cards_per_pass']} per pass, after work waited "
        f"{duration_text(elastic['batch_window_s'])}; a failed re-cut is left out "
        f"{duration_text(elastic['backoff_s'])}"
    ]
    if not elastic["rules"]:
        lines.append("no rules: no card is elastic")
    else:
        lines.append("rules, first match wins (a card no rule matches is not re-cut):")
    return lines


def _row(number: int, rule: dict[str, Any]) -> dict[str, Any]:
    return {
        "rule": number,
        "line": rule["line"],
        "hosts": rule["hosts"] or "any",
        "vendor": rule["vendor"] or "any",
        "model": rule["model"] or "any",
        "elastic": "yes" if rule["enabled"] else "no",
        "into": _into(rule) if rule["enabled"] else "-",
        "keep_whole": rule["keep_whole"],
    }


def _into(rule: dict[str, Any]) -> str:
    parts = []
    if rule["vendor"] != "amd":
        profiles = rule["profiles"]
        parts.append("MIG " + (", ".join(profiles) if profiles else "any profile of the model"))
    if rule["vendor"] != "nvidia":
        modes = rule["amd_modes"]
        parts.append("AMD " + (", ".join(modes) if modes else "any mode the product allows"))
    return "; ".join(parts)


def _people(data: dict[str, Any]) -> list[str]:
    """Admins, teams with their quota per scope, and windows, as short lines."""
    admins, teams = data["admins"], data["teams"]["teams"]
    names = [*admins["users"], *(f"group:{g}" for g in admins["groups"])]
    if not (names or teams or data["windows"]):
        return []  # a file without these sections reads as before they existed
    lines = [f"admins: {', '.join(names)} (and root)" if names else "admins: root only"]
    if teams:
        lines.append("teams (a team without a quota is not limited):")
    for team in teams:
        members = [*team["users"], *(f"group:{g}" for g in team["groups"])]
        default = " (default: users in no team)" if team["default"] else ""
        lines.append(f"  {team['name']}{default}: {', '.join(members) or 'no members'}")
        lines.extend(f"    {_scope_text(scope)}" for scope in team["quota"])
    if data["windows"]:
        lines.append("windows (the first active one wins):")
    for window in data["windows"]:
        lines.append(
            f"  {window['name']}: {_days(window['days'])} {window['hours']} {window['timezone']}"
        )
        for team, scopes in window["teams"].items():
            lines.extend(f"    {team}, {_scope_text(scope)}" for scope in scopes)
        if window["elastic"] is not None:
            elastic = window["elastic"]
            count = len(elastic["rules"])
            state = f"on, {count} rule{'' if count == 1 else 's'}" if elastic["enabled"] else "off"
            lines.append(f"    elastic replaced: {state}")
    return lines


def _days(days: list[str]) -> str:
    """['mon', 'tue', 'wed', 'sat'] -> 'mon-wed,sat'; all seven -> 'daily'."""
    from gpupoolctl.policy.model import DAY_NAMES

    if len(days) == len(DAY_NAMES):
        return "daily"
    runs: list[list[int]] = []
    for day in sorted(DAY_NAMES.index(d) for d in days):
        if runs and runs[-1][-1] == day - 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    return ",".join(
        DAY_NAMES[run[0]] + (f"-{DAY_NAMES[run[-1]]}" if len(run) > 1 else "") for run in runs
    )


def _scope_text(scope: dict[str, Any]) -> str:
    parts = [f"{label} {scope[label]}" for label in ("site", "vendor", "model") if scope[label]]
    text = f"{', '.join(parts) or 'the whole pool'}: nominal {_vector(scope['nominal'])}"
    if scope["borrowing_limit"] is not None:
        text += f"; may borrow {_vector(scope['borrowing_limit'])} more"
    if scope["lending_limit"] is not None:
        text += f"; lends at most {_vector(scope['lending_limit'])}"
    return text


def _vector(vector: dict[str, int]) -> str:
    def amount(name: str, value: int) -> str:
        if name == "gpu-memory":
            gib = f"{value / 1024:.1f}".removesuffix(".0")
            return f"{gib} GiB GPU memory"
        return f"{value} {name}"

    return ", ".join(amount(name, value) for name, value in vector.items()) or "nothing"
