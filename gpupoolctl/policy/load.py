"""Reading the pool policy file: where it is, and what it says (one-line errors, file:line).

    version: 1           # required once the file says anything
    elastic: {...}       # see policy.elastic
    teams/windows/health # reserved for later versions: refused for now

Where: --pool-policy FILE > $GPUPOOL_POLICY > $XDG_CONFIG_HOME/gpupoolctl/pool.yaml (else
~/.config/gpupoolctl/pool.yaml) when it exists > none (a static pool).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.policy.elastic import parse_elastic
from gpupoolctl.policy.model import ElasticPolicy, PoolPolicy
from gpupoolctl.policy.values import shown
from gpupoolctl.yamlsource import YamlSource, did_you_mean

ENV = "GPUPOOL_POLICY"
VERSION = 1
SECTIONS = ("version", "elastic")
# Sections later work adds; a file using one must not be read as if it were not there.
RESERVED = {
    "teams": "team members, quotas and borrowing",
    "windows": "time-of-day overrides",
    "health": "lost nodes and GPU draining",
}
WHAT = "pool policy file"


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
    return PoolPolicy(source=source, elastic=elastic)


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


def default_policy_path(environ: Mapping[str, str] = os.environ) -> Path:
    """$XDG_CONFIG_HOME/gpupoolctl/pool.yaml, else ~/.config/gpupoolctl/pool.yaml."""
    config = environ.get("XDG_CONFIG_HOME", "")
    # The XDG spec says a relative value is to be ignored: cron's cwd is not the user's.
    if not config or not os.path.isabs(config):
        home = environ.get("HOME") or str(Path.home())
        config = os.path.join(home, ".config")
    return Path(config) / "gpupoolctl" / "pool.yaml"


def policy_path(option: str | Path | None, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The policy file to read: option > $GPUPOOL_POLICY > the default path when it exists;
    None when there is none. A given value that is empty is a UsageError; one that names
    a missing file is a SourceError naming it (a policy asked for is never skipped)."""
    if option is not None:
        return _given(option, "--pool-policy / GPUPOOL_POLICY")
    if ENV in environ:
        return _given(environ[ENV], ENV)
    default = default_policy_path(environ)
    return default if default.exists() else None


def _given(value: str | Path, origin: str) -> Path:
    if isinstance(value, str):
        if not value.strip():
            raise UsageError(f"{origin} is empty: set it to the pool policy file, or unset it")
        value = Path(value)
    if not value.exists():
        raise SourceError(str(value), None, f"no such {WHAT} (given by {origin})")
    return value


def resolve_policy(
    option: str | Path | None, environ: Mapping[str, str] = os.environ
) -> PoolPolicy:
    """The policy in force: the file policy_path finds, or PoolPolicy() (static) without one."""
    path = policy_path(option, environ)
    return PoolPolicy() if path is None else load_policy(path)
