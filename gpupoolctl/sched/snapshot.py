"""The snapshot: everything one scheduling pass reads, frozen, built by one function.

`snapshot(state, policy, now)` reads the ledger's state (as sched.recorded reads it: the
ledger's State, or a benchmark's in-memory stand-in) at one instant and returns a Snapshot:
the pool (its slices and who holds what, blocks included), the queue in the scheduler's
terms, the elastic inputs and the teams' share inputs (with their fair-share history), the
drains and the hosts' heartbeats, the clock, and the policy in force at that instant (time
windows applied: the elastic section and each team's quota a window replaces). Production
(`schedule`, `submit`, `jobs`' reasons, dry runs) and the benchmarks build it here and
nowhere else, so a pass cannot see one input through two different eyes.

sched.modes asks the scheduler's three questions of a snapshot (place now, could it ever
run, what would happen), each on a working copy of the pool: the snapshot never changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gpupoolctl.hw.slice import card_key
from gpupoolctl.sched.entry import QueueEntry
from gpupoolctl.sched.pool import Holder, PoolView, Skeleton, of_slice_map, skeleton_of
from gpupoolctl.timestamps import format_ts, parse_ts

if TYPE_CHECKING:
    from gpupoolctl.policy.model import PoolPolicy
    from gpupoolctl.sched.cards import AnyCard
    from gpupoolctl.sched.elastic import ElasticInputs, InHosts
    from gpupoolctl.sched.recorded import RecordedState
    from gpupoolctl.sched.shares import ShareInputs

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Snapshot:
    """What a pass reads, at one instant. Frozen: `pool()` hands out a working copy of the
    pool view for a pass to hold its placements on."""

    now: datetime
    queue: tuple[QueueEntry, ...]
    slices: Mapping[str, Mapping[str, Any]]  # slice id -> slice (the pass's hosts only)
    holders: tuple[Holder, ...]  # every hold and block on those slices
    elastic: ElasticInputs | None = None  # None: no elastic section in force
    shares: ShareInputs | None = None  # None: the policy has no teams
    windows: tuple[str, ...] = ()  # the policy's windows in force at `now`
    drains: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=lambda: _EMPTY)
    # Hosts' heartbeats: host -> since when silent / lost record / last answer (ledger time)
    silent: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    lost: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: _EMPTY)
    answered: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    stale: tuple[str, ...] = ()  # queue record ids whose job is no longer queued
    _skeleton: Skeleton | None = field(default=None, compare=False, repr=False)
    # The view the builder made, handed out by the first pool() call (no one else has it).
    _first: list[PoolView] = field(default_factory=list, compare=False, repr=False)

    def pool(self) -> PoolView:
        """A fresh working view of the pool as it is in the snapshot."""
        if self._first:
            return self._first.pop()
        skeleton = self._skeleton if self._skeleton is not None else Skeleton(self.slices.values())
        return PoolView(skeleton, self.holders)

    def with_queue(self, entries: Sequence[QueueEntry]) -> Snapshot:
        """The same instant with another queue (a what-if entry added, a trimmed queue)."""
        return replace(self, queue=tuple(entries), _first=[])


def snapshot(
    state: RecordedState,
    policy: PoolPolicy | None,
    now: datetime | str,
    *,
    hosts: set[str] | None = None,
    in_hosts: InHosts | None = None,
    queue: Sequence[QueueEntry] | None = None,
    entries_memo: EntriesMemo | None = None,
) -> Snapshot:
    """The snapshot of `state` at `now` under `policy` (None: a static pool, no teams).

    `hosts`: the pass places only there (-l): the pool and the elastic cards are those
    hosts', what teams hold elsewhere still counts against their quotas. `in_hosts`
    resolves a policy rule's host pattern (the inventory's; default: a glob). `queue`: the
    entries in the scheduler's terms when the caller keeps them so already (a benchmark);
    by default the state's queue records whose job is queued (`entries_memo`: a long-running
    caller's, see queued)."""
    moment = parse_ts(now) if isinstance(now, str) else now
    stamp = now if isinstance(now, str) else format_ts(now)
    seen: RecordedState = state if hosts is None else _OnHosts(state, hosts)
    view = PoolView.from_state(seen, stamp)
    stale: tuple[str, ...] = ()
    if queue is None:
        entries, stale = queued(state, entries_memo)
    else:
        entries = list(queue)
    windows: tuple[str, ...] = ()
    if policy is not None:
        windows = tuple(w.name for w in policy.active_windows(moment))
    return Snapshot(
        now=moment,
        queue=tuple(entries),
        slices=MappingProxyType(seen.slices),
        holders=tuple(view.holds.values()),
        elastic=_elastic_inputs(seen, policy, moment, stamp, in_hosts),
        shares=share_inputs(state, policy, stamp, hosts),
        windows=windows,
        drains=MappingProxyType(dict(state.drains)),
        silent=MappingProxyType(dict(state.silent)),
        lost=MappingProxyType(dict(state.lost)),
        answered=MappingProxyType(dict(state.answered)),
        stale=stale,
        _skeleton=skeleton_of(seen.slices),
        _first=[view],
    )


# Queue record id -> (the record, its job's policy, the entry made of them).
EntriesMemo = dict[str, tuple[Mapping[str, Any], str, QueueEntry]]


def queued(
    state: RecordedState, memo: EntriesMemo | None = None
) -> tuple[list[QueueEntry], tuple[str, ...]]:
    """The queue as the scheduler takes it (each entry with its job's placement policy),
    and the ids of queue records whose job is no longer queued (to be dequeued).

    `memo`: kept by a caller that builds a snapshot per tick (a loop), it keeps the entry
    made of a record as long as the state holds that same record (a record is replaced,
    never edited), and drops what left the queue. With thousands queued, making every
    entry anew was a third of a tick (bench/utilization through production's executor)."""
    entries: list[QueueEntry] = []
    stale: list[str] = []
    kept: EntriesMemo = {}
    for record in state.queue.values():
        job = state.jobs.get(str(record.get("job"))) if record.get("job") else None
        if job is None or job.get("state") != "queued":
            stale.append(str(record["id"]))
            continue
        policy = str(job.get("policy") or "best-fit")
        known = memo.get(str(record["id"])) if memo is not None else None
        if known is not None and known[0] is record and known[1] == policy:
            entry = known[2]
        else:
            entry = QueueEntry.from_record(record, policy)
        kept[entry.id] = (record, policy, entry)
        entries.append(entry)
    if memo is not None:
        memo.clear()
        memo.update(kept)
    return entries, tuple(stale)


def _elastic_inputs(
    state: RecordedState,
    policy: PoolPolicy | None,
    moment: datetime,
    stamp: str,
    in_hosts: InHosts | None,
) -> ElasticInputs | None:
    """What elastic decisions need, or None when no elastic section is in force at `moment`
    (a time window may replace the section: at night keep cards whole)."""
    if policy is None:
        return None
    elastic = policy.elastic_in_force(moment)
    if not elastic.enabled:
        return None
    from gpupoolctl.sched.elastic import ElasticInputs, glob_hosts

    blocked = {str(r["gpu"]): f"being re-cut ({r['id']})" for r in state.reshapes.values()}
    for card, ts in state.card_failed.items():
        if (moment - parse_ts(ts)).total_seconds() < elastic.backoff_s:
            blocked.setdefault(card, f"its re-cut failed at {ts}")
    changed = {card: parse_ts(ts) for card, ts in state.card_changed.items()}
    # A hold that expired is free now but has no release record yet: its card has been
    # idle since it expired, not since the hold began.
    for alloc in state.allocations.values():
        if alloc.expires is not None and alloc.expires <= stamp:
            ended = parse_ts(alloc.expires)
            for slice_id in alloc.slices:
                card = card_key(state.slices.get(slice_id) or {})
                if card is not None and (card not in changed or changed[card] < ended):
                    changed[card] = ended
    return ElasticInputs(
        policy=elastic,
        cards=_cards(state.slices),
        in_hosts=in_hosts or glob_hosts,
        changed=changed,
        blocked=blocked,
    )


def share_inputs(
    state: RecordedState, policy: PoolPolicy | None, now: str, hosts: set[str] | None = None
) -> ShareInputs | None:
    """The teams' quotas in force at `now` (windows applied) and their fair-share usage
    (GiB-seconds: holds that ended, decayed, plus what each team holds now for as long as
    it has); None when the policy has no teams (nothing is limited, the queue keeps its
    plain order). `hosts`: the pass places only there (-l); what teams hold elsewhere
    still counts."""
    if policy is None or not policy.teams.enabled:
        return None
    from gpupoolctl.sched.shares import ShareInputs

    moment = parse_ts(now)
    quotas = {team.name: policy.quota_in_force(team, moment) for team in policy.teams.teams}
    history = state.team_history(now)
    active = state.active(now)
    for alloc in active.values():
        team = alloc.request.get("team")
        if not team:
            continue
        memory = sum(int((state.slices.get(s) or {}).get("memory_mib") or 0) for s in alloc.slices)
        held_s = max(0.0, (moment - parse_ts(alloc.created)).total_seconds())
        history[str(team)] = history.get(str(team), 0.0) + memory / 1024 * held_s
    elsewhere = []
    if hosts is not None:
        for alloc in active.values():
            team = alloc.request.get("team")
            for slice_id in alloc.slices if team else ():
                entry = state.slices.get(slice_id)
                if entry is not None and entry.get("host") not in hosts:
                    elsewhere.append((str(team), entry))
    return ShareInputs(quotas=quotas, history=history, elsewhere=elsewhere)


# The elastic cards of a slice map, by the map's identity (as sched.pool keeps skeletons).
_CARDS: list[tuple[Mapping[str, Any], int, dict[str, AnyCard]]] = []


def _cards(slices: Mapping[str, Any]) -> Mapping[str, AnyCard]:
    from gpupoolctl.sched.cards import cards_of

    return of_slice_map(_CARDS, slices, lambda: cards_of(slices.values()))


class _OnHosts:
    """The state with only `hosts`' slices (a pass limited by -l): holds and blocks
    elsewhere do not matter to its placement."""

    def __init__(self, state: RecordedState, hosts: set[str]) -> None:
        self._state = state
        self.slices = {k: v for k, v in state.slices.items() if v.get("host") in hosts}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)
