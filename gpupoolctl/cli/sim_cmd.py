"""`gpupoolctl sim`: manage the simulated nodes (hosts whose vars say `sim: <template>`)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpupoolctl.cli import pool
from gpupoolctl.cli.console import warn
from gpupoolctl.cli.render import Column, emit
from gpupoolctl.cli.settings import Settings
from gpupoolctl.errors import ExitCode, UsageError

app = typer.Typer(
    help="Simulated hardware: reset nodes, inject health faults, list templates.",
    no_args_is_help=True,
)


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


@app.command("fault")
def fault(
    ctx: typer.Context,
    target: Annotated[
        str, typer.Argument(metavar="HOST|HOST/gpuN", help="A simulated host or card.")
    ],
    faults: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[FAULT]...",
            help="xid=N, ecc=N, ecc-deferred=N, row-remap=pending|failed, retired-pages=pending, "
            "bad-pages=N, ring-hang, reset, temp=C, lost, node-down.",
        ),
    ] = None,
    clear: Annotated[
        bool,
        typer.Option("--clear", help="Remove the faults of the card (or of the whole host)."),
    ] = False,
) -> None:
    """Inject health faults into a simulated node (its state file, through its agent).

    The fake pynvml/amdsmi then answer the real health calls from them, so `health` and
    `inventory` see what a real card would show. `node-down` makes the host stop answering
    (unreachable; what runs there goes on); `--clear` on the host brings it back.
    """
    from gpupoolctl.sim.faults import FaultError, parse_faults

    settings: Settings = ctx.obj
    host, gpu = _fault_target(target)
    if clear and faults:
        raise UsageError("give faults or --clear, not both")
    if not clear:
        try:
            parse_faults(list(faults or []))
        except FaultError as exc:
            raise UsageError(str(exc)) from None
    inventory = pool.load(settings)
    chosen = [h for h in inventory.select(None) if h.name == host]
    if not chosen:
        raise UsageError(f"no host {host!r} in {inventory.source}")
    from gpupoolctl.remote.target import target_from_vars

    node = target_from_vars(chosen[0].name, chosen[0].vars)
    if node.sim is None:
        raise UsageError(f"{host} is real hardware (no `sim:` var): faults are for simulated nodes")
    args = {"gpu": gpu, "faults": list(faults or []), "clear": clear}
    (result,) = pool.fan_out(settings, [node], {"v": 1, "verb": "sim_fault", "args": args})
    if result.error_type == "BadFault":
        raise UsageError(f"{target}: {str(result.error).removeprefix('BadFault: ')}")
    row = {
        "target": target,
        "faults": "cleared" if clear else ",".join(faults or []),
        "outcome": result.outcome,
        "error": result.error,
    }
    columns = [
        Column("target", "TARGET"),
        Column("faults", "FAULTS"),
        Column("outcome", "OUTCOME"),
        Column("error", "ERROR"),
    ]
    emit(settings, data=row, rows=[row], columns=columns)
    if not result.ok:
        warn(f"{host}: {result.outcome}: {result.error}")
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


def _fault_target(text: str) -> tuple[str, int | None]:
    host, sep, card = text.partition("/")
    if not host:
        raise UsageError(f"bad target {text!r}: use HOST or HOST/gpuN")
    if not sep:
        return host, None
    if not card.startswith("gpu") or not card[3:].isdigit():
        raise UsageError(f"bad target {text!r}: use HOST or HOST/gpuN (gpu0, gpu1, ...)")
    return host, int(card[3:])


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
