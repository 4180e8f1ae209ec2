"""The library objects a command works on, made from the global options: the ledger, and
the jobs service over it. Command modules share these instead of importing each other."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupoolctl.cli.console import notice
from gpupoolctl.cli.settings import Settings

if TYPE_CHECKING:
    from gpupoolctl.jobs import Jobs
    from gpupoolctl.jobs.nodes import Runner
    from gpupoolctl.ledger import Ledger


def open_ledger(settings: Settings) -> Ledger:
    from gpupoolctl.ledger import Ledger

    def waiting(message: str) -> None:
        notice(message, quiet=settings.quiet)

    return Ledger.from_env(settings.ledger, on_lock_wait=waiting)


def open_jobs(settings: Settings, run: Runner | None = None, ledger: Ledger | None = None) -> Jobs:
    """The jobs library for one command; `run` (a Runner) replaces its one-shot fan-out;
    `ledger`: one the command has read already (its state is not read again)."""
    from gpupoolctl.cli import pool
    from gpupoolctl.jobs import Jobs, Nodes
    from gpupoolctl.ledger import current_user
    from gpupoolctl.policy import resolve_policy
    from gpupoolctl.policy.actor import is_pool_admin

    chosen = pool.job_hosts(settings)
    nodes = Nodes(chosen.everyone, run or (lambda requests: pool.fan_out_each(settings, requests)))
    user = current_user()
    policy = resolve_policy(settings.pool_policy)
    return Jobs(
        ledger or open_ledger(settings),
        nodes,
        owner=user,
        hosts=chosen.placeable,
        policy=policy,
        in_hosts=chosen.in_hosts(),
        admin=is_pool_admin(policy.admins, user),
    )
