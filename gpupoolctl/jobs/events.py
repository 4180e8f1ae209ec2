"""What the scheduling loop did, typed: one small frozen class per family of events, each
with a closed set of kinds. The loop's steps build them (jobs.scheduling, jobs.dryrun,
jobs.lost, jobs.repartition); `cli/` renders them, as text or as `to_dict()`, the JSON
shape `-o json` prints: "event" (the kind), then the fields in the order they are declared
(the key order is part of that shape), tuples as lists.

    Launched("j-3", ("n1",), None, kind="started").to_dict()
    == {"event": "started", "job": "j-3", "hosts": ["n1"], "error": None}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class Event:
    """The base of every event: its `kind` (the JSON's "event") is one of the class's
    KINDS; anything else is refused when it is made."""

    KINDS: ClassVar[tuple[str, ...]] = ()
    kind: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            known = ", ".join(self.KINDS)
            raise ValueError(f"{type(self).__name__}: no event kind {self.kind!r} ({known})")

    def to_dict(self) -> dict[str, Any]:
        """The event as `-o json` prints it."""
        out: dict[str, Any] = {"event": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "kind" and not self._left_out(f.name, value):
                out[f.name] = _plain(value)
        return out

    def _left_out(self, name: str, value: Any) -> bool:
        """Whether the JSON leaves this field out (most show every field, None too)."""
        return False


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, RecutDue):
        return asdict(value)
    return value


@dataclass(frozen=True)
class RecutDue:
    """The re-cut a waiting job waits for: the card, its new layout, and the ledger time
    from which a pass may make it."""

    gpu: str
    after: str
    due: str


@dataclass(frozen=True)
class Waiting(Event):
    """A queued job the pass could not start, why (`reason`, `code`: sched.explain), and
    the re-cut it waits for, if one."""

    KINDS = ("waiting",)
    job: str | None
    reason: str
    code: str
    recut: RecutDue | None = None
    kind: str = field(default="waiting", kw_only=True)

    def _left_out(self, name: str, value: Any) -> bool:
        return name == "recut" and value is None


@dataclass(frozen=True)
class Refused(Event):
    """A job failed because it can never fit (its `code`), or could not be recorded where
    it was placed (no code); `would-refuse`: what a dry run would refuse."""

    KINDS = ("refused", "would-refuse")
    job: str | None
    reason: str
    code: str | None = None
    kind: str = field(default="refused", kw_only=True)

    def _left_out(self, name: str, value: Any) -> bool:
        return name == "code" and value is None


@dataclass(frozen=True)
class Launched(Event):
    """A placed job sent to its hosts: `started`, `requeued` (its nodes did not launch it;
    `reason` says why) or `launch-failed` (`error`)."""

    KINDS = ("started", "requeued", "launch-failed")
    job: str
    hosts: tuple[str, ...]
    error: str | None
    reason: str | None = None
    kind: str = field(kw_only=True)

    def _left_out(self, name: str, value: Any) -> bool:
        return name == "reason" and self.kind != "requeued"


@dataclass(frozen=True)
class Preempted(Event):
    """Victims stopped to make room for `job`."""

    KINDS = ("preempted",)
    job: str | None
    victims: tuple[str, ...]
    kind: str = field(default="preempted", kw_only=True)


@dataclass(frozen=True)
class Reshaped(Event):
    """A card's re-cut closed: done (`reshaped`) or failed (`reshape-failed`, `error`)."""

    KINDS = ("reshaped", "reshape-failed")
    gpu: str
    before: str
    after: str
    jobs: tuple[str, ...]
    error: str | None
    kind: str = field(default="reshaped", kw_only=True)


@dataclass(frozen=True)
class NodeLost(Event):
    """A host declared lost (silent `since`, last `answered`), its `jobs` ended or
    requeued."""

    KINDS = ("node-lost",)
    host: str
    since: str
    answered: str | None
    jobs: tuple[str, ...]
    kind: str = field(default="node-lost", kw_only=True)


@dataclass(frozen=True)
class NodeReturned(Event):
    """A lost host answers again; `undrained`: the loss's drain was lifted."""

    KINDS = ("node-returned",)
    host: str
    undrained: bool
    kind: str = field(default="node-returned", kw_only=True)


@dataclass(frozen=True)
class StaleRunKilled(Event):
    """A fenced run (`run`, on `host`) of a job that moved on, killed."""

    KINDS = ("stale-run-killed",)
    job: str
    host: str
    run: str
    kind: str = field(default="stale-run-killed", kw_only=True)


@dataclass(frozen=True)
class WouldStart(Event):
    """Dry run: the job fits now on `slices`."""

    KINDS = ("would-start",)
    job: str | None
    slices: tuple[str, ...]
    reason: str
    kind: str = field(default="would-start", kw_only=True)


@dataclass(frozen=True)
class WouldPreempt(Event):
    """Dry run: the pass would stop `victims` for the job (`reclaim`: for its team)."""

    KINDS = ("would-preempt",)
    job: str | None
    victims: tuple[str, ...]
    reclaim: bool
    reason: str
    kind: str = field(default="would-preempt", kw_only=True)


@dataclass(frozen=True)
class WouldRecut(Event):
    """Dry run: the pass would re-cut `gpu` from `before` to `after` for `job` (the jobs
    it is made for, comma-separated)."""

    KINDS = ("would-re-cut",)
    job: str
    gpu: str
    before: str
    after: str
    reason: str
    kind: str = field(default="would-re-cut", kw_only=True)


# Every kind of every family: each family is a direct subclass of Event.
KINDS: frozenset[str] = frozenset(k for family in Event.__subclasses__() for k in family.KINDS)


def reasons_for(events: Iterable[Event], job: str) -> list[Waiting | Refused | Launched]:
    """The events of `job` that say why it is where it is (those with a reason), in order."""
    return [
        e
        for e in events
        if isinstance(e, Waiting | Refused | Launched) and e.job == job and e.reason
    ]
