"""The pool policy as values: what the scheduling loop may do. Stdlib only, no YAML here.

A PoolPolicy comes from policy.load (a file) or is PoolPolicy() (no file: a static pool).
Its sections are optional and grow with the product: `elastic` and `health` today.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WHAT = "pool policy file"  # how messages name it

InHosts = Callable[[str, str], bool]
"""in_hosts(pattern, host): whether `host` is selected by the --limit `pattern` (the caller
resolves groups, ranges and globs against its inventory)."""


@dataclass(frozen=True)
class ElasticRule:
    line: int  # the rule's line in the file, for messages ("pool.yaml:12")
    hosts: str | None = None  # an inventory --limit pattern; None = any host
    vendor: str | None = None  # "nvidia" / "amd"; None = any
    model: str | None = None  # case-insensitive substring of the GPU model; None = any
    enabled: bool = True
    profiles: tuple[str, ...] | None = None  # MIG GI profiles; None = all the catalog has
    amd_modes: tuple[str, ...] | None = None  # "compute/memory", lower case; None = all allowed
    keep_whole: int = 0  # per node: this many matching cards are never re-cut

    def matches(self, host: str, vendor: str | None, model: str | None, in_hosts: InHosts) -> bool:
        """Whether this rule selects a card of `vendor`/`model` on `host`. A rule that names
        a vendor or model never selects a card whose vendor or model is unknown."""
        if self.vendor is not None and (vendor or "").lower() != self.vendor:
            return False
        if self.model is not None and (model is None or self.model.lower() not in model.lower()):
            return False
        # Last: resolving a pattern against the inventory is the costly test.
        return self.hosts is None or in_hosts(self.hosts, host)

    def allows_profile(self, profile: str) -> bool:
        """Whether the rule lets a card be cut into this MIG GPU-instance profile."""
        return self.profiles is None or profile in self.profiles

    def allows_amd_mode(self, compute: str, memory: str) -> bool:
        """Whether the rule lets an AMD card be set to this compute/memory mode pair."""
        wanted = f"{compute}/{memory}".lower()
        return self.amd_modes is None or wanted in self.amd_modes

    def as_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "hosts": self.hosts,
            "vendor": self.vendor,
            "model": self.model,
            "enabled": self.enabled,
            "profiles": list(self.profiles) if self.profiles is not None else None,
            "amd_modes": list(self.amd_modes) if self.amd_modes is not None else None,
            "keep_whole": self.keep_whole,
        }


@dataclass(frozen=True)
class ElasticPolicy:
    enabled: bool = False  # off: the pool stays static, exactly as without a policy
    rules: tuple[ElasticRule, ...] = ()  # first match wins; a card no rule matches is static
    min_idle_s: float = 300.0  # idle (no hold, no re-cut) this long before a re-cut
    max_cards_per_pass: int = 4  # at most this many cards re-cut in one scheduling pass
    batch_window_s: float = 30.0  # queued work waits this long before it may trigger a re-cut
    backoff_s: float = 900.0  # a card whose re-cut failed stays out of elastic use this long

    def rule_for(
        self, host: str, vendor: str | None, model: str | None, in_hosts: InHosts
    ) -> ElasticRule | None:
        """The rule that makes this card elastic; None when the section is off, no rule
        matches, or the first matching rule says `enabled: false`."""
        if not self.enabled:
            return None
        for rule in self.rules:
            if rule.matches(host, vendor, model, in_hosts):
                return rule if rule.enabled else None
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "min_idle_s": self.min_idle_s,
            "max_cards_per_pass": self.max_cards_per_pass,
            "batch_window_s": self.batch_window_s,
            "backoff_s": self.backoff_s,
            "rules": [rule.as_dict() for rule in self.rules],
        }


# Slurm's SlurmdTimeout is 300 s, Kubernetes marks a node unreachable after about 50 s; a
# pool of checkpointing jobs wants its work back sooner than Slurm gives it.
DEFAULT_NODE_DEAD_AFTER_S = 90.0
RETURN_TO_SERVICE = ("auto", "manual")


@dataclass(frozen=True)
class HealthPolicy:
    """What the loop does about nodes that stop answering (the `health:` section)."""

    # A host with running jobs that has not answered for this long is declared lost: its
    # jobs end (or restart elsewhere) and their slices are released.
    node_dead_after_s: float = DEFAULT_NODE_DEAD_AFTER_S
    # auto: a lost node that answers again has its stale runs killed, then its automatic
    # drain is lifted; manual: it stays drained until an admin runs `undrain`.
    return_to_service: str = "auto"

    def as_dict(self) -> dict[str, Any]:
        return {
            "node_dead_after_s": self.node_dead_after_s,
            "return_to_service": self.return_to_service,
        }


@dataclass(frozen=True)
class PoolPolicy:
    source: str | None = None  # the file it came from; None = no file (a static pool)
    elastic: ElasticPolicy = field(default_factory=ElasticPolicy)
    health: HealthPolicy = field(default_factory=HealthPolicy)
    # Later sections (teams, windows) are added as fields here.

    def as_dict(self) -> dict[str, Any]:
        """Plain values for JSON/YAML output."""
        return {
            "file": self.source,
            "elastic": self.elastic.as_dict(),
            "health": self.health.as_dict(),
        }
