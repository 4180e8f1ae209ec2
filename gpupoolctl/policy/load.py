"""Reading the pool policy file: what it says (one-line errors, file:line); where it is
comes from policy.where.

    version: 1           # required once the file says anything
    elastic: {...}       # see policy.elastic
    health: {...}        # see policy.health
    teams/windows        # reserved for later versions: refused for now
"""

from __future__ import annotations

import os

import yaml

from gpupoolctl.errors import SourceError
from gpupoolctl.policy.elastic import parse_elastic
from gpupoolctl.policy.health import parse_health
from gpupoolctl.policy.model import WHAT, ElasticPolicy, HealthPolicy, PoolPolicy
from gpupoolctl.policy.values import shown
from gpupoolctl.yamlsource import YamlSource, did_you_mean

VERSION = 1
SECTIONS = ("version", "elastic", "health")
# Sections later work adds; a file using one must not be read as if it were not there.
RESERVED = {
    "teams": "team members, quotas and borrowing",
    "windows": "time-of-day overrides",
}


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
    known = (*SECTIONS, *RESERVED)
    for key, (key_node, _) in keys.items():  # file order: the first bad key is named
        if key in RESERVED:
            raise reader.fail(
                key_node,
                f"section {key!r} ({RESERVED[key]}) is not supported by this version yet; "
                f"expected only: {', '.join(SECTIONS)}",
            )
        if key not in SECTIONS:
            raise reader.fail(
                key_node,
                f"unknown section {shown(key)}{did_you_mean(key, known)}; "
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
    return PoolPolicy(source=source, elastic=elastic, health=health)


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
