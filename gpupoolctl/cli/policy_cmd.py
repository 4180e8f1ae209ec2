"""`gpupoolctl policy`: check and show the pool policy file (what the scheduling loop may do)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupoolctl.cli.render import Column, emit, table
from gpupoolctl.cli.settings import OutputFormat, Settings
from gpupoolctl.errors import UsageError

app = typer.Typer(
    help="The pool policy file: which cards the scheduling loop may re-cut (elastic), into "
    "what, how often; when a silent node is lost (health).",
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
    """Validate a pool policy file and summarize what it allows.

    Exit 0 when it is valid; 1 with one line naming FILE:LINE when it is not; 2 when there
    is no file to check.
    """
    from gpupoolctl.policy.load import load_policy
    from gpupoolctl.policy.where import default_policy_path, policy_path

    settings: Settings = ctx.obj
    if file is not None and not file.strip():
        raise UsageError("FILE must not be empty")
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
    ~/.config/gpupoolctl/pool.yaml) and what it allows; without one, a static pool."""
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
