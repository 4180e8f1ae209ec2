"""The `elastic:` section of a pool policy file: which cards the loop may re-cut, into what.

elastic:
  enabled: true            # default true once the section is written
  min-idle: 5m             # durations: 30s, 5m, 1h, 1h30m, 2d or a number of seconds
  max-cards-per-pass: 4
  batch-window: 30s
  backoff: 15m
  rules:                   # first match wins; a card no rule matches stays as it is
    - hosts: h100          # --limit pattern (or a list of them); default any host
      vendor: nvidia       # nvidia | amd; default any
      model: H100          # case-insensitive part of the GPU model; default any
      enabled: true        # false: matching cards are never re-cut
      profiles: [1g.10gb, 3g.40gb]   # MIG GPU-instance profiles; default all of the model's
      amd-modes: [spx/nps1, cpx/nps4]  # AMD compute/memory modes; default all allowed
      keep-whole: 2        # per node, this many matching cards are never re-cut
"""

from __future__ import annotations

import re

import yaml

from gpupoolctl.hw.amd_modes import COMPUTE_MODE_NAMES, MEMORY_MODE_NAMES
from gpupoolctl.hw.mig_names import parse_profile_name
from gpupoolctl.hw.shown import shown
from gpupoolctl.policy import known
from gpupoolctl.policy.model import ElasticPolicy, ElasticRule
from gpupoolctl.policy.sections import section_keys
from gpupoolctl.policy.values import duration_s, whole
from gpupoolctl.yamlsource import YamlSource, did_you_mean

SECTION_KEYS = ("enabled", "min-idle", "max-cards-per-pass", "batch-window", "backoff", "rules")
RULE_KEYS = ("hosts", "vendor", "model", "enabled", "profiles", "amd-modes", "keep-whole")
VENDORS = ("nvidia", "amd")

# Bounds: past these a value is a typo (a unit left out, a digit too many), not a policy.
MAX_MIN_IDLE_S = 7 * 86400.0
MAX_BATCH_WINDOW_S = 86400.0
MAX_BACKOFF_S = 7 * 86400.0
MAX_CARDS_PER_PASS = 1024
MAX_KEEP_WHOLE = 64  # cards per node
MAX_RULES = 1000
MAX_MODEL_TEXT = 200
_AMD_MODE = re.compile(r"([a-z]+)/([a-z0-9]+)")
# As long as inventory.patterns allows; the patterns themselves are resolved (and their
# brackets checked) by the caller against its inventory, with the rule's line.
MAX_PATTERN = 1024
_PATTERN_PARTS = re.compile(r"[,:](?![^\[]*\])")  # ',' or ':' outside brackets


def parse_elastic(reader: YamlSource, node: yaml.Node) -> ElasticPolicy:
    """The section at `node`; `elastic:` with nothing under it is no section (static)."""
    if isinstance(node, yaml.ScalarNode) and reader.scalar(node) is None:
        return ElasticPolicy()
    keys = section_keys(reader, node, "elastic", SECTION_KEYS)
    defaults = ElasticPolicy()

    def duration(key: str, default: float, most: float) -> float:
        if key not in keys:
            return default
        value_node = keys[key][1]
        with reader.at(value_node):
            return duration_s(reader.scalar(value_node), f"elastic.{key}", most_s=most)

    enabled = _bool(reader, keys, "enabled", "elastic", default=True)
    per_pass = defaults.max_cards_per_pass
    if "max-cards-per-pass" in keys:
        value_node = keys["max-cards-per-pass"][1]
        with reader.at(value_node):
            per_pass = whole(
                reader.scalar(value_node),
                "elastic.max-cards-per-pass",
                least=1,
                most=MAX_CARDS_PER_PASS,
            )
    rules: tuple[ElasticRule, ...] = ()
    if "rules" in keys:
        rules = _rules(reader, keys["rules"][1])
    return ElasticPolicy(
        enabled=enabled,
        rules=rules,
        min_idle_s=duration("min-idle", defaults.min_idle_s, MAX_MIN_IDLE_S),
        max_cards_per_pass=per_pass,
        batch_window_s=duration("batch-window", defaults.batch_window_s, MAX_BATCH_WINDOW_S),
        backoff_s=duration("backoff", defaults.backoff_s, MAX_BACKOFF_S),
    )


def _bool(
    reader: YamlSource,
    keys: dict[str, tuple[yaml.Node, yaml.Node]],
    key: str,
    what: str,
    *,
    default: bool,
) -> bool:
    if key not in keys:
        return default
    value = reader.scalar(keys[key][1])
    if not isinstance(value, bool):
        raise reader.fail(keys[key][1], f"{what}.{key}: expected true or false, got {shown(value)}")
    return value


def _rules(reader: YamlSource, node: yaml.Node) -> tuple[ElasticRule, ...]:
    if not isinstance(node, yaml.SequenceNode):
        raise reader.fail(node, "elastic.rules: expected a list of rules (- hosts: ..., ...)")
    if len(node.value) > MAX_RULES:
        raise reader.fail(
            node, f"elastic.rules: {len(node.value)} rules; expected at most {MAX_RULES}"
        )
    return tuple(_rule(reader, item, number) for number, item in enumerate(node.value, 1))


def _rule(reader: YamlSource, node: yaml.Node, number: int) -> ElasticRule:
    what = f"elastic rule {number}"
    keys = section_keys(reader, node, what, RULE_KEYS)
    vendor = read_vendor(reader, keys, what)
    model = read_model(reader, keys, what)
    enabled = _bool(reader, keys, "enabled", what, default=True)
    profiles = amd = None
    if "profiles" in keys:
        if vendor == "amd":
            raise reader.fail(
                keys["profiles"][0],
                f"{what}: profiles are NVIDIA MIG profiles but the rule selects vendor amd; "
                "expected amd-modes for AMD cards",
            )
        profiles = _profiles(reader, keys["profiles"][1], what, model)
    if "amd-modes" in keys:
        if vendor == "nvidia":
            raise reader.fail(
                keys["amd-modes"][0],
                f"{what}: amd-modes are AMD partition modes but the rule selects vendor "
                "nvidia; expected profiles for NVIDIA cards",
            )
        amd = _amd_modes(reader, keys["amd-modes"][1], what, model)
    if enabled and model is not None and vendor != "amd" and known.model_cannot_be_cut(model):
        raise reader.fail(
            keys["model"][1],
            f"{what}: the catalog's {model} has no MIG profiles or AMD modes, so there is "
            "nothing to re-cut it into; expected enabled: false for it",
        )
    keep = 0
    if "keep-whole" in keys:
        value_node = keys["keep-whole"][1]
        with reader.at(value_node):
            keep = whole(
                reader.scalar(value_node), f"{what}: keep-whole", least=0, most=MAX_KEEP_WHOLE
            )
    return ElasticRule(
        line=node.start_mark.line + 1,
        hosts=_hosts(reader, keys, what),
        vendor=vendor,
        model=model,
        enabled=enabled,
        profiles=profiles,
        amd_modes=amd,
        keep_whole=keep,
    )


def _text(reader: YamlSource, node: yaml.Node, what: str, expected: str) -> str:
    value = reader.scalar(node)
    if not isinstance(value, str) or not value.strip():
        raise reader.fail(node, f"{what}: expected {expected}, got {shown(value)}")
    return value.strip()


def _hosts(
    reader: YamlSource, keys: dict[str, tuple[yaml.Node, yaml.Node]], what: str
) -> str | None:
    if "hosts" not in keys:
        return None
    expected = "a host pattern such as h100, sg-dgx*, gpu[01-04] (or a list of them)"
    patterns = []
    for item in reader.items(keys["hosts"][1]):
        text = _text(reader, item, f"{what}: hosts", expected)
        if len(text) > MAX_PATTERN:
            raise reader.fail(
                item, f"{what}: hosts: a pattern of {len(text)} characters; at most {MAX_PATTERN}"
            )
        for part in _PATTERN_PARTS.split(text):
            bare = part.strip().lstrip("&!")
            if bare.startswith("@"):
                # Read relative to wherever cron runs the loop: a surprise, not a policy.
                raise reader.fail(
                    item, f"{what}: hosts: {shown(part.strip())} reads a file; expected {expected}"
                )
            if bare.startswith("~"):
                try:
                    re.compile(bare[1:])
                except re.error as exc:
                    raise reader.fail(
                        item, f"{what}: hosts: bad regex {shown(bare)}: {exc}"
                    ) from None
        patterns.append(text)
    if not patterns:
        raise reader.fail(keys["hosts"][1], f"{what}: hosts: expected {expected}, got []")
    return ",".join(patterns)


def read_vendor(
    reader: YamlSource, keys: dict[str, tuple[yaml.Node, yaml.Node]], what: str
) -> str | None:
    """keys["vendor"]: nvidia or amd (lower case); None when not given. Quota scopes too."""
    if "vendor" not in keys:
        return None
    node = keys["vendor"][1]
    value = _text(reader, node, f"{what}: vendor", "nvidia or amd").lower()
    if value not in VENDORS:
        raise reader.fail(
            node,
            f"{what}: unknown vendor {shown(value)}{did_you_mean(value, VENDORS)}; "
            "expected nvidia or amd",
        )
    return value


def read_model(
    reader: YamlSource, keys: dict[str, tuple[yaml.Node, yaml.Node]], what: str
) -> str | None:
    """keys["model"]: a part of a GPU model (`4090` is the text); None when not given."""
    if "model" not in keys:
        return None
    node = keys["model"][1]
    value = reader.scalar(node)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # `model: 4090` means the text
    if not isinstance(value, str) or not value.strip():
        raise reader.fail(
            node,
            f"{what}: model: expected a part of a GPU model such as H100 or MI300X, "
            f"got {shown(value)}",
        )
    if len(value.strip()) > MAX_MODEL_TEXT:
        raise reader.fail(
            node, f"{what}: model: {len(value)} characters; expected at most {MAX_MODEL_TEXT}"
        )
    return value.strip()


def _names(
    reader: YamlSource, node: yaml.Node, what: str, expected: str
) -> list[tuple[str, yaml.Node]]:
    items = reader.items(node)
    if isinstance(node, yaml.SequenceNode) and not items:
        raise reader.fail(
            node,
            f"{what}: an empty list allows nothing; expected {expected} (leave the key out to "
            "allow all, or set enabled: false)",
        )
    out = []
    for item in items:
        value = reader.scalar(item)
        if not isinstance(value, str) or not value.strip():
            raise reader.fail(item, f"{what}: expected {expected}, got {shown(value)}")
        out.append((value.strip(), item))
    return out


def _profiles(reader: YamlSource, node: yaml.Node, what: str, model: str | None) -> tuple[str, ...]:
    label = f"{what}: profiles"
    expected = "MIG GPU-instance profiles such as 1g.10gb, 3g.40gb"
    allowed = known.nvidia_profiles(model)
    names: list[str] = []
    for text, item in _names(reader, node, label, expected):
        try:
            parsed = parse_profile_name(text)
        except ValueError as exc:
            raise reader.fail(
                item, f"{label}: malformed MIG profile {shown(text)} ({exc}); expected {expected}"
            ) from None
        if parsed.is_ci_form:
            raise reader.fail(
                item,
                f"{label}: {text} is a compute-instance profile; expected the GPU-instance "
                f"profile it lives in ({parsed.gi_name})",
            )
        name = parsed.gi_name
        if name not in allowed:
            raise reader.fail(
                item,
                f"{label}: {name} is not a MIG profile of {_scope(model, 'nvidia')}; "
                f"known: {', '.join(allowed)}",
            )
        if name in names:
            raise reader.fail(item, f"{label}: {name} is listed twice; expected each once")
        names.append(name)
    return tuple(names)


def _amd_modes(
    reader: YamlSource, node: yaml.Node, what: str, model: str | None
) -> tuple[str, ...]:
    label = f"{what}: amd-modes"
    expected = "compute/memory modes such as spx/nps1, cpx/nps4"
    allowed = known.amd_mode_pairs(model)
    modes: list[str] = []
    for text, item in _names(reader, node, label, expected):
        mode = text.lower().replace(" ", "")
        match = _AMD_MODE.fullmatch(mode)
        if (
            not match
            or match.group(1).upper() not in COMPUTE_MODE_NAMES
            or match.group(2).upper() not in MEMORY_MODE_NAMES
        ):
            raise reader.fail(
                item,
                f"{label}: malformed AMD mode {shown(text)}; expected compute/memory with "
                f"compute one of {', '.join(COMPUTE_MODE_NAMES)} and memory one of "
                f"{', '.join(MEMORY_MODE_NAMES)} (spx/nps1)",
            )
        if mode not in allowed:
            raise reader.fail(
                item,
                f"{label}: {mode} is not allowed on {_scope(model, 'amd')}; "
                f"known: {', '.join(allowed)}",
            )
        if mode in modes:
            raise reader.fail(item, f"{label}: {mode} is listed twice; expected each once")
        modes.append(mode)
    return tuple(modes)


def _scope(model: str | None, vendor: str) -> str:
    """What a name was checked against, for the error line."""
    if vendor == "nvidia":
        named = model is not None and known.nvidia_profiles(model, strict=True)
        return f"the catalog's {model}" if named else "any catalog model"
    named = model is not None and known.amd_mode_pairs(model, strict=True)
    return f"the catalog's {model}" if named else "any AMD product"
