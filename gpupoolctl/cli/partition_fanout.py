"""Reaching the hosts for `partition`: facts from every selected host, then one request per
host whose content differs from host to host (each carries that host's own GPU plans)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpupoolctl.cli import pool
from gpupoolctl.cli.settings import Settings

if TYPE_CHECKING:
    from gpupoolctl.inventory import Host
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


def gather(settings: Settings) -> tuple[str, list[HostFacts]]:
    """The inventory's source and the facts of every selected host (ok or not)."""
    selection = pool.select(settings)
    targets = selection.targets()
    results = pool.fan_out(settings, targets, {"v": 1, "verb": "facts", "args": {}})
    hosts = [
        HostFacts(host, target, result)
        for host, target, result in zip(selection.hosts, targets, results, strict=True)
    ]
    return str(selection.inventory.source), hosts


def send_each(
    settings: Settings, requests: list[tuple[Target, dict[str, Any]]]
) -> list[HostResult]:
    """Send each target its own request, --forks at a time; results in the given order.

    run_agent sends one request to every target; here every host gets its own plans, so the
    same per-host runner is driven directly, sharing one payload and one SSH context (one
    load of known_hosts) as run_agent does.
    """
    from gpupoolctl.cli.progress import host_progress
    from gpupoolctl.remote.fanout import _run_one
    from gpupoolctl.remote.payload import agent_payload
    from gpupoolctl.remote.results import FAILED, HostResult
    from gpupoolctl.remote.timeouts import Timeouts

    if not requests:
        return []
    timeouts = Timeouts(connect=settings.connect_timeout, command=settings.command_timeout)
    payload = agent_payload()
    ctx = None
    if any(target.transport == "ssh" for target, _ in requests):
        from gpupoolctl.remote.ssh import SshContext

        ctx = SshContext.create(timeouts, accept_new=settings.accept_new_host_keys)
    results: list[HostResult | None] = [None] * len(requests)
    started = time.monotonic()
    with (
        host_progress(len(requests), enabled=not settings.quiet) as advance,
        ThreadPoolExecutor(max_workers=min(settings.forks, len(requests))) as executor,
    ):
        futures = {
            executor.submit(_run_one, target, request, payload, ctx, timeouts): position
            for position, (target, request) in enumerate(requests)
        }
        for future in as_completed(futures):
            position = futures[future]
            try:
                result = future.result()
            except Exception as exc:  # _run_one already turns host problems into results
                name = requests[position][0].name
                result = HostResult(
                    name, FAILED, error=f"internal error: {exc}", elapsed=time.monotonic() - started
                )
            results[position] = result
            advance(result)
    return [r for r in results if r is not None]
