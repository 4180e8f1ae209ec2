"""Quotas of a pool policy file: a team's scopes and their resource vectors.

quota:                          # one scope over the whole pool ...
  nominal: {gpu-memory: 1600GiB, cards: 4, 1g.10gb: 8}
  borrowing-limit: {gpu-memory: 800GiB}   # optional: how far above nominal it may borrow
  lending-limit: {gpu-memory: 400GiB}     # optional: how much of nominal others may borrow
quota:                          # ... or a list of scopes, each selecting slices
  - site: dubai                 # site / vendor (nvidia | amd) / model (part of the GPU model)
    nominal: {gpu-memory: 1000GiB}

Resources: gpu-memory (160GiB, 1.5TiB, 512MiB, 160G; a number is GiB), cards, slices, or
a slice profile (a MIG GPU-instance profile such as 1g.10gb, an AMD compute mode such as
cpx, or vf), counted in slices.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from gpupoolctl.errors import UsageError
from gpupoolctl.hw.amd_modes import COMPUTE_MODE_NAMES
from gpupoolctl.hw.shown import shown
from gpupoolctl.policy import known
from gpupoolctl.policy.elastic import read_model, read_vendor
from gpupoolctl.policy.model import CARDS, GPU_MEMORY, SLICES, QuotaScope
from gpupoolctl.policy.sections import section_keys
from gpupoolctl.policy.values import whole
from gpupoolctl.yamlsource import YamlSource, did_you_mean

SCOPE_KEYS = ("site", "vendor", "model", "nominal", "borrowing-limit", "lending-limit")
LIMITS = ("borrowing-limit", "lending-limit")
MAX_SCOPES = 64  # per team, and per team in a window
MAX_COUNT = 1_000_000  # cards, slices, slices of a profile
MAX_MEMORY_MIB = 2**30  # 1 PiB: past it a quota is a typo (a unit left out), not a pool
MAX_SITE_TEXT = 200
AMD_COMPUTE_MODES = tuple(name.lower() for name in COMPUTE_MODE_NAMES)
RESOURCE_FORMS = (
    "gpu-memory, cards, slices, a MIG GPU-instance profile (1g.10gb), "
    f"an AMD compute mode ({', '.join(AMD_COMPUTE_MODES)}) or vf"
)
MEMORY_FORMS = "160GiB, 1.5TiB, 512MiB, 160G or a number of GiB"
# Binary units (G as in Slurm's --mem); GB/MB/TB are decimal, as in MIG profile names and
# the ledger's sizes. No unit: GiB.
_MEMORY_UNIT = {
    "": 2**30,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
    "p": 2**50,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
_MAX_TEXT = 64


def memory_mib(value: Any, what: str) -> int:
    """A memory size in MiB (rounded up), 0 to 1 PiB; UsageError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UsageError(f"{what}: expected a memory size ({MEMORY_FORMS}), got {shown(value)}")
    if isinstance(value, int) and value > MAX_MEMORY_MIB:  # before float(): 10**400 overflows
        size = math.inf
    elif isinstance(value, int | float):
        size = float(value) * 2**30
    else:
        match = _MEMORY.fullmatch(value.strip().lower()) if len(value) <= _MAX_TEXT else None
        if match is None or match.group(2) not in _MEMORY_UNIT:
            raise UsageError(f"{what}: bad memory size {shown(value)}; expected {MEMORY_FORMS}")
        size = float(match.group(1)) * _MEMORY_UNIT[match.group(2)]
    if math.isnan(size) or size < 0:
        raise UsageError(f"{what}: {shown(value)} is not a memory size; expected {MEMORY_FORMS}")
    if size > MAX_MEMORY_MIB * 2**20:
        raise UsageError(f"{what}: {shown(value)} is too large; expected at most 1 PiB")
    return math.ceil(size / 2**20)


def resource_name(key: str, what: str) -> str:
    """The resource a vector's key names (lower case); UsageError for anything else."""
    name = key.strip().lower()
    profiles = known.nvidia_profiles()
    if name in (GPU_MEMORY, CARDS, SLICES, "vf", *AMD_COMPUTE_MODES) or name in profiles:
        return name
    valid = [GPU_MEMORY, CARDS, SLICES, "vf", *AMD_COMPUTE_MODES, *profiles]
    raise UsageError(
        f"{what}: unknown resource {shown(key)}{did_you_mean(name, valid)}; "
        f"expected {RESOURCE_FORMS}"
    )


def parse_vector(reader: YamlSource, node: yaml.Node, what: str) -> dict[str, int]:
    """`{gpu-memory: 160GiB, cards: 2}` -> {"gpu-memory": 163840, "cards": 2}."""
    if not isinstance(node, yaml.MappingNode):
        raise reader.fail(
            node,
            f"{what}: expected a mapping of resource: amount such as "
            f"{{gpu-memory: 160GiB, cards: 2}}, got {shown(reader.scalar(node))}",
        )
    out: dict[str, int] = {}
    for key, (key_node, value_node) in reader.mapping(node, what, scalar_keys=True).items():
        with reader.at(key_node):
            name = resource_name(key, what)
        if name in out:
            raise reader.fail(key_node, f"{what}: {name} is given twice; expected it once")
        with reader.at(value_node):
            value = reader.scalar(value_node)
            if name == GPU_MEMORY:
                out[name] = memory_mib(value, f"{what}: {name}")
            else:
                out[name] = whole(value, f"{what}: {name}", least=0, most=MAX_COUNT)
    return out


def parse_scope(reader: YamlSource, node: yaml.Node, what: str) -> QuotaScope:
    """One scope: its selectors and vectors; `nominal` is required."""
    keys = section_keys(reader, node, what, SCOPE_KEYS)
    if "nominal" not in keys:
        raise reader.fail(
            node, f"{what}: missing nominal; expected nominal: {{gpu-memory: 160GiB, ...}}"
        )
    nominal = parse_vector(reader, keys["nominal"][1], f"{what}: nominal")
    limits: dict[str, dict[str, int]] = {}
    for key in LIMITS:
        if key not in keys:
            continue
        vector = parse_vector(reader, keys[key][1], f"{what}: {key}")
        for name in vector:
            if name not in nominal:
                raise reader.fail(
                    keys[key][1],
                    f"{what}: {key} names {name}, which nominal does not; expected only "
                    f"resources nominal names ({', '.join(nominal) or 'none'})",
                )
        limits[key] = vector
    return QuotaScope(
        line=node.start_mark.line + 1,
        site=_site(reader, keys, what),
        vendor=read_vendor(reader, keys, what),
        model=read_model(reader, keys, what),
        nominal=nominal,
        borrowing_limit=limits.get("borrowing-limit"),
        lending_limit=limits.get("lending-limit"),
    )


def _site(
    reader: YamlSource, keys: dict[str, tuple[yaml.Node, yaml.Node]], what: str
) -> str | None:
    if "site" not in keys:
        return None
    node = keys["site"][1]
    value = reader.scalar(node)
    if not isinstance(value, str) or not value.strip():
        raise reader.fail(
            node, f"{what}: site: expected a site name such as singapore, got {shown(value)}"
        )
    if len(value.strip()) > MAX_SITE_TEXT:
        raise reader.fail(
            node, f"{what}: site: {len(value)} characters; expected at most {MAX_SITE_TEXT}"
        )
    return value.strip()


def parse_quota(reader: YamlSource, node: yaml.Node, what: str) -> tuple[QuotaScope, ...]:
    """A team's quota: one scope (a mapping) or a list of scopes; nothing: no quota."""
    if isinstance(node, yaml.ScalarNode) and reader.scalar(node) is None:
        return ()
    if isinstance(node, yaml.MappingNode):
        return (parse_scope(reader, node, what),)
    if not isinstance(node, yaml.SequenceNode):
        raise reader.fail(
            node,
            f"{what}: expected a scope (nominal: {{...}}) or a list of scopes, "
            f"got {shown(reader.scalar(node))}",
        )
    if len(node.value) > MAX_SCOPES:
        raise reader.fail(node, f"{what}: {len(node.value)} scopes; expected at most {MAX_SCOPES}")
    scopes: list[QuotaScope] = []
    for number, item in enumerate(node.value, 1):
        scope = parse_scope(reader, item, f"{what} scope {number}")
        first = next((s for s in scopes if s.key == scope.key), None)
        if first is not None:
            raise reader.fail(
                item,
                f"{what} scope {number}: selects {scope.describe()}, as the scope at line "
                f"{first.line} does; expected each site/vendor/model selector once",
            )
        scopes.append(scope)
    return tuple(scopes)
