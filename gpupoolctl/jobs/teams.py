"""Teams on the jobs side: whose team a submit counts against, and the quota report. (What
the scheduler's share decisions read, windows applied, is built with the rest of the pass's
inputs by sched.snapshot.)"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from gpupoolctl.jobs.spec import JobSpec
from gpupoolctl.ledger import State
from gpupoolctl.ledger.units import parse_ts
from gpupoolctl.policy.membership import team_for
from gpupoolctl.policy.model import PoolPolicy, QuotaScope


class Submitter(Protocol):
    """Who submits, as a JobsCore says it (this module sits beside it, not above it)."""

    policy: PoolPolicy | None
    owner: str
    admin: bool


def with_team(jobs: Submitter, spec: JobSpec) -> JobSpec:
    """The spec with its team resolved (resolve_team); unchanged where the policy has no
    teams."""
    team = resolve_team(jobs.policy, jobs.owner, spec.request.team, admin=jobs.admin)
    if team is None:
        return spec
    return dataclasses.replace(spec, request=dataclasses.replace(spec.request, team=team))


def resolve_team(
    policy: PoolPolicy | None, user: str, asked: str | None, *, admin: bool = False
) -> str | None:
    """The team `user`'s work counts against (policy.membership.team_for): the one asked for
    (`--team`), the user's first, or the default; None where the policy has no teams (a team
    asked for there is a usage error naming the policy file). `admin`: whoever acts is a
    pool admin, who may name any team."""
    if policy is None or not policy.teams.enabled:
        if asked is not None:  # says why not, naming the policy file if any
            source = policy.source if policy is not None else None
            team_for(PoolPolicy().teams, user, asked=asked, source=source)
        return None
    from gpupoolctl.policy.actor import unix_groups

    return team_for(policy.teams, user, unix_groups(user), asked, admin=admin, source=policy.source)


def quota_report(policy: PoolPolicy, state: State, now: str) -> dict[str, Any]:
    """Per team, scope and resource at `now`: nominal (windows applied), the most it may
    hold, what it lends at most, what it holds and how much of that is borrowed; then, per
    window, what it would give each team. What `gpupoolctl quota` shows."""
    from gpupoolctl.sched import PoolView
    from gpupoolctl.sched.shares import ShareInputs, Usage

    moment = parse_ts(now)
    quotas = {team.name: policy.quota_in_force(team, moment) for team in policy.teams.teams}
    pool = PoolView.from_state(state, now)
    usage = Usage.of_pool(pool, ShareInputs(quotas=quotas))
    rows: list[dict[str, Any]] = []
    for team in policy.teams.teams:
        held = usage.of(team.name)
        scopes = quotas[team.name]
        if not scopes:
            rows.append(_row(team.name, None, "gpu-memory", None, None, None, 0, 0))
            rows[-1]["in_use"] = usage.memory_mib.get(team.name, 0)
            continue
        for index, scope in enumerate(scopes):
            for resource in scope.resources():
                used = held[index].get(resource, 0)
                nominal = scope.nominal.get(resource)
                borrowed = max(0, used - nominal) if nominal is not None else 0
                rows.append(
                    _row(
                        team.name,
                        scope,
                        resource,
                        nominal,
                        scope.limit(resource),
                        scope.lendable(resource),
                        used,
                        borrowed,
                    )
                )
    windows = []
    for window in policy.windows:
        for team_name, scopes in window.teams.items():
            for scope in scopes:
                for resource, amount in scope.nominal.items():
                    windows.append(
                        {
                            "window": window.name,
                            "active": window.active(moment),
                            "timezone": window.timezone,
                            "days": ",".join(window.as_dict()["days"]),
                            "hours": window.hours_text(),
                            "team": team_name,
                            "scope": scope.describe(),
                            "resource": resource,
                            "nominal": amount,
                        }
                    )
    return {
        "at": now,
        "active_windows": [w.name for w in policy.active_windows(moment)],
        "teams": rows,
        "windows": windows,
    }


def _row(
    team: str,
    scope: QuotaScope | None,
    resource: str,
    nominal: int | None,
    limit: int | None,
    lendable: int | None,
    used: int,
    borrowed: int,
) -> dict[str, Any]:
    return {
        "team": team,
        "scope": scope.describe() if scope is not None else "(not limited)",
        "resource": resource,
        "nominal": nominal,
        "limit": limit,
        "lendable": lendable,
        "in_use": used,
        "borrowed": borrowed,
    }
