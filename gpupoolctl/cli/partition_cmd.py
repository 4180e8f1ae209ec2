"""`gpupoolctl partition`: MIG, AMD compute/memory partitions and SR-IOV, declaratively.

Exit codes: 0 done (or nothing to do); 1 a spec or hooks file is wrong, or a label selects
no GPU or asks GPUs for what they cannot do (nothing changed);
2 usage (e.g. apply without --yes when not on a terminal); 3 some hosts were unreachable, a
hook failed, or some GPUs failed (and were rolled back) or were refused (busy, held in the
ledger, changed since the plan, or another partition run holding the node); 4 (assert) the
layout does not hold.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupoolctl.cli import partition_view as view
from gpupoolctl.cli.console import error, notice, warn
from gpupoolctl.cli.partition_fanout import HostFacts, gather, send_each
from gpupoolctl.cli.render import Column, emit
from gpupoolctl.cli.settings import OutputFormat, Settings
from gpupoolctl.errors import ExitCode

if TYPE_CHECKING:
    from gpupoolctl.inventory import Inventory
    from gpupoolctl.jobs.repartition import CardWork
    from gpupoolctl.partition import HostPlan, Spec
    from gpupoolctl.partition.coverage import HostRead
    from gpupoolctl.partition.hooks import Hooks

app = typer.Typer(
    help="Partition GPUs: MIG, AMD compute/memory partitions, SR-IOV (mig-parted v1 files).",
    no_args_is_help=True,
)

SpecFile = Annotated[
    Path,
    typer.Option(
        "-f", "--file", help="Layout file: mig-parted v1 config plus gpupoolctl's additions."
    ),
]
Label = Annotated[str, typer.Option("-c", "--config", help="The mig-configs label to use.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
Force = Annotated[
    bool, typer.Option("--force", help="Act on GPUs even when processes run on them.")
]
HooksFile = Annotated[
    Path | None,
    typer.Option("--hooks", "-k", help="Hooks file (mig-parted hooks v1, or argv lists)."),
]


def _unreachable(hosts: list[HostFacts]) -> list[HostFacts]:
    down = [h for h in hosts if not h.ok]
    for host in down:
        warn(f"{host.name}: {host.result.outcome}: {host.result.error}")
    return down


def _host_entry(host: HostFacts) -> dict[str, Any]:
    return {"name": host.name, "outcome": host.result.outcome, "error": host.result.error}


def _plans(spec: Spec, label: str, hosts: list[HostFacts]) -> list[HostPlan]:
    from gpupoolctl.partition import plan_host

    plans = [plan_host(spec, label, h.name, h.host.groups, h.facts) for h in hosts if h.ok]
    for message in dict.fromkeys(w for p in plans for w in p.warnings):
        warn(message)
    return plans


def _read(hosts: list[HostFacts]) -> list[HostRead]:
    from gpupoolctl.partition.coverage import HostRead

    return [HostRead(h.name, h.host.groups, h.facts) for h in hosts if h.ok]


def _known(inventory: Inventory) -> list[tuple[str, list[str]]]:
    return [(host.name, host.groups) for host in inventory.hosts.values()]


def _label_errors(
    spec: Spec, label: str, inventory: Inventory, hosts: list[HostFacts]
) -> list[str]:
    """What the label is refused for across the hosts read (an entry that selects no GPU,
    or asks GPUs for what none of them can do; a label that selects nothing); entries
    whose hosts: the inventory does not know are said on stderr."""
    from gpupoolctl.partition.coverage import label_errors

    where = Path(str(inventory.source)).name
    errors, warnings = label_errors(spec, label, _read(hosts), _known(inventory), where)
    for message in warnings:
        warn(message)
    return [str(e) for e in errors]


def _load_spec_first(spec_file: Path, label: str) -> Spec:
    """Read the file (once) before contacting any host: a typo costs nothing, and an unknown
    label is an error before any host is asked."""
    from gpupoolctl.partition import load_spec

    spec = load_spec(spec_file)
    spec.config(label)
    return spec


def _load_hooks_first(hooks_file: Path | None) -> Hooks | None:
    """Read the hooks file (once) before contacting any host."""
    if hooks_file is None:
        return None
    from gpupoolctl.partition.hooks import load_hooks

    return load_hooks(hooks_file)


# --- profiles / show ----------------------------------------------------------------------


@app.command("profiles")
def profiles(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Only these models: a catalog key or name, or a part of one as people say "
            "it (H100, a100, mi300x), any case.",
        ),
    ] = None,
) -> None:
    """What each card can be cut into: the catalog, or with -l the nodes' own drivers.

    A model that can be cut into nothing (an L40S: no MIG, no AMD modes) is said so in one
    line.

    With hosts selected by -l/--limit, every MIG GPU's profile table is read from its driver
    (it wins over the catalog on real hardware) and each difference from the catalog is
    reported.
    """
    settings: Settings = ctx.obj
    table = settings.resolved_output() is OutputFormat.table
    if settings.limit is None:
        from gpupoolctl.partition.profiles import profile_table

        models, rows = profile_table(model)
        data = {"source": "catalog", "models": models, "profiles": rows}
        if rows or not table:
            emit(settings, data=data, rows=rows, columns=view.PROFILE_COLUMNS)
        else:
            sys.stdout.write(view.no_profiles_text(models) + "\n")
        return
    from gpupoolctl.partition.profiles import compare_with_catalog

    _, hosts = gather(settings)
    rows, differences = compare_with_catalog(hosts, model)
    data = {
        "source": "driver",
        "hosts": [_host_entry(h) for h in hosts],
        "profiles": rows,
        "differences": differences,
    }
    if rows or not table:
        emit(settings, data=data, rows=rows, columns=view.HOST_PROFILE_COLUMNS)
    else:
        which = f" {model}" if model else ""
        sys.stdout.write(f"no MIG-capable{which} GPU on the selected hosts\n")
    if table:
        for line in differences:
            warn(f"differs from the catalog: {line}")
    if _unreachable(hosts):
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


@app.command("show")
def show(ctx: typer.Context) -> None:
    """Current slices on every selected GPU: MIG instances and placements, AMD modes, VFs."""
    from gpupoolctl.cli.facts_view import partition_text

    settings: Settings = ctx.obj
    _, hosts = gather(settings)
    rows = []
    documents = []
    for host in hosts:
        gpus = host.facts.get("gpus") or []
        documents.append(
            {
                **_host_entry(host),
                "gpus": [
                    {
                        key: gpu.get(key)
                        for key in ("index", "uuid", "model", "vendor", "mig", "partition", "sriov")
                    }
                    for gpu in gpus
                ],
            }
        )
        for gpu in gpus:
            rows.append(
                {
                    "host": host.name,
                    "gpu": gpu["index"],
                    "model": gpu.get("model"),
                    "state": partition_text(gpu),
                    "instances": view.instances_text(gpu),
                    "processes": len(gpu.get("processes") or []),
                }
            )
    for document in documents:
        for gpu in document["gpus"]:
            if gpu.get("mig"):
                gpu["mig"] = {k: v for k, v in gpu["mig"].items() if k != "profiles"}
    emit(settings, data={"hosts": documents}, rows=rows, columns=view.SHOW_COLUMNS)
    if _unreachable(hosts):
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


# --- plan / apply / reset -----------------------------------------------------------------


def _emit_plans(
    settings: Settings, plans: list[HostPlan], hosts: list[HostFacts], extra: dict[str, Any]
) -> None:
    by_name = {plan.host: plan for plan in plans}
    data = {
        **extra,
        "hosts": [
            {
                **_host_entry(h),
                "changed": by_name[h.name].changed if h.name in by_name else None,
                "errors": by_name[h.name].errors if h.name in by_name else [],
                "warnings": by_name[h.name].warnings if h.name in by_name else [],
                "gpus": [view.gpu_plan_dict(g) for g in by_name[h.name].gpus]
                if h.name in by_name
                else [],
            }
            for h in hosts
        ],
    }
    fmt = settings.resolved_output()
    if fmt is OutputFormat.table:
        view.write_plan_text(plans, verbose=settings.verbosity > 0)
        return
    rows = view.plan_rows(plans, verbose=fmt is OutputFormat.csv)
    emit(
        settings, data=data, rows=rows, columns=view.PLAN_COLUMNS, csv_columns=view.PLAN_CSV_COLUMNS
    )


def _errors_exit(plans: list[HostPlan], verbose: bool, label_errors: list[str]) -> None:
    """Spec errors end the command with exit 1 before anything changes: the first one (it
    names file:line and the valid choices), then how many more (all of them with -v)."""
    errors = list(dict.fromkeys([*label_errors, *(e for plan in plans for e in plan.errors)]))
    if not errors:
        return
    for message in errors if verbose else errors[:1]:
        error(message)
    if len(errors) > 1 and not verbose:
        error(f"... and {len(errors) - 1} more (-v lists them); nothing was changed")
    raise typer.Exit(int(ExitCode.ERROR))


@app.command("plan")
def plan(ctx: typer.Context, spec_file: SpecFile, label: Label) -> None:
    """Show, per host and GPU, what `apply` would change and the ordered operations.

    Nothing changes. Exit 1 when the file is wrong or asks for something impossible
    (file:line and the valid choices on stderr): an entry that selects no GPU on the hosts
    its hosts: name, or asks the GPUs it selects for what none of them has (MIG of an L40S,
    AMD modes of an NVIDIA card), or a label that selects no GPU on the hosts read (naming
    the entries whose hosts: the inventory does not know; elsewhere those are warnings, as
    one file may serve several inventories). 3 when some hosts could not be read.
    """
    settings: Settings = ctx.obj
    spec = _load_spec_first(spec_file, label)
    inventory, hosts = gather(settings)
    plans = _plans(spec, label, hosts)
    errors = _label_errors(spec, label, inventory, hosts)
    failed = bool(errors) or any(p.errors for p in plans)
    if not failed or settings.resolved_output() is not OutputFormat.table:
        extra = {"file": str(spec_file), "label": label, "errors": errors}
        _emit_plans(settings, plans, hosts, extra)
    _errors_exit(plans, settings.verbosity > 0, errors)
    if _unreachable(hosts):
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


def _require_consent(yes: bool) -> None:
    if not yes and not sys.stdin.isatty():
        error("partition changes need --yes when not run from a terminal (nothing was changed)")
        raise typer.Exit(int(ExitCode.USAGE))


def _confirm(plans: list[HostPlan], yes: bool) -> None:
    if yes:
        return
    from gpupoolctl.partition.reach import spans

    changing = [p for p in plans if p.changed]
    gpus = sum(1 for p in changing for g in p.gpus if not g.unchanged)
    for p in changing:
        for g in p.gpus:
            if not g.unchanged:
                also = f", also changes GPU(s) {spans(g.also_changes)}" if g.also_changes else ""
                sys.stderr.write(
                    f"  {p.host} GPU {g.index}: {g.current} -> {g.desired} "
                    f"({len(g.ops)} ops{also})\n"
                )
    if not typer.confirm(f"Change {gpus} GPU(s) on {len(changing)} host(s)?", err=True):
        error("nothing was changed")
        raise typer.Exit(int(ExitCode.ERROR))


def _execute(
    settings: Settings,
    inventory: Inventory,
    hosts: list[HostFacts],
    plans: list[HostPlan],
    *,
    yes: bool,
    force: bool,
    hooks: Hooks | None,
    extra: dict[str, Any],
    reason: str,
    label_errors: list[str] | None = None,
) -> None:
    """Confirm, then carry the plans out through the executor elastic re-cuts use too
    (jobs.repartition: every card reserved in the ledger before it is touched, holds checked
    again under the ledger lock, one request per host, the new slices recorded); print the
    outcome per GPU, exit."""
    from gpupoolctl.jobs.repartition import apply_plans
    from gpupoolctl.partition.outcome import merge_outcomes

    _errors_exit(plans, settings.verbosity > 0, label_errors or [])
    work = _card_work(settings, inventory)
    withheld = [] if force or work.ledger is None else _keep_held_gpus(work, plans)
    for message in withheld:
        warn(message)
    changing = [p for p in plans if p.changed]
    down = _unreachable(hosts)
    if not changing and withheld:
        warn(
            f"nothing was changed: {len(withheld)} GPU(s) left as they are because the "
            "ledger says their slices are held (each named above)"
        )
    elif not changing:
        notice("nothing to change: every selected GPU is already as asked", quiet=settings.quiet)
    else:
        _confirm(plans, yes)
    facts = {h.name: h.facts for h in hosts if h.ok}
    try:
        applied = apply_plans(
            work, plans, facts, reason=reason, force=force, hooks_argv=hooks or None
        )
    except KeyboardInterrupt:
        sent = ", ".join(p.host for p in changing)
        their = "its" if len(changing) == 1 else "their"
        error(
            f"interrupted: {sent} may still be changing {their} GPUs; the cards stay reserved "
            "in the ledger until a later `partition apply` or `schedule` reads them again"
            if work.ledger is not None
            else f"interrupted: {sent} may still be changing {their} GPUs; "
            "`partition show` says what they are now"
        )
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    for message in applied.refused:
        warn(message)
    for message in work.warnings:
        warn(message)
    merged = merge_outcomes(plans, applied.answers)
    failed_requests = set(merged.failed_requests)
    for entry in merged.hosts:
        if entry["name"] in failed_requests:
            warn(f"{entry['name']}: {entry['outcome']}: {entry['error']}")
        for hook in entry["hooks"]:
            if not hook["ok"]:
                warn(f"{entry['name']}: hook {hook['hook']} {hook['argv'][0]}: {hook['error']}")
        for message in entry["warnings"]:
            warn(f"{entry['name']}: {message}")
    rows = view.outcome_rows(merged.hosts)
    documents = merged.hosts + [_host_entry(h) | {"changed": None, "gpus": []} for h in down]
    emit(settings, data={**extra, "hosts": documents}, rows=rows, columns=view.OUTCOME_COLUMNS)
    if merged.failed or down or withheld or applied.refused:
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


def _card_work(settings: Settings, inventory: Inventory) -> CardWork:
    """The executor's ledger (None where none is kept: partitioning does not start one)
    and nodes (every host of the inventory: a reservation left by an interrupted run may be
    on a host outside -l). Reservations left by runs that ended are closed first."""
    from gpupoolctl.cli.handles import open_ledger
    from gpupoolctl.jobs import Nodes
    from gpupoolctl.jobs.repartition import CardWork, recover
    from gpupoolctl.remote.target import target_from_vars

    ledger = open_ledger(settings)
    everyone = [target_from_vars(h.name, h.vars) for h in inventory.select(None)]
    nodes = Nodes(everyone, lambda requests: send_each(settings, requests))
    work = CardWork(ledger if ledger.path.exists() else None, nodes)
    recover(work)
    return work


def _keep_held_gpus(work: CardWork, plans: list[HostPlan]) -> list[str]:
    """Drop the changes to GPUs whose slices the ledger says are held, before asking for
    confirmation; say which (the executor checks again under the ledger lock)."""
    from gpupoolctl.partition.guard import held_gpus, keep_held_gpus

    assert work.ledger is not None
    view = work.ledger.read()
    return keep_held_gpus(plans, held_gpus(view.state, view.now))


@app.command("apply")
def apply(
    ctx: typer.Context,
    spec_file: SpecFile,
    label: Label,
    yes: Yes = False,
    force: Force = False,
    hooks_file: HooksFile = None,
) -> None:
    """Make the selected GPUs match the label: only GPUs that differ are touched.

    GPUs with running processes, or whose slices the ledger says are held, are refused
    unless --force. Each card is reserved in the ledger before it is touched (nothing is
    placed on it meanwhile) and its new slices recorded after. A host with a card another
    run has reserved, or a GPU of the plan that changed since it was made, is left whole.
    If a step fails on a GPU, that GPU's previous layout is restored; other GPUs and hosts
    carry on. Asks before changing anything on a terminal; elsewhere --yes is required
    (exit 2 without it). Exit 1, before anything changes, for what `plan` refuses (a wrong
    file, an entry or label that selects no GPU or asks the impossible); 3 when a host was
    unreachable or a GPU failed or was refused; 130 on Ctrl-C (the nodes may still be
    changing: their cards stay reserved until a later apply or scheduling pass reads them).
    """
    settings: Settings = ctx.obj
    _require_consent(yes)
    spec = _load_spec_first(spec_file, label)
    hooks = _load_hooks_first(hooks_file)
    inventory, hosts = gather(settings)
    plans = _plans(spec, label, hosts)
    _execute(
        settings,
        inventory,
        hosts,
        plans,
        yes=yes,
        force=force,
        hooks=hooks,
        extra={"file": str(spec_file), "label": label},
        reason=f"partition apply -c {label}",
        label_errors=_label_errors(spec, label, inventory, hosts),
    )


@app.command("reset")
def reset(
    ctx: typer.Context, yes: Yes = False, force: Force = False, hooks_file: HooksFile = None
) -> None:
    """Back to whole cards: MIG off, AMD SPX/NPS1, no SR-IOV VFs.

    As with apply, GPUs with running processes or slices held in the ledger are left as
    they are unless --force, each named with what holds it (the allocation, its owner and
    job); exit 3 when any GPU was so refused, failed, or a host was unreachable.
    """
    from gpupoolctl.partition import reset_plan

    settings: Settings = ctx.obj
    _require_consent(yes)
    hooks = _load_hooks_first(hooks_file)
    inventory, hosts = gather(settings)
    plans = [reset_plan(h.name, h.facts) for h in hosts if h.ok]
    _execute(
        settings,
        inventory,
        hosts,
        plans,
        yes=yes,
        force=force,
        hooks=hooks,
        extra={"label": "reset"},
        reason="partition reset",
    )


# --- assert / export ----------------------------------------------------------------------


@app.command("assert")
def assert_(ctx: typer.Context, spec_file: SpecFile, label: Label) -> None:
    """Exit 0 when every selected host holds the label, 4 when not (each mismatch listed,
    and each entry that selects no GPU or asks what none of its GPUs can do), 3 when some
    hosts could not be read."""
    from gpupoolctl.partition import assert_host, load_spec
    from gpupoolctl.partition.coverage import entry_problems, nothing_selected

    settings: Settings = ctx.obj
    spec = load_spec(spec_file)
    spec.config(label)
    inventory, hosts = gather(settings)
    rows = []
    for host in hosts:
        if host.ok:
            mismatches = assert_host(spec, label, host.name, host.host.groups, host.facts)
            rows += [{"host": host.name, "mismatch": m} for m in mismatches]
    read = _read(hosts)
    where = Path(str(inventory.source)).name
    coverage = entry_problems(spec, label, read, _known(inventory), where)
    for problem in coverage.unknown_hosts:
        warn(str(problem))
    for problem in coverage.errors:
        rows.append({"host": None, "mismatch": str(problem)})
    if nothing_selected(spec, label, read):
        rows.append(
            {
                "host": None,
                "mismatch": f"{label} selects no GPU on the hosts read: nothing holds "
                "(check its hosts:, devices: and device-filter:)",
            }
        )
    data = {
        "file": str(spec_file),
        "label": label,
        "holds": not rows,
        "hosts": [
            {**_host_entry(h), "mismatches": [r["mismatch"] for r in rows if r["host"] == h.name]}
            for h in hosts
        ],
    }
    fmt = settings.resolved_output()
    if fmt is OutputFormat.table:
        for row in rows:
            sys.stdout.write(f"{row['mismatch']}\n")
        if not rows:
            notice(f"{label}: holds on every host read", quiet=settings.quiet)
    else:
        emit(
            settings,
            data=data,
            rows=rows,
            columns=(Column("host", "HOST"), Column("mismatch", "MISMATCH")),
        )
    down = _unreachable(hosts)
    if rows:
        raise typer.Exit(int(ExitCode.CHECK_FAILED))
    if down:
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


@app.command("export")
def export(
    ctx: typer.Context,
    label: Annotated[
        str, typer.Option("--config-label", help="The label to write the state under.")
    ] = "current",
) -> None:
    """The current state as a v1 config (YAML; JSON with -o json) that apply/assert accept.
    The same command as `gpupoolctl export mig-parted`: nothing is printed when a host could
    not be read (exit 3), as a config kept to restore from must not silently lack hosts."""
    from gpupoolctl.cli.export_cmd import mig_parted

    mig_parted(ctx, label)
