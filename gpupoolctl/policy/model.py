"""The pool policy as values: what the scheduling loop may do. Stdlib only, no YAML here.

A PoolPolicy comes from policy.load (a file) or is PoolPolicy() (no file: a static pool).
Its sections are optional and grow with the product: `elastic`, `health`, `teams`,
`windows` and `admins`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
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


# -- teams, quotas, windows, admins -------------------------------------------------------

# What a quota counts. "gpu-memory" is MiB (files say GiB: 160GiB, or a number of GiB);
# "cards" counts whole cards; "slices" counts slices of any kind (what a job sees as GPUs);
# any other resource is a slice profile ("1g.10gb", "cpx", "vf"), counted in slices.
GPU_MEMORY, CARDS, SLICES = "gpu-memory", "cards", "slices"
# Team and window names: what `--team` and a Slurm account can carry as they are.
NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
Vector = Mapping[str, int]


@dataclass(frozen=True)
class QuotaScope:
    """A team's quota over the slices a selector picks (Kueue's resource flavor): the whole
    pool when the selector is empty, else the slices of a site, a vendor and/or a model.

    nominal: guaranteed; what others borrow of it is given back when the team needs it.
    borrowing_limit: how far above nominal the team may go by borrowing what others leave
      idle; None: as far as the pool allows. A resource named in neither is not limited.
    lending_limit: how much of its unused nominal others may borrow; None: all of it. The
      rest stays free for the team even while it does not use it (Volcano's guarantee).
    """

    line: int  # where it is said, for messages
    site: str | None = None
    vendor: str | None = None  # "nvidia" / "amd"
    model: str | None = None  # case-insensitive part of the GPU model
    nominal: Vector = field(default_factory=dict)
    borrowing_limit: Vector | None = None
    lending_limit: Vector | None = None

    @property
    def key(self) -> tuple[str | None, str | None, str | None]:
        """What it selects: a window's quota for a team replaces the scope with this key."""
        return (self.site, self.vendor, self.model)

    def selects(self, entry: Mapping[str, Any]) -> bool:
        """Whether a slice (a ledger slice dict) is counted by this scope."""
        if self.site is not None and str(entry.get("site") or "") != self.site:
            return False
        if self.vendor is not None and str(entry.get("vendor") or "").lower() != self.vendor:
            return False
        return self.model is None or self.model.lower() in str(entry.get("model") or "").lower()

    def limit(self, resource: str) -> int | None:
        """The most the team may hold of `resource` here; None: unlimited."""
        if self.borrowing_limit is not None and resource in self.borrowing_limit:
            return self.nominal.get(resource, 0) + self.borrowing_limit[resource]
        return None

    def lendable(self, resource: str) -> int | None:
        """How much of its nominal `resource` others may borrow; None: all of it."""
        if self.lending_limit is not None and resource in self.lending_limit:
            return min(self.lending_limit[resource], self.nominal.get(resource, 0))
        return None

    def resources(self) -> list[str]:
        names = dict.fromkeys(self.nominal)
        for vector in (self.borrowing_limit, self.lending_limit):
            names.update(dict.fromkeys(vector or {}))
        return list(names)

    def describe(self) -> str:
        """'site singapore, model H100' or 'the whole pool'."""
        parts = [
            f"{label} {value}"
            for label, value in (
                ("site", self.site),
                ("vendor", self.vendor),
                ("model", self.model),
            )
            if value is not None
        ]
        return ", ".join(parts) or "the whole pool"

    def as_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "site": self.site,
            "vendor": self.vendor,
            "model": self.model,
            "nominal": dict(self.nominal),
            "borrowing_limit": dict(self.borrowing_limit)
            if self.borrowing_limit is not None
            else None,
            "lending_limit": dict(self.lending_limit) if self.lending_limit is not None else None,
        }


@dataclass(frozen=True)
class Team:
    name: str
    line: int
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()  # Unix groups whose members belong ("group:NAME")
    # Empty: the team is not limited (it is counted for usage and fair share only); else
    # it may use only the slices some scope selects.
    quota: tuple[QuotaScope, ...] = ()
    default: bool = False  # the team of a user who is in no team's members

    def has_member(self, user: str, groups: frozenset[str]) -> bool:
        return user in self.users or any(g in groups for g in self.groups)

    def nominal_memory(self) -> int:
        """Its guaranteed GPU memory, MiB, over all its scopes: its share for fair share."""
        return sum(scope.nominal.get(GPU_MEMORY, 0) for scope in self.quota)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "line": self.line,
            "users": list(self.users),
            "groups": list(self.groups),
            "default": self.default,
            "quota": [scope.as_dict() for scope in self.quota],
        }


@dataclass(frozen=True)
class TeamsPolicy:
    teams: tuple[Team, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.teams)

    def named(self, name: str) -> Team | None:
        return next((t for t in self.teams if t.name == name), None)

    def default_team(self) -> Team | None:
        return next((t for t in self.teams if t.default), None)

    def teams_of(self, user: str, groups: frozenset[str] = frozenset()) -> list[Team]:
        """The teams `user` (in `groups`) is a member of, in file order."""
        return [t for t in self.teams if t.has_member(user, groups)]

    def as_dict(self) -> dict[str, Any]:
        return {"teams": [team.as_dict() for team in self.teams]}


DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True)
class Window:
    """A named time of the week, in a time zone, during which teams' quotas (scope by
    scope) and the elastic section are replaced. Hours may cross midnight (20:00-08:00: a
    night that starts on one of `days` ends the next morning)."""

    name: str
    line: int
    timezone: str  # an IANA zone ("Asia/Singapore"); local wall time, DST included
    days: frozenset[int] = frozenset(range(7))  # 0 = Monday
    start_min: int = 0  # minutes after local midnight
    end_min: int = 1440  # exclusive; <= start_min: the window ends on the next day
    teams: Mapping[str, tuple[QuotaScope, ...]] = field(default_factory=dict)
    elastic: ElasticPolicy | None = None  # replaces the elastic section while active

    def active(self, now: datetime) -> bool:
        """Whether `now` (aware) falls inside the window, in its time zone."""
        from zoneinfo import ZoneInfo

        local = now.astimezone(ZoneInfo(self.timezone))
        minute = local.hour * 60 + local.minute
        today = local.weekday()
        if self.start_min < self.end_min:
            return today in self.days and self.start_min <= minute < self.end_min
        # Crosses midnight: the evening part belongs to today, the morning part to the
        # night that began yesterday.
        return (today in self.days and minute >= self.start_min) or (
            (today - 1) % 7 in self.days and minute < self.end_min
        )

    def hours_text(self) -> str:
        def clock(minutes: int) -> str:
            return f"{minutes // 60:02d}:{minutes % 60:02d}"

        return f"{clock(self.start_min)}-{clock(self.end_min)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "line": self.line,
            "timezone": self.timezone,
            "days": [DAY_NAMES[d] for d in sorted(self.days)],
            "hours": self.hours_text(),
            "teams": {k: [s.as_dict() for s in v] for k, v in self.teams.items()},
            "elastic": self.elastic.as_dict() if self.elastic is not None else None,
        }


@dataclass(frozen=True)
class Admins:
    """Pool admins: they may release, cancel and drain-now other users' work (recorded as
    done by an admin). Without the section nobody is a pool admin but root."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    def includes(self, user: str, groups: frozenset[str]) -> bool:
        return user == "root" or user in self.users or any(g in groups for g in self.groups)

    def as_dict(self) -> dict[str, Any]:
        return {"users": list(self.users), "groups": list(self.groups)}


@dataclass(frozen=True)
class PoolPolicy:
    source: str | None = None  # the file it came from; None = no file (a static pool)
    elastic: ElasticPolicy = field(default_factory=ElasticPolicy)
    health: HealthPolicy = field(default_factory=HealthPolicy)
    teams: TeamsPolicy = field(default_factory=TeamsPolicy)
    windows: tuple[Window, ...] = ()
    admins: Admins = field(default_factory=Admins)

    def active_windows(self, now: datetime) -> list[Window]:
        """The windows `now` falls in, in file order (the first one wins where two say the
        same thing)."""
        return [w for w in self.windows if w.active(now)]

    def quota_in_force(self, team: Team, now: datetime) -> tuple[QuotaScope, ...]:
        """The team's quota at `now`: each of its scopes, replaced by the first active
        window that gives one with the same selector; a window's scope with a selector the
        team's own quota has not is added."""
        scopes = {scope.key: scope for scope in team.quota}
        taken: set[tuple[str | None, str | None, str | None]] = set()
        for window in self.active_windows(now):
            for scope in window.teams.get(team.name, ()):
                if scope.key not in taken:
                    scopes[scope.key] = scope
                    taken.add(scope.key)
        return tuple(scopes.values())

    def elastic_in_force(self, now: datetime) -> ElasticPolicy:
        """The elastic section, or the first active window's replacement for it."""
        for window in self.active_windows(now):
            if window.elastic is not None:
                return window.elastic
        return self.elastic

    def as_dict(self) -> dict[str, Any]:
        """Plain values for JSON/YAML output."""
        return {
            "file": self.source,
            "elastic": self.elastic.as_dict(),
            "health": self.health.as_dict(),
            "teams": self.teams.as_dict(),
            "windows": [w.as_dict() for w in self.windows],
            "admins": self.admins.as_dict(),
        }
