"""`gpupoolctl inventory`: hardware facts from every selected node; `inventory hosts`: the
selected hosts and their variables, without connecting."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupoolctl.cli import facts_view, pool
from gpupoolctl.cli.console import warn
from gpupoolctl.cli.render import Column, emit, table
from gpupoolctl.cli.settings import OutputFormat, Settings
from gpupoolctl.errors import ExitCode
from gpupoolctl.redact import masked

# The group's help is the callback's docstring, so `inventory --help` explains the fan-out.
app = typer.Typer(no_args_is_help=False)


@app.callback(invoke_without_command=True)
def inventory(
    ctx: typer.Context,
    topology: Annotated[
        bool, typer.Option("--topology", "-t", help="Also show each node's GPU link matrix.")
    ] = False,
    network: Annotated[
        bool,
        typer.Option(
            "--network",
            help="Show each node's network ports (kind, speed, state) and what links the "
            "sites (gpupool_site_links), instead of the GPUs.",
        ),
    ] = False,
) -> None:
    """Hardware inventory of the selected nodes: GPUs, memory, partitions, processes, links.

    One SSH connection and one remote exec per node, --forks nodes at a time.

    Prints one row per GPU (with --network, one table of NICs per node, then the links
    between sites). Nodes that could not be read are listed with the reason, and the exit
    code is then 3.
    """
    if ctx.invoked_subcommand is not None:
        return
    settings: Settings = ctx.obj
    selection = pool.select(settings)
    targets = selection.targets()
    results = pool.fan_out(settings, targets, {"v": 1, "verb": "facts", "args": {}})
    if network:
        _show_network(settings, str(selection.inventory.source), results, targets)
        _finish(results)
        return
    document = facts_view.document(str(selection.inventory.source), results)
    rows = facts_view.gpu_rows(results)
    columns = facts_view.GPU_COLUMNS if settings.verbosity > 0 else facts_view.GPU_COLUMNS[:-1]
    emit(
        settings,
        data=document,
        rows=rows,
        columns=columns,
        csv_columns=facts_view.GPU_CSV_COLUMNS,
    )
    if topology and settings.resolved_output() is OutputFormat.table:
        for result in results:
            if result.ok:
                _print_topology(settings, result.name, result.data)
    _finish(results)


def _finish(results: list[Any]) -> None:
    # On stderr whatever the format (and with -q): a CSV has no row for a host that could
    # not be read, and a script that sees exit 3 needs the reason in its log.
    for result in results:
        if not result.ok:
            warn(f"{result.name}: {result.outcome}: {result.error}")
    for name, message in facts_view.node_warnings(results):
        warn(f"{name}: {message}")
    if any(not result.ok for result in results):
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


def _show_network(settings: Settings, source: str, results: list[Any], targets: list[Any]) -> None:
    # The links are the pool's (set on `all`): every valid target carries the same ones.
    links = next((t.site_links for t in targets if not t.invalid), ())
    link_dicts = [link.to_dict() for link in links]
    document = facts_view.network_document(source, results, link_dicts)
    rows = [row for r in results if r.ok for row in facts_view.nic_rows(r.name, r.data)]
    fmt = settings.resolved_output()
    if fmt is not OutputFormat.table:
        emit(
            settings,
            data=document,
            rows=rows,
            columns=facts_view.NIC_CSV_COLUMNS,
            csv_columns=facts_view.NIC_CSV_COLUMNS,
        )
        return
    for result in results:
        if not result.ok:
            continue
        site = result.data.get("site")
        title = f"{result.name}" + (f" (site {site})" if site else "")
        nics = facts_view.nic_rows(result.name, result.data)
        if facts_view.nics_of(result.data) is None:
            title += ": its agent reports no network"
        elif not nics:
            title += ": no physical network ports found"
        table(settings, nics, facts_view.NIC_COLUMNS, title=title)
    if link_dicts:
        table(
            settings,
            facts_view.site_link_rows(link_dicts),
            facts_view.SITE_LINK_COLUMNS,
            title="site links (gpupool_site_links)",
        )
    else:
        sites = sorted({r.data.get("site") for r in results if r.ok and r.data.get("site")})
        if len(sites) > 1:
            warn(
                f"sites {', '.join(sites)}: the inventory says nothing of what links them "
                "(gpupool_site_links)"
            )


def _print_topology(settings: Settings, name: str, facts: dict[str, Any]) -> None:
    matrix = facts["topology"]["matrix"]
    if not matrix:
        return
    columns = [Column("gpu", "")] + [Column(f"g{i}", f"GPU{i}") for i in range(len(matrix))]
    rows: list[dict[str, Any]] = []
    for i, line in enumerate(matrix):
        row: dict[str, Any] = {"gpu": f"GPU{i}"}
        row.update({f"g{j}": level for j, level in enumerate(line)})
        rows.append(row)
    table(settings, rows, columns, title=f"{name} links")


@app.command("hosts")
def hosts(ctx: typer.Context) -> None:
    """List the selected hosts, their groups and merged variables, without connecting."""
    settings: Settings = ctx.obj
    selection = pool.select(settings)
    targets = selection.targets()
    data = {
        "inventory": str(selection.inventory.source),
        "hosts": [
            {
                "name": host.name,
                "groups": host.groups,
                "address": target.address or host.name,
                "port": target.port,
                "user": target.user,
                "transport": target.transport,
                "sim": target.sim.template if target.sim else None,
                "vars": masked(host.vars),  # output often ends up in CI logs
            }
            for host, target in zip(selection.hosts, targets, strict=True)
        ],
    }
    columns = [
        Column("name", "HOST"),
        Column("address", "ADDRESS"),
        Column("transport", "TRANSPORT"),
        Column("sim", "SIM"),
        Column("groups", "GROUPS"),
    ]
    rows = [
        dict(entry, groups=[g for g in entry["groups"] if g != "all"]) for entry in data["hosts"]
    ]
    if settings.verbosity > 0:
        columns.append(Column("vars", "VARS"))
    emit(settings, data=data, rows=rows, columns=columns)
