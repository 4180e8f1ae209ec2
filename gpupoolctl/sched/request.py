"""What a job asks for (JobRequest), priorities, and whether one slice satisfies a request.

A request for N GPUs is N slices. Each slice must match every attribute that is set:

- `profile`: a MIG profile ("1g.10gb"), an AMD mode ("cpx"), or a kind ("gpu" for whole
  cards, "mig", "partition", "vf"), compared as the ledger always has (case-insensitive);
- `memory_mib`: the slice has at least that much;
- `vendor`: equal, case-insensitive; `model`: a case-insensitive substring of the GPU model;
- `bandwidth_class`: at least this class (standard < high < ultra);
- `host`: a glob on the host name.

No profile and no memory means any slice (the smallest win under best-fit); ask for
`profile="gpu"` for whole cards. A job submitted without a size gets whole cards
(`sized_profile`): `submit` and the stress workloads build their requests so.
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, fields
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.hw.model import BANDWIDTH_CLASSES
from gpupoolctl.policy.model import NAME as TEAM_NAME

PRIORITIES: dict[str, int] = {"low": 10, "normal": 50, "high": 90}
PRIORITY_MIN, PRIORITY_MAX = 0, 100
VENDORS = ("nvidia", "amd")
BANDWIDTH_RANK: dict[str, int] = {name: rank for rank, (name, _) in enumerate(BANDWIDTH_CLASSES)}


def parse_priority(text: str) -> int:
    """'low' / 'normal' / 'high' or an integer 0..100; UsageError otherwise."""
    word = str(text).strip().lower()
    if word in PRIORITIES:
        return PRIORITIES[word]
    try:
        value = int(word)
    except ValueError:
        raise UsageError(
            f"bad priority {text!r}: use low, normal, high or a number 0..100"
        ) from None
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise UsageError(f"bad priority {text!r}: a number must be within 0..100")
    return value


WHOLE_CARD = "gpu"  # the profile (a slice kind) that asks for whole cards


def sized_profile(profile: str | None, mem: object | None) -> str | None:
    """The profile a job's request carries. A job that says nothing about its size (no
    profile and no memory) gets whole cards: handing `torchrun` a 1g slice because it was
    the smallest free one would be a surprise, not pooling. One that gives either keeps it
    as given, even empty: an empty profile is a mistake (JobRequest.validate refuses it),
    never a quiet whole card."""
    return profile if profile is not None or mem is not None else WHOLE_CARD


@dataclass(frozen=True)
class JobRequest:
    gpus: int = 1
    profile: str | None = None
    memory_mib: int | None = None
    vendor: str | None = None
    model: str | None = None
    bandwidth_class: str | None = None
    same_node: bool = False
    same_island: bool = False
    host: str | None = None
    priority: int = PRIORITIES["normal"]
    preemptible: bool = False
    team: str | None = None  # whose quota it counts against (policy teams:); None: no team

    def validate(self) -> None:
        """Refuse malformed or self-contradicting requests up front (UsageError, exit 2)."""
        if not isinstance(self.gpus, int) or self.gpus < 1:
            raise UsageError(f"gpus must be at least 1 (got {self.gpus!r})")
        if self.profile is not None and self.memory_mib is not None:
            raise UsageError("give a profile or a memory size, not both (a profile fixes memory)")
        if self.profile is not None and not self.profile.strip():
            raise UsageError("profile must not be empty")
        if self.memory_mib is not None and self.memory_mib < 1:
            raise UsageError(f"memory must be more than zero (got {self.memory_mib} MiB)")
        if self.vendor is not None and self.vendor.lower() not in VENDORS:
            raise UsageError(f"unknown vendor {self.vendor!r}: use {' or '.join(VENDORS)}")
        if self.model is not None and not self.model.strip():
            raise UsageError("model must not be empty")
        if self.bandwidth_class is not None and self.bandwidth_class not in BANDWIDTH_RANK:
            names = ", ".join(BANDWIDTH_RANK)
            raise UsageError(f"unknown bandwidth class {self.bandwidth_class!r}: use {names}")
        if self.host is not None and not self.host.strip():
            raise UsageError("host pattern must not be empty")
        if self.team is not None and not TEAM_NAME.fullmatch(self.team):
            raise UsageError(
                f"bad team name {self.team[:40]!r}: a lower-case letter, then a-z, 0-9, _ or -"
            )
        if not PRIORITY_MIN <= self.priority <= PRIORITY_MAX:
            raise UsageError(f"priority must be within 0..100 (got {self.priority})")

    def to_dict(self) -> dict[str, Any]:
        """Every field that is set (None left out): the form kept in ledger records."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRequest:
        """The inverse of to_dict. Unknown keys are ignored (records of a newer version);
        a known key of the wrong type is a UsageError."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known or value is None:
                continue
            values[key] = _coerce(key, value)
        return cls(**values)

    def describe(self) -> str:
        """'2 x 3g.40gb, nvidia, same island' for messages."""
        parts = []
        if self.profile:
            parts.append(self.profile)
        if self.memory_mib:
            parts.append(f">= {self.memory_mib} MiB")
        if not parts:
            parts.append("any slice")
        for label, value in (("vendor", self.vendor), ("model", self.model)):
            if value:
                parts.append(f"{label} {value}")
        if self.bandwidth_class:
            parts.append(f"bandwidth >= {self.bandwidth_class}")
        if self.host:
            parts.append(f"host {self.host}")
        if self.same_island:
            parts.append("same island")
        elif self.same_node:
            parts.append("same node")
        return f"{self.gpus} x " + ", ".join(parts)

    def shape_key(self) -> tuple[Any, ...]:
        """Everything placement looks at, priority and preemptibility aside: requests with
        the same key get the same answer from place() on the same view."""
        return (
            self.gpus,
            self.profile,
            self.memory_mib,
            self.vendor,
            self.model,
            self.bandwidth_class,
            self.same_node,
            self.same_island,
            self.host,
        )

    def static_key(self) -> tuple[Any, ...]:
        """The attributes that decide whether one slice shape matches (cache key)."""
        return (
            self.profile.lower() if self.profile else None,
            self.memory_mib,
            self.vendor.lower() if self.vendor else None,
            self.model.lower() if self.model else None,
            self.bandwidth_class,
        )


_BOOLS = ("same_node", "same_island", "preemptible")
_INTS = ("gpus", "memory_mib", "priority")


def _coerce(key: str, value: Any) -> Any:
    if key in _BOOLS:
        if not isinstance(value, bool):
            raise UsageError(f"request field {key} must be true or false (got {value!r})")
        return value
    if key in _INTS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"request field {key} must be an integer (got {value!r})")
        return value
    if not isinstance(value, str):
        raise UsageError(f"request field {key} must be text (got {value!r})")
    return value


def shape_matches(entry: dict[str, Any], request: JobRequest) -> bool:
    """Whether a slice satisfies the request, the host glob aside (see host_matches)."""
    if request.profile is not None:
        wanted = request.profile.lower()
        profile = (entry.get("profile") or "").lower()
        if wanted not in {entry.get("kind", ""), profile, profile.split("/")[0]}:
            return False
    if request.memory_mib is not None and (entry.get("memory_mib") or 0) < request.memory_mib:
        return False
    if request.vendor is not None and str(entry.get("vendor") or "").lower() != (
        request.vendor.lower()
    ):
        return False
    if request.model is not None and request.model.lower() not in (
        str(entry.get("model") or "").lower()
    ):
        return False
    if request.bandwidth_class is not None:
        have = BANDWIDTH_RANK.get(entry.get("bandwidth_class") or "", -1)
        if have < BANDWIDTH_RANK.get(request.bandwidth_class, len(BANDWIDTH_RANK)):
            return False
    return True


def host_matches(host: str, request: JobRequest) -> bool:
    return request.host is None or fnmatch.fnmatchcase(host, request.host)


def matches(entry: dict[str, Any], request: JobRequest) -> bool:
    return shape_matches(entry, request) and host_matches(entry["host"], request)
