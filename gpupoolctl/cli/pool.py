"""From global options to the hosts a command acts on, and the fan-out that reaches them."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupoolctl.cli.console import notice, warn
from gpupoolctl.cli.settings import Settings
from gpupoolctl.errors import LocalStateError, NotFound
from gpupoolctl.remote.target import Target, target_from_vars

if TYPE_CHECKING:
    from gpupoolctl.inventory import Host, Inventory
    from gpupoolctl.remote.results import HostResult
    from gpupoolctl.remote.session import SessionPool


DEFAULT_COMMAND_TIMEOUT = 120.0  # seconds of remote work per host, unless a command says more


def bundled_inventory_path() -> Path:
    """The bundled simulated pool, shipped as package data."""
    from importlib import resources  # ~8 ms to import, and only needed without -i

    return Path(str(resources.files("gpupoolctl.data").joinpath("sim.yaml")))


def load(settings: Settings) -> Inventory:
    from gpupoolctl.inventory import load_inventory

    path = settings.inventory
    if path is None:
        path = bundled_inventory_path()
        notice(
            "no inventory given (-i or GPUPOOL_INVENTORY): using the bundled simulated pool",
            quiet=settings.quiet,
        )
    elif not path.exists():
        raise NotFound(f"inventory {path} does not exist")  # like --ledger FILE: exit 1
    return load_inventory(path)


@dataclass
class Selection:
    inventory: Inventory
    hosts: list[Host]

    def targets(self) -> list[Target]:
        return [target_from_vars(host.name, host.vars) for host in self.hosts]


def select(settings: Settings) -> Selection:
    inventory = load(settings)
    chosen = inventory.select(settings.limit, cwd=Path(os.getcwd()))
    for message in [*inventory.warnings, *chosen.warnings]:
        warn(message)
    for pattern in chosen.unmatched:
        warn(f"could not match host pattern, ignoring: {pattern}")
    hosts = list(chosen)
    if not hosts:
        where = f" for --limit {settings.limit!r}" if settings.limit else ""
        raise NotFound(f"no hosts matched in {inventory.source}{where}")
    return Selection(inventory=inventory, hosts=hosts)


@dataclass
class JobHosts:
    """For job commands: every host can be asked about its jobs; --limit only narrows where
    new work may be placed (`placeable` None: anywhere)."""

    everyone: list[Target]
    placeable: set[str] | None
    inventory: Inventory | None = None

    def in_hosts(self) -> Callable[[str, str], bool]:
        """(pattern, host) -> whether the inventory's --limit pattern selects the host: how
        a pool policy rule's `hosts:` (groups, ranges, globs) is read."""
        inventory = self.inventory
        chosen: dict[str, set[str]] = {}

        def test(pattern: str, host: str) -> bool:
            if pattern not in chosen:
                hosts = inventory.select(pattern) if inventory is not None else []
                chosen[pattern] = {h.name for h in hosts}
            return host in chosen[pattern]

        return test


def job_hosts(settings: Settings) -> JobHosts:
    inventory = load(settings)
    everyone = [target_from_vars(h.name, h.vars) for h in inventory.select(None)]
    placeable = None
    if settings.limit:
        placeable = {h.name for h in inventory.select(settings.limit, cwd=Path(os.getcwd()))}
        if not placeable:
            raise NotFound(f"no hosts matched --limit {settings.limit!r}")
    return JobHosts(everyone, placeable, inventory)


def local_state_folders(requests: list[tuple[Target, dict[str, Any]]]) -> set[Path]:
    """The folders of this workstation that the agents of these requests will write: where
    simulated nodes reached locally keep their cards and jobs, and where a local host keeps
    the jobs it launches (reading facts there writes nothing)."""
    from gpupoolctl.agent.jobs.paths import state_home
    from gpupoolctl.sim.state import default_state_dir

    folders: set[Path] = set()
    for target, request in requests:
        if target.transport != "local":
            continue
        if target.sim is not None:
            state_dir = target.sim.state_dir
            folders.add(Path(state_dir) if state_dir else default_state_dir())
        elif request.get("verb") == "launch":
            folders.add(Path(state_home()) / "gpupoolctl")
    return folders


def check_local_state(requests: list[tuple[Target, dict[str, Any]]]) -> None:
    """Make the local state folders (0700; 2770 in a folder shared with its group) that do
    not exist yet, before any agent needs them: one that cannot be made is one error naming
    it, not every simulated host failing with the same reason. A folder that exists is left
    to the agent's own file errors."""
    from gpupoolctl.hw import sharing

    for folder in sorted(local_state_folders(requests)):
        if folder.is_dir():
            continue
        try:
            sharing.make_dirs(folder)
        except OSError as exc:
            raise LocalStateError(
                f"state folder {folder}: {exc.strerror or exc} (local and simulated hosts keep "
                "their state there: set XDG_STATE_HOME, or GPUPOOL_SIM_DIR, to a folder you "
                "can write)"
            ) from None


def fan_out(
    settings: Settings,
    targets: list[Target],
    request: dict[str, Any],
    *,
    default_timeout: float = DEFAULT_COMMAND_TIMEOUT,
) -> list[HostResult]:
    """Send one agent request to every target."""
    return fan_out_each(
        settings, [(target, request) for target in targets], default_timeout=default_timeout
    )


def fan_out_each(
    settings: Settings,
    requests: list[tuple[Target, dict[str, Any]]],
    *,
    default_timeout: float = DEFAULT_COMMAND_TIMEOUT,
) -> list[HostResult]:
    """Send each target its own request, drawing progress on stderr when useful.

    `default_timeout` is the command's own bound on the remote work, used unless the user
    gave --command-timeout: reading facts takes seconds, an AMD memory-mode change minutes.
    """
    from gpupoolctl.cli.progress import host_progress
    from gpupoolctl.remote.fanout import Timeouts, run_agent_each

    check_local_state(requests)
    command_timeout = settings.command_timeout or default_timeout
    timeouts = Timeouts(connect=settings.connect_timeout, command=command_timeout)
    with host_progress(len(requests), enabled=not settings.quiet) as advance:
        return run_agent_each(
            requests,
            forks=settings.forks,
            timeouts=timeouts,
            accept_new=settings.accept_new_host_keys,
            on_progress=advance,
        )


def open_sessions(
    settings: Settings, *, default_timeout: float = DEFAULT_COMMAND_TIMEOUT
) -> SessionPool:
    """Agent sessions for a command that asks the same nodes many times (`schedule --watch`,
    the stress ramp): one agent per host for the whole command. The caller closes it."""
    from gpupoolctl.remote.session import SessionPool
    from gpupoolctl.remote.timeouts import Timeouts

    command_timeout = settings.command_timeout or default_timeout
    return SessionPool(
        timeouts=Timeouts(connect=settings.connect_timeout, command=command_timeout),
        forks=settings.forks,
        accept_new=settings.accept_new_host_keys,
    )


def session_runner(
    sessions: SessionPool,
) -> Callable[[list[tuple[Target, dict[str, Any]]]], list[HostResult]]:
    """A jobs Runner over `sessions` (as fan_out_each, without the progress bar: a loop's
    calls are small and many)."""

    def run(requests: list[tuple[Target, dict[str, Any]]]) -> list[HostResult]:
        check_local_state(requests)
        return sessions.run(requests)

    return run
