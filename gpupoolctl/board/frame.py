"""One frame of the pool at a glance, as plain values: per site and node each GPU with its
slices (free, held and by whom, being re-cut, drained, failed), the running jobs, the queue
head with each entry's reason for waiting, recent events and utilization over the last hour.

`build_frame` is pure: the caller brings the ledger's state (board.follow), why queued jobs
wait (the scheduler's own dry pass, gpupoolctl.jobs.control.waiting_reasons) and, when it
asked the nodes, their facts. Every view (`top`, `top --once`, `pool --html`) draws this.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.board.events import Event
from gpupoolctl.errors import UsageError
from gpupoolctl.ledger.state import State, card_key, seconds_between

# GPU states, worst first: the one a card is drawn in.
GPU_STATES = ("lost", "failed", "drained", "re-cutting", "busy", "partly held", "free")
FILTER_KEYS = ("host", "owner", "team")
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class SliceCell:
    id: str
    label: str  # what people call it: "1g.10gb", "cpx", "whole"
    memory_mib: int
    state: str  # free | held | re-cutting | drained
    owner: str | None = None
    job: str | None = None  # the job holding it, else the allocation
    team: str | None = None


@dataclass(frozen=True)
class GpuCell:
    key: str  # host/gpuN
    index: int | None
    model: str
    memory_mib: int  # the card's memory (facts), else what its slices offer
    held_mib: int
    state: str  # one of GPU_STATES
    reason: str | None
    slices: tuple[SliceCell, ...]
    used_mib: int | None = None  # from facts: memory in use on the card
    utilization_pct: float | None = None
    temperature_c: float | None = None


@dataclass(frozen=True)
class NodeRow:
    host: str
    site: str
    state: str  # ok | silent | lost | drained
    reason: str | None
    gpus: tuple[GpuCell, ...]


@dataclass(frozen=True)
class JobRow:
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
    gpus: int = 0
    slices: int = 0
    free: int = 0
    held: int = 0
    memory_mib: int = 0
    held_mib: int = 0
    running: int = 0
    queued: int = 0
    down: int = 0  # GPUs lost, failed or drained


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


def build_frame(
    state: State,
    now: str,
    *,
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
    """The frame for `state` at `now`. `facts`: host -> that host's facts (from `facts`),
    for memory in use, utilization and temperature; without it those stay None."""
    chosen = filter or Filter()
    teams_of = _alloc_teams(state)
    by_host = _slices_by_host(state)
    sites: dict[str, list[NodeRow]] = {}
    hidden = 0
    totals = _Counting()
    for host in sorted(by_host, key=_natural):
        node = _node_row(state, now, host, by_host[host], teams_of, (facts or {}).get(host))
        holders = {s.owner for g in node.gpus for s in g.slices if s.owner}
        teams = {s.team for g in node.gpus for s in g.slices if s.team}
        if not chosen.admits([host], holders, teams):
            hidden += 1
            continue
        totals.add(node)
        sites.setdefault(node.site, []).append(node)
    jobs = tuple(
        job
        for job in _job_rows(state, now)
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
    return Frame(
        now=now,
        seq=state.seq,
        sites=tuple((site, tuple(nodes)) for site, nodes in sorted(sites.items())),
        jobs=jobs,
        queue=queue[:queue_head],
        events=tuple(shown_events[-event_count:]),
        utilization=tuple(utilization),
        totals=totals.frozen(running=len(jobs), queued=len(queue)),
        filter=chosen.text,
        hidden_nodes=hidden,
        facts_age_s=facts_age_s,
        warnings=tuple(warnings),
    )


# -- nodes and GPUs -------------------------------------------------------------------------


def _slices_by_host(state: State) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in state.slices.values():
        out.setdefault(str(entry["host"]), []).append(entry)
    for host in state.lost:
        out.setdefault(host, [])
    return out


def _alloc_teams(state: State) -> dict[str, str]:
    return {
        k: str(a.request["team"]) for k, a in state.allocations.items() if a.request.get("team")
    }


def _node_row(
    state: State,
    now: str,
    host: str,
    entries: list[dict[str, Any]],
    teams_of: Mapping[str, str],
    facts: Mapping[str, Any] | None,
) -> NodeRow:
    site = next((str(e["site"]) for e in entries if e.get("site")), "") or "-"
    node_state, reason = "ok", None
    drain = state.drains.get(host)
    if host in state.lost:
        node_state, reason = "lost", f"lost since {state.lost[host].get('since')}"
    elif host in state.silent:
        node_state, reason = "silent", f"not answering since {state.silent[host]}"
    elif drain is not None:
        node_state, reason = "drained", drain.get("reason") or f"drained by {drain.get('actor')}"
    cards: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        cards.setdefault(card_key(entry) or str(entry["id"]), []).append(entry)
    gpu_facts = _gpu_facts(facts)
    gpus = tuple(
        _gpu_cell(state, now, key, cards[key], teams_of, node_state, gpu_facts)
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
    teams_of: Mapping[str, str],
    node_state: str,
    gpu_facts: Mapping[int, Mapping[str, Any]],
) -> GpuCell:
    entries = sorted(entries, key=lambda e: _natural(str(e["id"])))
    first = entries[0] if entries else {}
    index = first.get("gpu")
    slices = tuple(_slice_cell(state, now, e, teams_of) for e in entries)
    facts = gpu_facts.get(int(index)) if index is not None else None
    memory = sum(s.memory_mib for s in slices)
    if facts and facts.get("memory_total_mib"):
        memory = int(facts["memory_total_mib"])
    held = sum(s.memory_mib for s in slices if s.state == "held")
    drain = state.drains.get(key)
    states = {s.state for s in slices}
    reason = None
    if node_state == "lost":
        gpu_state = "lost"
    elif drain is not None and drain.get("source") == "health":
        gpu_state, reason = "failed", drain.get("reason") or "failed its health check"
    elif drain is not None:
        gpu_state, reason = "drained", drain.get("reason") or f"drained by {drain.get('actor')}"
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
    )


def _slice_cell(
    state: State, now: str, entry: dict[str, Any], teams_of: Mapping[str, str]
) -> SliceCell:
    slice_id = str(entry["id"])
    holder = state.holder(slice_id, now) if slice_id in state.holders else None
    label = str(
        entry.get("profile") or ("whole" if entry.get("kind") == "gpu" else entry.get("kind"))
    )
    if holder is None:
        return SliceCell(
            slice_id, label, int(entry.get("memory_mib") or 0), state.slice_state(slice_id, now)
        )
    job = state.job_holding(holder.id)
    return SliceCell(
        slice_id,
        label,
        int(entry.get("memory_mib") or 0),
        "held",
        holder.owner,
        str(job["id"]) if job else holder.id,
        teams_of.get(holder.id),
    )


def _number(source: Mapping[str, Any] | None, key: str) -> Any:
    value = (source or {}).get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


# -- jobs and queue -------------------------------------------------------------------------


def _job_rows(state: State, now: str) -> list[JobRow]:
    rows = []
    for job in state.jobs.values():
        if job.get("state") == "queued":
            continue  # shown in the queue
        nodes = job.get("nodes") or []
        placement = job.get("placement") or {}
        slices = [s for n in nodes for s in n.get("slices", [])] or list(
            placement.get("slices") or []
        )
        hosts = [str(n["host"]) for n in nodes] or [str(h) for h in placement.get("hosts") or []]
        rows.append(
            JobRow(
                id=str(job["id"]),
                owner=str(job.get("owner") or "?"),
                team=_team(job.get("request")),
                state=str(job.get("state")),
                name=job.get("name"),
                hosts=tuple(hosts),
                slices=tuple(str(s) for s in slices),
                age_s=_age(job.get("created"), now),
            )
        )
    return sorted(rows, key=lambda r: _natural(r.id))


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
        return max(0.0, seconds_between(str(ts), now))
    except (UsageError, ValueError):  # an odd time from a foreign writer: no age, no crash
        return None


class _Counting:
    def __init__(self) -> None:
        self.values: dict[str, int] = dict.fromkeys(Totals.__dataclass_fields__, 0)

    def add(self, node: NodeRow) -> None:
        v = self.values
        v["nodes"] += 1
        for gpu in node.gpus:
            v["gpus"] += 1
            v["down"] += gpu.state in ("lost", "failed", "drained")
            v["memory_mib"] += gpu.memory_mib
            v["held_mib"] += gpu.held_mib
            for s in gpu.slices:
                v["slices"] += 1
                v["free"] += s.state == "free"
                v["held"] += s.state == "held"

    def frozen(self, **more: int) -> Totals:
        return Totals(**{**self.values, **more})


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(text))
