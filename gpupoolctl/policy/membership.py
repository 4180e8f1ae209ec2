"""Which team a submission counts against: the one asked for (`--team`), else the user's
first team in the file, else the default team. Stdlib only."""

from __future__ import annotations

from gpupoolctl.errors import GpupoolError, UsageError
from gpupoolctl.policy.model import TeamsPolicy


class NotAMember(GpupoolError):
    """The user may not submit for that team (exit 1)."""


def team_for(
    teams: TeamsPolicy,
    user: str,
    groups: frozenset[str] = frozenset(),
    asked: str | None = None,
    *,
    admin: bool = False,
    source: str | None = None,
) -> str | None:
    """The team's name, or None where the policy has no teams. UsageError (exit 2) for a
    team the policy does not name; NotAMember (exit 1) for one the user is not in (a pool
    admin may submit for any team), or a user in no team where none is the default."""
    where = f" in {source}" if source else ""
    if not teams.enabled:
        if asked is not None:
            raise UsageError(f"--team {asked}: the pool policy{where} has no teams: section")
        return None
    if asked is not None:
        team = teams.named(asked)
        if team is None:
            known = ", ".join(t.name for t in teams.teams)
            raise UsageError(f"--team {asked}: no such team{where}; teams: {known}")
        if not (admin or team.default or team.has_member(user, groups)):
            raise NotAMember(
                f"{user} is not a member of team {asked}{where}; ask a pool admin to add you"
            )
        return team.name
    mine = teams.teams_of(user, groups)
    if mine:
        return mine[0].name
    default = teams.default_team()
    if default is not None:
        return default.name
    raise NotAMember(
        f"{user} is in no team{where} and no team is the default (default: true); "
        "give --team or ask a pool admin to add you"
    )
