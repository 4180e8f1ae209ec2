"""The root `gpupoolctl` command: its global options and the table of its commands.

gpupoolctl.cli.main runs it; this module is imported only when a command line needs typer
(all but a bare `gpupoolctl --version`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpupoolctl import __version__
from gpupoolctl.cli.console import warn
from gpupoolctl.cli.lazy import LazyCommand, LazyGroup
from gpupoolctl.cli.nonempty import set_but_empty
from gpupoolctl.cli.settings import OutputFormat, Settings

# Every command, in the order `--help` lists them, with the module that defines it: only the
# module of the command being run is imported (tests check the summaries match the modules').
COMMANDS = (
    LazyCommand(
        "pool",
        "gpupoolctl.cli.ledger_cmd",
        "Slices of the pool, free or held and by whom, per node.",
    ),
    LazyCommand(
        "top",
        "gpupoolctl.cli.top_cmd",
        "The whole pool in one live view: each node's GPUs drawn as their slices, the running "
        "jobs, the queue with why each entry waits, recent events and utilization.",
    ),
    LazyCommand(
        "alloc",
        "gpupoolctl.cli.ledger_cmd",
        "Hold free slice(s) by hand and print the allocation id.",
    ),
    LazyCommand("release", "gpupoolctl.cli.ledger_cmd", "Give back the slices of an allocation."),
    LazyCommand(
        "submit",
        "gpupoolctl.cli.jobs_cmd",
        "Run a command on the best slice(s) for it; queue it when nothing fits now.",
    ),
    LazyCommand(
        "jobs", "gpupoolctl.cli.jobs_cmd", "Jobs: id, name, state, node, slice, age, exit code."
    ),
    LazyCommand(
        "logs", "gpupoolctl.cli.jobs_cmd", "A job's output, read from its folder on its node."
    ),
    LazyCommand(
        "cancel",
        "gpupoolctl.cli.jobs_cmd",
        "Stop a job (SIGTERM to its process group, grace period, SIGKILL), release its slices "
        "and record it cancelled; a queued job just leaves the queue, and one being launched is "
        "stopped on its node before it can start (or right after, if it had).",
    ),
    LazyCommand(
        "schedule",
        "gpupoolctl.cli.jobs_cmd",
        "One pass of the scheduling loop: settle, reap, start what fits (preempting when a "
        "higher priority may), re-cut idle cards for waiting work (elastic).",
    ),
    LazyCommand(
        "drain",
        "gpupoolctl.cli.drain_cmd",
        "Drain hosts or cards: no new work is placed there, by `submit`, `alloc` or elastic "
        "re-cuts (what runs there goes on, unless --now).",
    ),
    LazyCommand(
        "undrain",
        "gpupoolctl.cli.drain_cmd",
        "Lift drains: the hosts or cards take new work again.",
    ),
    LazyCommand(
        "health",
        "gpupoolctl.cli.health_cmd",
        "GPU health per card: ok / degraded / failed / unknown, with reasons and the action.",
    ),
    LazyCommand(
        "inventory",
        "gpupoolctl.cli.inventory_cmd",
        "Hardware inventory of the selected nodes: GPUs, memory, partitions, processes, links.",
    ),
    LazyCommand(
        "partition",
        "gpupoolctl.cli.partition_cmd",
        "Partition GPUs: MIG, AMD compute/memory partitions, SR-IOV (mig-parted v1 files).",
    ),
    LazyCommand(
        "policy",
        "gpupoolctl.cli.policy_cmd",
        "The pool policy file: which cards the scheduling loop may re-cut (elastic), when a "
        "silent node is lost (health), teams and their quotas, time windows, pool admins.",
    ),
    LazyCommand(
        "quota",
        "gpupoolctl.cli.quota_cmd",
        "The teams' quotas in force now (time windows applied) and what each team holds of them.",
    ),
    LazyCommand(
        "usage",
        "gpupoolctl.cli.usage_cmd",
        "What was held over a period: GPU-hours, GiB-hours and slice-hours per team or user.",
    ),
    LazyCommand(
        "ledger",
        "gpupoolctl.cli.ledger_cmd",
        "The allocation ledger: history, checks, compaction, repair.",
    ),
    LazyCommand(
        "sim",
        "gpupoolctl.cli.sim_cmd",
        "Simulated hardware: reset nodes, inject health faults, list templates.",
    ),
    LazyCommand(
        "stress",
        "gpupoolctl.cli.stress_cmd",
        "Stress tests: ramp load through the real submit path, find the knee, compare against "
        "a baseline.",
    ),
    LazyCommand(
        "export",
        "gpupoolctl.cli.export_cmd",
        "Export the pool for other tools: Kubernetes (GPU operator), mig-parted, Prometheus "
        "(node_exporter textfile), Ansible (dynamic inventory).",
    ),
)


# The global -f (forks) is on its way out: in the commands -f is a file (`partition plan -f`,
# `export k8s -f`) or follow (`logs -f`), as in mig-parted, kubectl and tail.
FORKS_DEPRECATED = "-f for forks is deprecated: use --forks; -f will mean a file or follow"

# Time-outs are bounded: a day is longer than any remote step takes, and far larger values
# overflow the clocks they are added to (a traceback, or every host failing).
MAX_TIMEOUT_S = 86400.0


class RootGroup(LazyGroup):
    """The root group: the commands of COMMANDS, each module imported on first use."""

    table = COMMANDS


app = typer.Typer(
    name="gpupoolctl",
    help=(
        "Pool a mixed NVIDIA/AMD GPU fleet from this workstation over SSH.\n\n"
        "Without -i/GPUPOOL_INVENTORY every command works on the bundled simulated pool.\n\n"
        "Exit codes: 0 ok, 1 error, 2 usage, 3 some hosts failed or were unreachable, "
        "4 a check did not hold, 5 nothing fits, 130 interrupted (Ctrl-C)."
    ),
    cls=RootGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# Click reads an environment variable that is set but empty as unset: say so instead (an
# empty value on the command line is refused for every option: gpupoolctl.cli.nonempty).
_PATH_VARIABLES = (
    ("GPUPOOL_INVENTORY", "inventory"),
    ("GPUPOOL_LEDGER", "ledger"),
    ("GPUPOOL_POLICY", "pool_policy"),
)


def _refuse_empty_variables(ctx: typer.Context) -> None:
    # The root callback runs before a sub-command parses its own --help: help still shows.
    if {"-h", "--help"} & set(sys.argv[1:]):
        return
    for variable, param in _PATH_VARIABLES:
        source = ctx.get_parameter_source(param)
        given = source is not None and source.name != "DEFAULT"
        if not given and variable in os.environ and not os.environ[variable].strip():
            raise set_but_empty(variable)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpupoolctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "-i",
            "--inventory",
            envvar="GPUPOOL_INVENTORY",
            help="Ansible-style inventory (YAML or INI). Default: the bundled simulated pool.",
        ),
    ] = None,
    limit: Annotated[
        str | None,
        typer.Option(
            "-l",
            "--limit",
            help="Hosts to act on: Ansible patterns (a:b, a:&b, a:!b, ~regex, @file) "
            "or ClusterShell node sets (gpu[01-04,07]).",
        ),
    ] = None,
    forks: Annotated[
        int,
        typer.Option(
            "--forks",
            min=1,
            max=4096,
            help="Hosts contacted at once. (-f N, its old short form, is deprecated: -f is a "
            "command's file or follow.)",
        ),
    ] = 32,
    old_forks: Annotated[
        int | None,
        typer.Option("-f", min=1, max=4096, hidden=True, help=f"Deprecated: {FORKS_DEPRECATED}"),
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option(
            "-o",
            "--output",
            help="auto: a table (rich on a terminal); json, yaml or csv for scripts.",
        ),
    ] = OutputFormat.auto,
    ledger: Annotated[
        Path | None,
        typer.Option("--ledger", envvar="GPUPOOL_LEDGER", help="Allocation ledger file."),
    ] = None,
    pool_policy: Annotated[
        Path | None,
        typer.Option(
            "--pool-policy",
            envvar="GPUPOOL_POLICY",
            help="Pool policy file: what the scheduling loop may do (elastic re-cuts, health, "
            "teams and quotas, time windows, admins). "
            "Default: ~/.config/gpupoolctl/pool.yaml if it exists, else a static pool.",
        ),
    ] = None,
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help="More detail.")] = 0,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Only results and errors.")] = False,
    accept_new_host_keys: Annotated[
        bool,
        typer.Option(
            "--accept-new-host-keys",
            help="Record host keys of hosts not yet in known_hosts (never changed ones), "
            "like OpenSSH's StrictHostKeyChecking=accept-new.",
        ),
    ] = False,
    connect_timeout: Annotated[
        float,
        typer.Option(
            "--connect-timeout",
            min=0.1,
            max=MAX_TIMEOUT_S,
            help="Seconds to connect and log in.",
        ),
    ] = 10.0,
    command_timeout: Annotated[
        float | None,
        typer.Option(
            "--command-timeout",
            min=0.1,
            max=MAX_TIMEOUT_S,
            help="Seconds for the remote work per host. Default: 120, or 900 for partition "
            "apply/reset (an AMD memory-mode change alone takes minutes).",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    _refuse_empty_variables(ctx)
    if old_forks is not None:
        warn(FORKS_DEPRECATED)  # even with -q: a script that says -q must hear it before -f goes
        source = ctx.get_parameter_source("forks")
        if source is None or source.name == "DEFAULT":
            forks = old_forks  # --forks given as well wins
    ctx.obj = Settings(
        inventory=inventory,
        limit=limit,
        forks=forks,
        output=output,
        ledger=ledger,
        verbosity=-1 if quiet else verbose,
        accept_new_host_keys=accept_new_host_keys,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
        pool_policy=pool_policy,
    )
