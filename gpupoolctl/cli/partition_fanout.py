"""Reaching the hosts for `partition`: facts from every selected host, then one request per
host whose content differs from host to host (each carries that host's own GPU plans)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpupoolctl.cli import pool
from gpupoolctl.cli.settings import Settings

if TYPE_CHECKING:
    from gpupoolctl.inventory import Host, Inventory
    from gpupoolctl.remote.results import HostResult
    from gpupoolctl.remote.target import Target


@dataclass
class HostFacts:
    host: Host
    target: Target
    result: HostResult

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def facts(self) -> dict[str, Any]:
        return self.result.data if self.result.ok else {}


def gather(settings: Settings) -> tuple[Inventory, list[HostFacts]]:
    """The inventory and the facts of every selected host (ok or not)."""
    selection = pool.select(settings)
    targets = selection.targets()
    results = pool.fan_out(settings, targets, {"v": 1, "verb": "facts", "args": {}})
    hosts = [
        HostFacts(host, target, result)
        for host, target, result in zip(selection.hosts, targets, results, strict=True)
    ]
    return selection.inventory, hosts


# A MI300X memory-partition change takes about 140 s, and each hook may take up to 60 s.
APPLY_TIMEOUT = 900.0


def send_each(
    settings: Settings, requests: list[tuple[Target, dict[str, Any]]]
) -> list[HostResult]:
    """Send each target its own request (its own GPU plans), --forks at a time."""
    return pool.fan_out_each(settings, requests, default_timeout=APPLY_TIMEOUT)
