"""`gpupoolctl export`: the pool in the formats of the tools people run at scale.

Each target is one command function below: it reads what it needs (facts from the selected
nodes with `_read_nodes`, the ledger with `_read_ledger`), calls its library module under
gpupoolctl.export, writes the target's own format with `_write`, and ends with exit 3 when
some hosts could not be read. What it prints then depends on what reads it:

- output that is applied as the whole truth (the k8s ConfigMap and its commands, the
  mig-parted config) is not printed at all (`_refuse_partial`): in `export k8s | kubectl
  apply -f -` the exit status is lost, and the applied ConfigMap would drop the configs
  that unread nodes' labels still name;
- -o json/yaml documents carry each host's outcome, so what is known is printed
  (`_exit_if_unreachable`);
- the Ansible inventory is printed whole: its groups, hosts and vars come from the inventory
  file, and an unread node only lacks its gpupool_ facts (absent, never wrong).

Adding a target is adding one such decorated function.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupoolctl.cli import pool
from gpupoolctl.cli.console import notice, warn
from gpupoolctl.cli.settings import OutputFormat, Settings
from gpupoolctl.errors import ExitCode, GpupoolError, UsageError

if TYPE_CHECKING:
    from gpupoolctl.cli.partition_fanout import HostFacts
    from gpupoolctl.inventory import Inventory
    from gpupoolctl.ledger import View
    from gpupoolctl.partition import Spec

app = typer.Typer(
    help="Export the pool for other tools: Kubernetes (GPU operator), mig-parted, "
    "Prometheus (node_exporter textfile), Ansible (dynamic inventory).",
    no_args_is_help=True,
)


# -- shared steps --------------------------------------------------------------------------


def _read_nodes(settings: Settings, only: str | None = None) -> tuple[Inventory, list[HostFacts]]:
    """The inventory, and the facts of every selected host (read or not); with `only`, of
    that host alone when it is selected (no other host is contacted)."""
    from gpupoolctl.cli.partition_fanout import HostFacts

    selection = pool.select(settings)
    if only is not None:
        selection = pool.Selection(
            selection.inventory, [h for h in selection.hosts if h.name == only]
        )
    targets = selection.targets()
    results = (
        pool.fan_out(settings, targets, {"v": 1, "verb": "facts", "args": {}}) if targets else []
    )
    hosts = [
        HostFacts(host, target, result)
        for host, target, result in zip(selection.hosts, targets, results, strict=True)
    ]
    return selection.inventory, hosts


def _load_inventory(settings: Settings) -> Inventory:
    """The inventory alone, without contacting any host."""
    inventory = pool.load(settings)
    for message in inventory.warnings:
        warn(message)
    return inventory


def _facts(hosts: list[HostFacts]) -> dict[str, dict[str, Any]]:
    """Facts of the hosts that could be read, in inventory order."""
    return {host.name: host.facts for host in hosts if host.ok}


def _outcomes(hosts: list[HostFacts]) -> list[dict[str, Any]]:
    return [{"name": h.name, "outcome": h.result.outcome, "error": h.result.error} for h in hosts]


def _exit_if_unreachable(hosts: list[HostFacts]) -> None:
    """Exit 3 after the export was printed, naming each host left out of it."""
    down = [host for host in hosts if not host.ok]
    for host in down:
        warn(f"{host.name}: {host.result.outcome}: {host.result.error} (left out of the export)")
    if down:
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


def _refuse_partial(hosts: list[HostFacts], target: str) -> None:
    """Exit 3 before anything is printed when some host could not be read: one line per
    host on stderr. For output that is applied as the whole pool's state, where a host left
    out means its configuration is removed."""
    down = [host for host in hosts if not host.ok]
    for host in down:
        warn(
            f"{host.name}: {host.result.outcome}: {host.result.error} (export {target} "
            "printed nothing: it would leave this host out)"
        )
    if down:
        raise typer.Exit(int(ExitCode.HOSTS_FAILED))


def _read_ledger(settings: Settings) -> View:
    """The ledger's current state (never written); its warnings go to stderr."""
    from gpupoolctl.cli.handles import open_ledger

    ledger = open_ledger(settings)
    try:
        if not ledger.path.exists():
            notice(f"no ledger at {ledger.path}: nothing allocated yet", quiet=settings.quiet)
        view = ledger.read()
    finally:
        ledger.close()
    for message in view.warnings:
        warn(message)
    return view


def _write(text: str) -> None:
    sys.stdout.write(text)


def _structured(settings: Settings, data: Any) -> None:
    from gpupoolctl.cli.render import emit

    emit(settings, data=data, rows=[], columns=[])


def _refuse_output(settings: Settings, allowed: tuple[OutputFormat, ...], target: str) -> None:
    """-o values a target has no meaning for are usage errors, not silently ignored."""
    if settings.output not in (OutputFormat.auto, OutputFormat.table, *allowed):
        names = ", ".join(f.value for f in allowed) or "none"
        raise UsageError(
            f"export {target} writes its own format; -o {settings.output.value} does not "
            f"apply (allowed: {names})"
        )


# -- k8s -----------------------------------------------------------------------------------


class K8sFormat(StrEnum):
    manifest = "manifest"
    commands = "commands"


@app.command("k8s")
def k8s(
    ctx: typer.Context,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="The GPU operator's namespace.")
    ] = "gpu-operator",
    output_format: Annotated[
        K8sFormat,
        typer.Option(
            "--format",
            help="manifest: YAML for `kubectl apply -f -` (the ConfigMap); commands: a shell "
            "script that applies it and labels every node.",
        ),
    ] = K8sFormat.manifest,
    pool_name: Annotated[
        str | None,
        typer.Option(
            "--pool", help="Value of the gpupoolctl.io/pool label. Default: the inventory's name."
        ),
    ] = None,
    layouts_file: Annotated[
        Path | None,
        typer.Option(
            "-f",
            "--file",
            help="A layouts file (as for `partition apply`): also write each of its labels "
            "as a config under its own name (inference, training), for switching a node by "
            "relabelling it.",
        ),
    ] = None,
) -> None:
    """Node labels and a mig-parted ConfigMap for NVIDIA's GPU operator (mig-manager).

    The ConfigMap gpupoolctl-mig-parted-config holds config.yaml: a mig-parted v1 config
    with one named config per distinct current MIG layout (plus all-disabled). A node's
    label nvidia.com/mig.config=NAME makes mig-manager apply that config there; other labels
    (gpupoolctl.io/pool, host, gpu.vendor, gpu.model, gpu.count, islands) are informational.
    A host's inventory var k8s_node_name names its Kubernetes node (default: the host name).

    Labels are not written as Node objects: `kubectl apply` of a partial Node would create
    a phantom node wherever a name is missing. So:

    \b
      gpupoolctl export k8s | kubectl apply -f -      # the ConfigMap
      gpupoolctl export k8s --format commands | sh    # the ConfigMap, then kubectl label
      gpupoolctl export k8s -o yaml                   # for tools: ConfigMap and labels

    Point the operator at the ConfigMap with
    --set migManager.config.name=gpupoolctl-mig-parted-config. Applying replaces the
    previous ConfigMap, so export the whole pool: with -l, configs still named by nodes
    left out would vanish. For the same reason, when some hosts could not be read the
    manifest and the commands are not printed at all (exit 3, each host named on stderr);
    -o json/yaml still gives the hosts read, with every host's outcome (exit 3).

    With -f FILE, the ConfigMap also holds every label of that layouts file as a config of
    the same name, in the fields mig-parted accepts: each entry's hosts: becomes the
    device-filter of the cards it selects on them, placements become counts, and AMD
    partitions and SR-IOV VFs are left out (each said on stderr). Each node is labelled
    with the first of the file's labels that holds on it now (else its current-state
    config), so applying changes nothing; the day/night switch is then a relabel:

    \b
      gpupoolctl export k8s -f playbooks/layouts.yaml --format commands | sh
      kubectl label node sg-dgx01 nvidia.com/mig.config=inference --overwrite

    Exit 1, printing nothing, when a label cannot be written so (a host selection that
    other nodes' cards would match too, a label that does not plan on some node, an entry
    that selects no GPU), or is no valid label value.
    """
    from gpupoolctl.export.k8s import NODE_NAME_VAR, check_namespace, k8s_export

    settings: Settings = ctx.obj
    _refuse_output(settings, (OutputFormat.json, OutputFormat.yaml), "k8s")
    check_namespace(namespace)
    spec = _load_layouts_first(layouts_file)
    inventory, hosts = _read_nodes(settings)
    structured = settings.output in (OutputFormat.json, OutputFormat.yaml)
    if not structured:
        _refuse_partial(hosts, "k8s")
    node_names = {
        h.name: str(h.host.vars[NODE_NAME_VAR]) for h in hosts if h.host.vars.get(NODE_NAME_VAR)
    }
    layouts = _layouts(spec, inventory, hosts) if spec is not None else None
    export = k8s_export(
        _facts(hosts),
        pool=pool_name or Path(inventory.source).stem,
        namespace=namespace,
        node_names=node_names,
        layouts=layouts,
    )
    if structured:
        _structured(settings, {**export.to_dict(), "hosts": _outcomes(hosts)})
    elif output_format is K8sFormat.commands:
        _write(export.commands())
    else:
        _write(export.manifest())
    _exit_if_unreachable(hosts)


def _load_layouts_first(path: Path | None) -> Spec | None:
    """Read the layouts file, and check its labels can name configs, before any host is
    contacted."""
    if path is None:
        return None
    from gpupoolctl.export.k8s import check_config_label
    from gpupoolctl.partition import load_spec

    spec = load_spec(path)
    for label in spec.labels:
        check_config_label(label, spec.source)
    return spec


def _layouts(
    spec: Spec, inventory: Inventory, hosts: list[HostFacts]
) -> dict[str, list[dict[str, Any]]]:
    """The file's labels for mig-parted; exit 1 (printing nothing) when one cannot be."""
    from gpupoolctl.export.migparted import layouts_for_mig_parted
    from gpupoolctl.partition.coverage import HostRead

    read = [HostRead(h.name, h.host.groups, h.facts) for h in hosts if h.ok]
    known = [(host.name, host.groups) for host in inventory.hosts.values()]
    written = layouts_for_mig_parted(spec, read, known, Path(str(inventory.source)).name)
    if written.errors:
        more = len(written.errors) - 1
        raise GpupoolError(written.errors[0] + (f" (and {more} more)" if more else ""))
    for message in written.warnings:
        warn(message)
    return written.configs


# -- mig-parted ----------------------------------------------------------------------------


@app.command("mig-parted")
def mig_parted(
    ctx: typer.Context,
    label: Annotated[
        str, typer.Option("--config-label", help="The label to write the state under.")
    ] = "current",
) -> None:
    """The current layout as a mig-parted v1 config (YAML; JSON with -o json).

    The same document as `gpupoolctl partition export`: GPUs in the same state grouped per
    device id, and, when hosts differ, each entry naming its hosts (gpupoolctl's addition,
    like AMD partitions and SR-IOV). `gpupoolctl partition apply -f FILE -c current` on the
    same hosts changes nothing; keep it to restore today's layout later:

    \b
      gpupoolctl export mig-parted > layout-$(date +%F).yaml

    When some hosts could not be read nothing is printed (exit 3, each host named on
    stderr): a config without them, kept to restore from, would silently lack their layout.
    The JSON form is the same config, with no per-host outcome, so it is refused too.
    """
    import json

    import yaml

    from gpupoolctl.partition import export_config

    settings: Settings = ctx.obj
    _refuse_output(settings, (OutputFormat.json, OutputFormat.yaml), "mig-parted")
    _, hosts = _read_nodes(settings)
    _refuse_partial(hosts, "mig-parted")
    config = export_config(_facts(hosts), label=label)
    # Written exactly as `partition export` writes it: one document, whichever command.
    if settings.resolved_output() is OutputFormat.json:
        _write(json.dumps(config, indent=2) + "\n")
    else:
        _write(yaml.safe_dump(config, sort_keys=False, default_flow_style=False))


# -- prometheus ----------------------------------------------------------------------------


@app.command("prometheus")
def prometheus(
    ctx: typer.Context,
    textfile: Annotated[
        Path | None,
        typer.Option(
            "--textfile",
            metavar="<path>",
            help="node_exporter's textfile folder: writes DIR/gpupoolctl.prom atomically. "
            "Default: stdout.",
        ),
    ] = None,
    stress: Annotated[
        list[Path] | None,
        typer.Option("--stress", help="A saved stress run (gpupoolctl-stress/1 JSON); repeatable."),
    ] = None,
) -> None:
    """Pool and stress metrics in Prometheus' text format, for node_exporter's textfile
    collector (--collector.textfile.directory).

    From the ledger (no node is contacted): gpupoolctl_slices and
    gpupoolctl_slice_memory_bytes by host, kind, profile and state (free/held),
    gpupoolctl_allocations_held, gpupoolctl_jobs by state, gpupoolctl_queue_entries,
    gpupoolctl_ledger_records_total, gpupoolctl_ledger_problems and
    gpupoolctl_ledger_read_timestamp_seconds; gpupoolctl_usage_gpu_hours_total and
    gpupoolctl_usage_gib_hours_total by team and user (the ledger's running totals; see
    `gpupoolctl usage` for any period). With --stress, per scenario and level:
    gpupoolctl_stress_throughput_jobs_per_second, gpupoolctl_stress_queue_wait_p95_seconds,
    gpupoolctl_stress_failure_ratio; per scenario the knees (gpupoolctl_stress_knee_level,
    method kneedle, usl or latency) and gpupoolctl_stress_run_timestamp_seconds.

    From cron, every minute:

    \b
      * * * * *  gpupoolctl -q export prometheus --textfile /var/lib/node_exporter/textfile

    The file is replaced atomically, so the collector never reads half of it.
    """
    import time

    from gpupoolctl.export.prometheus import pool_families, render
    from gpupoolctl.ledger.units import parse_ts
    from gpupoolctl.stress.prometheus import stress_families
    from gpupoolctl.stress.result import load

    settings: Settings = ctx.obj
    _refuse_output(settings, (), "prometheus")
    runs = [(str(path), load(path)) for path in stress or []]
    view = _read_ledger(settings)
    try:
        read_at = parse_ts(view.now).timestamp()
    except UsageError:
        read_at = time.time()
    from gpupoolctl.export.prometheus import usage_families

    families = [
        *pool_families(view.state, view.now, read_at),
        *usage_families(view.state, view.now),
    ]
    text = render([*families, *stress_families(runs)])
    if textfile is None:
        _write(text)
        return
    from gpupoolctl.export.prometheus import write_textfile

    written = write_textfile(textfile, text)
    notice(f"wrote {written}", quiet=settings.quiet)


# -- ansible -------------------------------------------------------------------------------


@app.command("ansible")
def ansible(
    ctx: typer.Context,
    facts: Annotated[
        bool,
        typer.Option(
            "--facts/--no-facts",
            help="Read the selected nodes for gpupool_gpus, _vendor, _model, _islands, _mig "
            "(--no-facts: no connection, only the inventory and the ledger).",
        ),
    ] = True,
    list_: Annotated[
        bool, typer.Option("--list", help="Print the whole inventory (the default).")
    ] = False,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Print one host's vars (Ansible's script protocol)."),
    ] = None,
) -> None:
    """The inventory as `ansible-inventory --list` JSON, with gpupoolctl's facts as vars.

    Groups, hosts and vars are what ansible-inventory prints for the same inventory; each
    host also gets gpupool_slices from the ledger (id, kind, profile, gpu, memory_mib,
    state) and, from its node, gpupool_gpus, gpupool_vendor, gpupool_model, gpupool_islands
    and gpupool_mig. Where the inventory already sets such a var, its value is kept. The
    whole inventory is exported; -l only limits which nodes are read.

    Save it, or use gpupoolctl as a dynamic inventory script (pool.sh, executable):

    \b
      gpupoolctl export ansible > pool.json
      printf '#!/bin/sh\\nexec gpupoolctl -q -i fleet.yaml export ansible --no-facts "$@"\\n' \\
          > pool.sh
      chmod +x pool.sh && ansible-inventory -i pool.sh --list

    --no-facts keeps it fast and never exits 3 (Ansible rejects a script that fails).
    --host NAME reads NAME's node alone (when -l selects it).

    Exit 3 when some nodes could not be read. The document is still printed whole: its
    groups, hosts and vars come from the inventory, and an unread node only lacks its
    gpupool_ facts (absent, never a wrong value).
    """
    import json

    from gpupoolctl.export.ansible import ansible_export, ledger_slices

    settings: Settings = ctx.obj
    _refuse_output(settings, (OutputFormat.json,), "ansible")
    if list_ and host is not None:
        raise UsageError("export ansible: give --list or --host, not both")
    hosts: list[HostFacts] = []
    if facts:
        inventory, hosts = _read_nodes(settings, only=host)
    else:
        inventory = _load_inventory(settings)
    view = _read_ledger(settings)
    export = ansible_export(
        inventory,
        facts_by_host=_facts(hosts),
        slices_by_host=ledger_slices(view.state, view.now),
    )
    for message in export.warnings:
        warn(message)
    if host is not None:
        found = export.host_vars(host)
        if found is None:
            raise UsageError(f"export ansible --host {host}: no such host in the inventory")
        _write(json.dumps(found, indent=2) + "\n")
    else:
        _write(json.dumps(export.document, indent=2) + "\n")
    _exit_if_unreachable(hosts)


# -- slurm ---------------------------------------------------------------------------------


@app.command("slurm")
def slurm(
    ctx: typer.Context,
    only: Annotated[
        str | None,
        typer.Option(
            "--only",
            help="Write one piece: slurm.conf (GresTypes and node lines) or gres.conf. "
            "Default: both, each under a comment naming its file.",
        ),
    ] = None,
    placeholder_dir: Annotated[
        str | None,
        typer.Option(
            "--placeholder-dir",
            help="Give every slice a stand-in device file DIR/HOST/gpuK (simulated nodes: "
            "Slurm drops GPUs without File=; create them with mknod PATH c 1 3).",
        ),
    ] = None,
    cpus: Annotated[int | None, typer.Option("--cpus", help="CPUs= on every node line.")] = None,
    real_memory: Annotated[
        int | None, typer.Option("--real-memory", help="RealMemory= (MiB) on every node line.")
    ] = None,
    write: Annotated[
        Path | None,
        typer.Option(
            "--write",
            help="Replace this file atomically (mode 0644) instead of printing; with --only. "
            "Nothing is written when the export fails.",
        ),
    ] = None,
) -> None:
    """The pool's slices as Slurm GRES: `gpu` typed by card model and slice profile.

    From the ledger (no node is contacted; run `gpupoolctl pool` first): for slurm.conf,
    GresTypes=gpu and `NodeName=HOST Gres=gpu:h100:6,gpu:h100_1g.10gb:7`; gres.conf with
    `NodeName=HOST Name=gpu Type=TYPE Count=N` per node and type. Types: whole cards by
    model (h100, a100, mi300x), MIG instances as model_profile (h100_1g.10gb), AMD
    partitions as model_modes (mi300x_cpx.nps4), SR-IOV VFs as model_vf.N.

    The node lines replace slurm.conf's own NodeName and GresTypes lines for these hosts
    (a host defined twice stops slurmctld): keep them in a file of their own and put
    `Include /etc/slurm/gpupool-nodes.conf` in slurm.conf in their place. Use --write rather
    than `>`: a shell redirect empties the file before the export runs, even when it fails.

    \b
      gpupoolctl export slurm --only gres.conf --write /etc/slurm/gres.conf
      gpupoolctl export slurm --only slurm.conf --write /etc/slurm/gpupool-nodes.conf
    """
    from gpupoolctl.export.slurm import slurm_config

    settings: Settings = ctx.obj
    _refuse_output(settings, (), "slurm")
    if only not in (None, "slurm.conf", "gres.conf"):
        raise UsageError(f"export slurm --only {only}: give slurm.conf or gres.conf")
    if write is not None and only is None:
        raise UsageError("export slurm --write needs --only slurm.conf or --only gres.conf")
    view = _read_ledger(settings)
    if not view.state.slices:
        # An empty gres.conf would take every GPU away: fail, and write nothing.
        raise GpupoolError("the ledger knows no slices yet: run `gpupoolctl pool` first")
    config = slurm_config(
        view.state.slices.values(),
        placeholder_dir=placeholder_dir,
        cpus=cpus,
        real_memory_mib=real_memory,
        drains={target: view.state.drain_of(target) or {} for target in view.state.drains},
    )
    for message in config.warnings:
        warn(message)
    text = {"slurm.conf": config.slurm_conf, "gres.conf": config.gres_conf}.get(
        only or "", config.text
    )()
    if write is None:
        _write(text)
        return
    from gpupoolctl.atomic import write_file

    write_file(write, text, mode=0o644)
    notice(f"wrote {write}", quiet=settings.quiet)
