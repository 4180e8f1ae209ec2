"""The `teams:` and `admins:` sections of a pool policy file.

admins: [ops, group:gpuadmin]   # users, or group:NAME (a Unix group); root always is one
teams:                          # team name -> definition
  inference:
    members: [alice, bob, group:search]   # users or group:NAME; may be left out
    default: true               # the team of a user in no team's members (one team at most)
    quota: {nominal: {gpu-memory: 1600GiB}}   # see policy.quota; none: not limited
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from gpupoolctl.errors import UsageError
from gpupoolctl.hw.shown import shown
from gpupoolctl.policy.model import NAME, Admins, Team, TeamsPolicy
from gpupoolctl.policy.quota import parse_quota
from gpupoolctl.policy.sections import section_keys
from gpupoolctl.yamlsource import YamlSource

TEAM_KEYS = ("members", "default", "quota")
MAX_TEAMS = 1000
MAX_MEMBERS = 1000  # per team, and admins
NAME_FORMS = "a lower-case letter, then up to 62 of a-z, 0-9, _ and -"
# What useradd and LDAP directories allow, roughly; no spaces, no ':' (group:NAME says it).
_ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\$?")
GROUP_PREFIX = "group:"
MEMBER_FORMS = "user names or group:NAME (a Unix group), such as [alice, group:search]"


def name_of(value: Any, what: str) -> str:
    """A team or window name; UsageError naming `what`."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise UsageError(f"{what}: bad name {shown(value)}; expected {NAME_FORMS}")
    return value


def parse_teams(reader: YamlSource, node: yaml.Node) -> TeamsPolicy:
    """The section at `node`; `teams:` with nothing under it is no teams."""
    if isinstance(node, yaml.ScalarNode) and reader.scalar(node) is None:
        return TeamsPolicy()
    if not isinstance(node, yaml.MappingNode):
        raise reader.fail(
            node,
            "teams: expected a mapping of team name -> {members, default, quota}, "
            f"got {shown(reader.scalar(node))}",
        )
    keys = reader.mapping(node, "teams", scalar_keys=True)
    if len(keys) > MAX_TEAMS:
        raise reader.fail(node, f"teams: {len(keys)} teams; expected at most {MAX_TEAMS}")
    teams: list[Team] = []
    default: Team | None = None
    for key, (key_node, value_node) in keys.items():
        with reader.at(key_node):
            name = name_of(key, "teams")
        team = _team(reader, name, key_node, value_node)
        if team.default and default is not None:
            raise reader.fail(
                _default_node(value_node),
                f"team {name}: default: true, but team {default.name} (line {default.line}) "
                "is the default already; expected at most one default team",
            )
        default = team if team.default else default
        teams.append(team)
    return TeamsPolicy(teams=tuple(teams))


def _default_node(node: yaml.Node) -> yaml.Node:
    """The `default:` key of a team's mapping (for the error line)."""
    if isinstance(node, yaml.MappingNode):
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == "default":
                return key_node
    return node


def _team(reader: YamlSource, name: str, key_node: yaml.Node, node: yaml.Node) -> Team:
    what = f"team {name}"
    line = key_node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode) and reader.scalar(node) is None:
        return Team(name=name, line=line)  # `ml:` alone: a team with no members yet
    keys = section_keys(reader, node, what, TEAM_KEYS)
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    if "members" in keys:
        users, groups = parse_members(reader, keys["members"][1], f"{what}: members")
    default = False
    if "default" in keys:
        value = reader.scalar(keys["default"][1])
        if not isinstance(value, bool):
            raise reader.fail(
                keys["default"][1], f"{what}: default: expected true or false, got {shown(value)}"
            )
        default = value
    quota = parse_quota(reader, keys["quota"][1], f"{what}: quota") if "quota" in keys else ()
    return Team(name=name, line=line, users=users, groups=groups, quota=quota, default=default)


def parse_members(
    reader: YamlSource, node: yaml.Node, what: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(users, groups) of a list of user names and group:NAME; nothing: no one."""
    if isinstance(node, yaml.ScalarNode) and reader.scalar(node) is None:
        return (), ()
    if isinstance(node, yaml.MappingNode):
        raise reader.fail(node, f"{what}: expected a list of {MEMBER_FORMS}, got a mapping")
    items = reader.items(node)
    if len(items) > MAX_MEMBERS:
        raise reader.fail(node, f"{what}: {len(items)} entries; expected at most {MAX_MEMBERS}")
    users: list[str] = []
    groups: list[str] = []
    for item in items:
        value = reader.scalar(item)
        if not isinstance(value, str):
            raise reader.fail(item, f"{what}: expected {MEMBER_FORMS}, got {shown(value)}")
        text = value.strip()
        group = text.startswith(GROUP_PREFIX)
        account = text[len(GROUP_PREFIX) :].strip() if group else text
        if not _ACCOUNT.fullmatch(account):
            raise reader.fail(item, f"{what}: bad member {shown(value)}; expected {MEMBER_FORMS}")
        listed = groups if group else users
        if account in listed:
            raise reader.fail(item, f"{what}: {text} is listed twice; expected each once")
        listed.append(account)
    return tuple(users), tuple(groups)


def parse_admins(reader: YamlSource, node: yaml.Node) -> Admins:
    """The `admins:` section: pool admins besides root; nothing: only root."""
    users, groups = parse_members(reader, node, "admins")
    return Admins(users=users, groups=groups)
