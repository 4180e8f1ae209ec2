"""One frame of the pool at a glance, as plain values: per site and node each GPU with its
slices (free, held and by whom, being re-cut, drained, failed), the running jobs, the queue
head with each entry's reason for waiting, recent events and utilization over the last hour.

`build_frame` is pure: the caller brings the ledger's state (board.follow), why queued jobs
wait (the scheduler's own dry pass, gpupoolctl.jobs.dryrun.waiting_reasons) and, when it
asked the nodes, their facts. Every view (`top`, `top --once`, `pool --html`) draws this.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

from gpupoolctl.board.events import Event
from gpupoolctl.errors import UsageError
from gpupoolctl.ledger.cards import card_memory_mib, physical_cards
from gpupoolctl.ledger.state import JOB_HOLDING, State, card_key
from gpupoolctl.ledger.units import parse_ts
from gpupoolctl.sched.unavailable import KINDS, Finder

# GPU states, worst first: the one a card is drawn in.
GPU_STATES = ("lost", "failed", "drained", "blocked", "re-cutting", "busy", "partly held", "free")
FILTER_KEYS = ("host", "owner", "team")
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class SliceCell:
    id: str
    label: str  # what people call it: "1g.10gb", "cpx", "whole"
    memory_mib: int
    state: str  # free | held | lost | drained | blocked | re-cutting (sched.unavailable)
    owner: str | None = None
    job: str | None = None  # the job holding it, else the allocation
    team: str | None = None


@dataclass(frozen=True)
class GpuCell:
    key: str  # host/gpuN
    index: int | None
    model: str
    memory_mib: int  # its memory as the ledger knows it (ledger.cards.card_memory_mib)
    held_mib: int
    state: str  # one of GPU_STATES
    reason: str | None
    slices: tuple[SliceCell, ...]
    used_mib: int | None = None  # from facts: memory in use on the card
    utilization_pct: float | None = None
    temperature_c: float | None = None
    # The physical card it is on (ledger.cards): an AMD card's logical GPUs share it.
    card: str | None = None


@dataclass(frozen=True)
class NodeRow:
    host: str
    site: str
    state: str  # ok | silent | lost | drained
    reason: str | None
    gpus: tuple[GpuCell, ...]


@dataclass(slots=True)
class JobRow:  # not frozen: a live view keeps the row and moves only its age
    id: str
    owner: str
    team: str | None
    state: str
    name: str | None
    hosts: tuple[str, ...]
    slices: tuple[str, ...]
    age_s: float | None


@dataclass(frozen=True)
class QueueRow:
    id: str
    owner: str
    team: str | None
    priority: int
    waited_s: float | None
    reason: str | None
    want: str  # the request, in a few words ("1 x 10 GiB", "8 x gpu")


@dataclass(frozen=True)
class Totals:
    nodes: int = 0
    gpus: int = 0  # physical cards: an AMD card cut into partitions is one
    slices: int = 0
    free: int = 0
    held: int = 0
    memory_mib: int = 0
    held_mib: int = 0
    running: int = 0
    queued: int = 0
    down: int = 0  # cards out of use: lost + failed + drained (each in its worst state)
    lost: int = 0  # on a node declared lost
    failed: int = 0  # failed a health check or a re-cut
    drained: int = 0  # taken out by a person (maintenance)

    def down_text(self) -> str:
        """ "2 failed, 8 drained": what is out of use and why ("" when nothing is)."""
        parts = [(self.lost, "lost"), (self.failed, "failed"), (self.drained, "drained")]
        return ", ".join(f"{count} {word}" for count, word in parts if count)


@dataclass(frozen=True)
class Frame:
    now: str
    seq: int
    sites: tuple[tuple[str, tuple[NodeRow, ...]], ...]
    jobs: tuple[JobRow, ...]
    queue: tuple[QueueRow, ...]
    events: tuple[Event, ...]
    utilization: tuple[float | None, ...]  # per minute of the last hour, the last one now
    totals: Totals
    filter: str = ""
    hidden_nodes: int = 0  # nodes the filter left out
    facts_age_s: float | None = None  # how old the nodes' facts are; None: not asked
    warnings: tuple[str, ...] = ()

    def nodes(self) -> list[NodeRow]:
        return [node for _, nodes in self.sites for node in nodes]

    def gpu(self, key: str) -> GpuCell | None:
        for node in self.nodes():
            for gpu in node.gpus:
                if gpu.key == key:
                    return gpu
        return None


@dataclass(frozen=True)
class Filter:
    """What `/` narrows the view to: words, all of which must hold. `host=sg-*`,
    `owner=ann`, `team=search`; a bare word (a glob) matches a host, an owner or a team."""

    text: str = ""
    terms: tuple[tuple[str | None, str], ...] = field(default=())

    @classmethod
    def parse(cls, text: str) -> Filter:
        terms: list[tuple[str | None, str]] = []
        for word in text.split():
            key, sep, pattern = word.partition("=")
            if sep and key in FILTER_KEYS and pattern:
                terms.append((key, pattern))
            elif sep:
                raise ValueError(
                    f"filter {word!r}: expected host=, owner= or team= followed by a pattern"
                )
            else:
                terms.append((None, word))
        return cls(text.strip(), tuple(terms))

    def __bool__(self) -> bool:
        return bool(self.terms)

    def admits(self, hosts: Iterable[str], owners: Iterable[str], teams: Iterable[str]) -> bool:
        values = {"host": list(hosts), "owner": list(owners), "team": list(teams)}
        for key, pattern in self.terms:
            pools = [values[key]] if key else list(values.values())
            if not any(fnmatch.fnmatchcase(v, pattern) for pool in pools for v in pool):
                return False
        return True


@dataclass
class Touched:
    """What changed in the ledger since the last frame, as the follower heard it: the hosts
    whose slices, holds, drains or health moved; `everything` after a reload or a record
    whose reach is not known."""

    hosts: set[str] = field(default_factory=set)
    everything: bool = False
    slices: bool = False  # a `slices` record: hosts or cards may have come or gone


# GPU states that take a GPU out of use, counted apart in Totals (their sum is `down`).
_OUT_OF_USE = ("lost", "failed", "drained")


@dataclass
class _CachedNode:
    row: NodeRow
    facts: Any  # the facts object the row was drawn with (identity: new facts, new row)
    until: str | None  # the earliest expiry of a hold on it: the row is stale from then
    owners: frozenset[str]
    teams: frozenset[str]
    counts: tuple[int, ...]  # its share of Totals, in _COUNTED order


_COUNTED = ("gpus", "slices", "free", "held", "memory_mib", "held_mib", *_OUT_OF_USE)


class FrameBuilder:
    """Frames for a live view: a node's row is kept from one frame to the next unless the
    ledger touched that host, its facts changed or one of its holds expired, so a frame of
    a large pool costs what changed, not the pool. `touched=None` draws everything anew
    (what build_frame does)."""

    def __init__(self) -> None:
        self._state: State | None = None
        self._by_host: dict[str, list[dict[str, Any]]] = {}
        self._order: list[str] = []
        self._nodes: dict[str, _CachedNode] = {}
        self._jobs: dict[str, tuple[int, JobRow]] = {}

    def frame(
        self,
        state: State,
        now: str,
        *,
        touched: Touched | None = None,
        waiting: Mapping[str, str] | None = None,
        events: Sequence[Event] = (),
        utilization: Sequence[float | None] = (),
        facts: Mapping[str, Mapping[str, Any]] | None = None,
        facts_age_s: float | None = None,
        filter: Filter | None = None,
        warnings: Sequence[str] = (),
        queue_head: int = 50,
        event_count: int = 50,
    ) -> Frame:
        """The frame for `state` at `now`. `facts`: host -> that host's facts (from
        `facts`), for memory in use, utilization and temperature; without it those stay
        None."""
        chosen = filter or Filter()
        facts = facts or {}
        dirty = self._dirty(state, touched)
        holders: _Holders | None = None
        sites: dict[str, list[NodeRow]] = {}
        hidden = 0
        sums = [0] * len(_COUNTED)
        for host in self._order:
            cached = self._nodes.get(host)
            host_facts = facts.get(host)
            if (
                cached is None
                or host in dirty
                or cached.facts is not host_facts
                or (cached.until is not None and now >= cached.until)
            ):
                holders = holders or _Holders.of(state)
                row = _node_row(state, now, host, self._by_host[host], holders, host_facts)
                cached = _cache(state, row, self._by_host[host], host_facts)
                self._nodes[host] = cached
            if not chosen.admits([host], cached.owners, cached.teams):
                hidden += 1
                continue
            sums = [a + b for a, b in zip(sums, cached.counts, strict=True)]
            sites.setdefault(cached.row.site, []).append(cached.row)
        jobs = tuple(
            job
            for job in self._job_rows(state, now)
            if chosen.admits(job.hosts, [job.owner], [job.team] if job.team else [])
        )
        queue = tuple(
            row
            for row in _queue_rows(state, now, waiting or {})
            if chosen.admits([], [row.owner], [row.team] if row.team else [])
        )
        shown_events = [
            e
            for e in events
            if chosen.admits([e.host] if e.host else [], [e.owner] if e.owner else [], [])
        ]
        counted = dict(zip(_COUNTED, sums, strict=True))
        nodes = sum(len(v) for v in sites.values())
        return Frame(
            now=now,
            seq=state.seq,
            sites=tuple((site, tuple(rows)) for site, rows in sorted(sites.items())),
            jobs=jobs,
            queue=queue[:queue_head],
            events=tuple(shown_events[-event_count:]),
            utilization=tuple(utilization),
            totals=Totals(
                nodes=nodes,
                running=len(jobs),
                queued=len(queue),
                down=sum(counted[name] for name in _OUT_OF_USE),
                **counted,
            ),
            filter=chosen.text,
            hidden_nodes=hidden,
            facts_age_s=facts_age_s,
            warnings=tuple(warnings),
        )

    def _dirty(self, state: State, touched: Touched | None) -> set[str]:
        """The hosts to draw again; everything is forgotten on a new state or an unknown
        change."""
        if touched is None or touched.everything or state is not self._state:
            self._state = state
            self._nodes.clear()
            self._jobs.clear()
            self._index(state)
            return set()  # nothing is cached: every row is drawn anyway
        if touched.slices:
            self._index(state)
            for gone in set(self._nodes) - set(self._by_host):
                del self._nodes[gone]
        return touched.hosts

    def _index(self, state: State) -> None:
        self._by_host = _slices_by_host(state)
        self._order = sorted(self._by_host, key=_natural)

    def _job_rows(self, state: State, now: str) -> list[JobRow]:
        """As _job_rows, keeping each job's row while its record is the same object (the
        state replaces a job's dict on every change) and only its age moves."""
        rows = []
        kept: dict[str, tuple[int, JobRow]] = {}
        for job in state.jobs.values():
            if job.get("state") == "queued":
                continue  # shown in the queue
            job_id = str(job["id"])
            old = self._jobs.get(job_id)
            row = old[1] if old is not None and old[0] == id(job) else _job_row(job)
            row.age_s = _age(job.get("created"), now)
            kept[job_id] = (id(job), row)
            rows.append(row)
        self._jobs = kept
        return sorted(rows, key=lambda r: _natural(r.id))


def build_frame(state: State, now: str, **inputs: Any) -> Frame:
    """One frame drawn from nothing (see FrameBuilder.frame for the inputs)."""
    return FrameBuilder().frame(state, now, **inputs)


def _cache(state: State, row: NodeRow, entries: list[dict[str, Any]], facts: Any) -> _CachedNode:
    until = None
    for entry in entries:
        alloc = state.allocations.get(state.holders.get(str(entry["id"])) or "")
        if alloc is not None and alloc.expires and (until is None or alloc.expires < until):
            until = alloc.expires
    cells = [s for g in row.gpus for s in g.slices]
    # Per physical card, the worst state of its GPUs (an AMD card's partitions are one card).
    cards: dict[str, str] = {}
    for gpu in row.gpus:
        card = gpu.card or gpu.key
        if card not in cards or GPU_STATES.index(gpu.state) < GPU_STATES.index(cards[card]):
            cards[card] = gpu.state
    counts = (
        len(cards),
        len(cells),
        sum(s.state == "free" for s in cells),
        sum(s.state == "held" for s in cells),
        sum(g.memory_mib for g in row.gpus),
        sum(g.held_mib for g in row.gpus),
        *(sum(worst == state_name for worst in cards.values()) for state_name in _OUT_OF_USE),
    )
    return _CachedNode(
        row,
        facts,
        until,
        frozenset(s.owner for s in cells if s.owner),
        frozenset(s.team for s in cells if s.team),
        counts,
    )


# -- nodes and GPUs -------------------------------------------------------------------------


def _slices_by_host(state: State) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in state.slices.values():
        out.setdefault(str(entry["host"]), []).append(entry)
    for host in state.lost:
        out.setdefault(host, [])
    return out


@dataclass(frozen=True)
class _Holders:
    """Per allocation id: its team, and the pending or running job it is the placement of
    (State.job_holding's answer for every allocation at once: one pass, not one per slice);
    and what keeps a slice out of placement (sched.unavailable, asked per slice drawn)."""

    teams: dict[str, str]
    jobs: dict[str, str]
    blocks: Finder

    @classmethod
    def of(cls, state: State) -> _Holders:
        teams = {k: str(a.request["team"]) for k, a in state.allocations.items()
                 if a.request.get("team")}  # fmt: skip
        jobs = {
            str(job["alloc"]): str(job["id"])
            for job in state.jobs.values()
            if job.get("alloc") and job.get("state") in JOB_HOLDING
        }
        return cls(teams, jobs, Finder(state))


def _node_row(
    state: State,
    now: str,
    host: str,
    entries: list[dict[str, Any]],
    holders: _Holders,
    facts: Mapping[str, Any] | None,
) -> NodeRow:
    site = next((str(e["site"]) for e in entries if e.get("site")), "") or "-"
    node_state, reason = "ok", None
    drain = state.drain_of(host)
    # Since its last answer when the ledger knows it, else since the first poll that failed.
    last = state.answered.get(host)
    if host in state.lost:
        since = last or f"{state.lost[host].get('since')} or earlier"
        node_state, reason = "lost", f"lost: no answer since {since}"
    elif host in state.silent:
        since = last or f"{state.silent[host]} or earlier"
        node_state, reason = "silent", f"not answering since {since}"
    elif drain is not None:
        node_state, reason = "drained", drain.get("reason") or f"drained by {drain.get('actor')}"
    cards: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        cards.setdefault(card_key(entry) or str(entry["id"]), []).append(entry)
    gpu_facts = _gpu_facts(facts)
    physical = physical_cards(entries)
    gpus = tuple(
        _gpu_cell(state, now, key, cards[key], holders, node_state, gpu_facts, physical.get(key))
        for key in sorted(cards, key=_natural)
    )
    return NodeRow(host, site, node_state, reason, gpus)


def _gpu_facts(facts: Mapping[str, Any] | None) -> dict[int, Mapping[str, Any]]:
    if not facts:
        return {}
    return {int(g["index"]): g for g in facts.get("gpus") or [] if g.get("index") is not None}


def _gpu_cell(
    state: State,
    now: str,
    key: str,
    entries: list[dict[str, Any]],
    holders: _Holders,
    node_state: str,
    gpu_facts: Mapping[int, Mapping[str, Any]],
    card: str | None = None,
) -> GpuCell:
    entries = sorted(entries, key=lambda e: _natural(str(e["id"])))
    first = entries[0] if entries else {}
    index = first.get("gpu")
    slices = tuple(_slice_cell(state, now, e, holders) for e in entries)
    facts = gpu_facts.get(int(index)) if index is not None else None
    # The ledger's, facts or not: the pool's memory must not change with how it was read.
    memory = card_memory_mib(entries)
    held = sum(s.memory_mib for s in slices if s.state == "held")
    drain = state.drain_of(key)
    states = {s.state for s in slices}
    found = [b for b in (holders.blocks.of(str(e["id"]), e) for e in entries) if b is not None]
    worst = min(found, key=lambda b: KINDS.index(b.kind)) if found else None
    reason = None
    if node_state == "lost":
        gpu_state = "lost"
    elif worst is not None and worst.kind == "card-lost":
        gpu_state, reason = "lost", worst.why
    elif drain is not None and drain.get("source") == "health":
        gpu_state, reason = "failed", drain.get("reason") or "failed its health check"
    elif drain is not None:
        gpu_state, reason = "drained", drain.get("reason") or f"drained by {drain.get('actor')}"
    elif worst is not None and worst.state == "blocked":
        gpu_state, reason = "blocked", worst.why
    elif "re-cutting" in states:
        gpu_state = "re-cutting"
    elif key in state.card_failed and not states & {"held"}:
        gpu_state, reason = "failed", f"its last re-cut failed at {state.card_failed[key]}"
    elif slices and all(s.state == "held" for s in slices):
        gpu_state = "busy"
    elif "held" in states:
        gpu_state = "partly held"
    elif node_state == "drained":
        gpu_state = "drained"
    else:
        gpu_state = "free"
    health = (facts or {}).get("health") or {}
    return GpuCell(
        key=key,
        index=int(index) if index is not None else None,
        model=str(first.get("model") or (facts or {}).get("model") or "?"),
        memory_mib=memory,
        held_mib=held,
        state=gpu_state,
        reason=reason,
        slices=slices,
        used_mib=_number(facts, "memory_used_mib"),
        utilization_pct=_number(facts, "utilization_pct"),
        temperature_c=_number(health, "temperature_c"),
        card=card,
    )


def _slice_cell(state: State, now: str, entry: dict[str, Any], holders: _Holders) -> SliceCell:
    slice_id = str(entry["id"])
    holder = state.holder(slice_id, now) if slice_id in state.holders else None
    label = str(
        entry.get("profile") or ("whole" if entry.get("kind") == "gpu" else entry.get("kind"))
    )
    if holder is None:
        block = holders.blocks.of(slice_id, entry)
        shown = block.state if block is not None else "free"
        return SliceCell(slice_id, label, int(entry.get("memory_mib") or 0), shown)
    return SliceCell(
        slice_id,
        label,
        int(entry.get("memory_mib") or 0),
        "held",
        holder.owner,
        holders.jobs.get(holder.id, holder.id),
        holders.teams.get(holder.id),
    )


def _number(source: Mapping[str, Any] | None, key: str) -> Any:
    value = (source or {}).get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


# -- jobs and queue -------------------------------------------------------------------------


def _job_row(job: dict[str, Any]) -> JobRow:
    nodes = job.get("nodes") or []
    placement = job.get("placement") or {}
    slices = [s for n in nodes for s in n.get("slices", [])] or list(placement.get("slices") or [])
    hosts = [str(n["host"]) for n in nodes] or [str(h) for h in placement.get("hosts") or []]
    return JobRow(
        id=str(job["id"]),
        owner=str(job.get("owner") or "?"),
        team=_team(job.get("request")),
        state=str(job.get("state")),
        name=job.get("name"),
        hosts=tuple(hosts),
        slices=tuple(str(s) for s in slices),
        age_s=None,
    )


def _queue_rows(state: State, now: str, waiting: Mapping[str, str]) -> list[QueueRow]:
    rows = []
    for entry in state.queue_order():
        job_id = str(entry.get("job") or entry["id"])
        request = entry.get("request") or {}
        rows.append(
            QueueRow(
                id=job_id,
                owner=str(entry.get("owner") or "?"),
                team=_team(request),
                priority=int(entry.get("priority") or 0),
                waited_s=_age(entry.get("ts"), now),
                reason=waiting.get(job_id),
                want=want_text(request),
            )
        )
    return rows


def want_text(request: Mapping[str, Any]) -> str:
    """A request in a few words: "2 x 10.0 GiB", "8 x gpu", "1 x 1g.10gb"."""
    gpus = int(request.get("gpus") or 1)
    if request.get("profile"):
        return f"{gpus} x {request['profile']}"
    if request.get("memory_mib"):
        return f"{gpus} x {int(request['memory_mib']) * 10 // 1024 / 10} GiB"
    return f"{gpus} x any"


def _team(request: Any) -> str | None:
    team = (request or {}).get("team") if isinstance(request, Mapping) else None
    return str(team) if team else None


def _age(ts: Any, now: str) -> float | None:
    if not ts:
        return None
    try:
        return max(0.0, (_moment(now) - _moment(str(ts))).total_seconds())
    except (UsageError, ValueError):  # an odd time from a foreign writer: no age, no crash
        return None


@lru_cache(maxsize=8192)
def _moment(ts: str) -> datetime:
    # The ledger's own times are fixed-width UTC ISO-8601: parsed once each, a frame asks
    # the same ones again.
    return parse_ts(ts)


@lru_cache(maxsize=65536)
def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(text))
