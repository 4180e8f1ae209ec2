"""Reading the pool policy file: what it says (one-line errors, file:line); where it is
comes from policy.where.

    version: 1           # required once the file says anything
    elastic: {...}       # see policy.elastic
    health: {...}        # see policy.health
    admins: [...]        # pool admins; see policy.teams
    teams: {...}         # team members and quotas; see policy.teams and policy.quota
    windows: [...]       # times that replace quotas and elastic; see policy.windows
"""

from __future__ import annotations

import os

import yaml

from gpupoolctl.errors import SourceError
from gpupoolctl.hw.shown import shown
from gpupoolctl.policy.elastic import parse_elastic
from gpupoolctl.policy.health import parse_health
from gpupoolctl.policy.model import (
    WHAT,
    Admins,
    ElasticPolicy,
    HealthPolicy,
    PoolPolicy,
    TeamsPolicy,
    Window,
)
from gpupoolctl.policy.teams import parse_admins, parse_teams
from gpupoolctl.policy.windows import parse_windows
from gpupoolctl.yamlsource import YamlSource, did_you_mean

VERSION = 1
SECTIONS = ("version", "elastic", "health", "admins", "teams", "windows")


def parse_policy(text: str, source: str = "<stdin>") -> PoolPolicy:
    """The policy in `text`; SourceError naming source:line for anything wrong. An empty
    document (or comments only) is a static policy."""
    reader = YamlSource(text, source)
    root = reader.root()
    if root is None or (isinstance(root, yaml.ScalarNode) and reader.scalar(root) is None):
        return PoolPolicy(source=source)
    if not isinstance(root, yaml.MappingNode):
        raise reader.fail(root, "the file: expected a mapping with version: 1 and sections")
    keys = reader.mapping(root, "the file")
    for key, (key_node, _) in keys.items():  # file order: the first bad key is named
        if key not in SECTIONS:
            raise reader.fail(
                key_node,
                f"unknown section {shown(key)}{did_you_mean(key, SECTIONS)}; "
                f"known: {', '.join(SECTIONS)}",
            )
    if "version" not in keys:
        raise reader.fail(root, f"missing 'version'; expected 'version: {VERSION}' at the top")
    version_node = keys["version"][1]
    version = reader.scalar(version_node)
    if isinstance(version, bool) or version not in (VERSION, str(VERSION)):
        raise reader.fail(
            version_node, f"version: {shown(version)} is not supported; expected {VERSION}"
        )
    elastic = ElasticPolicy()
    if "elastic" in keys:
        elastic = parse_elastic(reader, keys["elastic"][1])
    health = HealthPolicy()
    if "health" in keys:
        health = parse_health(reader, keys["health"][1])
    admins = parse_admins(reader, keys["admins"][1]) if "admins" in keys else Admins()
    teams = parse_teams(reader, keys["teams"][1]) if "teams" in keys else TeamsPolicy()
    windows: tuple[Window, ...] = ()
    if "windows" in keys:  # after teams: a window may only name teams the file has
        windows = parse_windows(reader, keys["windows"][1], teams)
    return PoolPolicy(
        source=source,
        elastic=elastic,
        health=health,
        teams=teams,
        windows=windows,
        admins=admins,
    )


def load_policy(path: str | os.PathLike[str]) -> PoolPolicy:
    """Read and parse a policy file, bounded in size ('-' reads stdin)."""
    name = os.fspath(path)
    if name == "-":
        import sys

        from gpupoolctl.textfile import MAX_BYTES

        text = sys.stdin.read(MAX_BYTES + 1)
        if len(text) > MAX_BYTES:
            raise SourceError("<stdin>", None, f"{WHAT} is over {MAX_BYTES} bytes; not read")
        return parse_policy(text, "<stdin>")
    from gpupoolctl.textfile import read_user_text

    return parse_policy(read_user_text(name, WHAT), name)
