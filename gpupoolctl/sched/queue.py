"""The queue's order: priority first, first come first served within a priority, and aging.

Aging rule: an entry's effective priority is its priority plus 1 for every AGING_INTERVAL
(2 minutes) it has waited, capped at AGING_CAP (100, the highest priority there is). Ties go
to the earlier arrival (ledger seq). So an entry of priority p that has waited
(100 - p) x 2 minutes (a `low` job: 3 hours; `normal`: 100 minutes) is ahead of every entry
that arrived after it, whatever their priority: no stream of later work can starve it.

schedule_pass() is one pass over the queue on a pool view: each entry in order is placed if
it fits, and later entries may backfill around one that does not. Backfill could still
starve a big job (small ones keep taking what it needs as it frees up), so once an entry
that has aged to the cap does not fit, every free slice that could serve it is reserved for
the rest of the pass: later entries may only use slices it could never use, and no re-cut
for other work takes a card that holds one of them.

An entry with a `not_before` later than `now` (a restart waiting out its back-off,
jobs.restarts) is left waiting: it is not placed, preempts nothing, reserves nothing and no
re-cut is made for it, until a pass at or after that time.

The same pass is the whole decision of the scheduling loop, in production and in the
benchmarks alike (one scheduler): it may also choose victims to preempt for an entry that
does not fit (`preempt`), and, with an elastic policy, hide from small work the whole cards
that elastic may cut for it and choose the re-cuts that let waiting work fit
(sched.elastic); with teams too, clear cut cards for a team's whole-card work by reclaim
(sched.clearing). The caller executes what it returns: records, launches, stops, re-cuts.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from gpupoolctl.sched import shares as share_rules
from gpupoolctl.sched.entry import QueueEntry
from gpupoolctl.sched.explain import recut_wait
from gpupoolctl.sched.place import NoFit, Placement, place
from gpupoolctl.sched.pool import Holder, PoolView
from gpupoolctl.sched.preempt import choose_preemption
from gpupoolctl.sched.request import PRIORITY_MAX, JobRequest

if TYPE_CHECKING:
    from gpupoolctl.sched.cards import AnyCard
    from gpupoolctl.sched.clearing import ClearingPlan
    from gpupoolctl.sched.elastic import ElasticInputs, Recut, Upcoming
    from gpupoolctl.sched.recorded import RecordedState
    from gpupoolctl.sched.shares import ShareInputs

AGING_INTERVAL = timedelta(minutes=2)
AGING_CAP = PRIORITY_MAX


def queue_entries(state: RecordedState) -> list[QueueEntry]:
    return [QueueEntry.from_record(r) for r in state.queue.values()]


def effective_priority(
    entry: QueueEntry,
    now: datetime,
    *,
    interval: timedelta = AGING_INTERVAL,
    cap: int = AGING_CAP,
) -> int:
    waited = max(now - entry.enqueued, timedelta(0))
    aged = entry.priority + int(waited / interval)
    return max(entry.priority, min(cap, aged))


def order_queue(
    entries: Sequence[QueueEntry],
    now: datetime,
    *,
    interval: timedelta = AGING_INTERVAL,
    cap: int = AGING_CAP,
) -> list[QueueEntry]:
    """Effective priority descending, then arrival (seq), then id: a total, stable order."""
    return sorted(
        entries,
        key=lambda e: (-effective_priority(e, now, interval=interval, cap=cap), e.seq, e.id),
    )


@dataclass
class PassResult:
    placed: list[tuple[QueueEntry, Placement]] = field(default_factory=list)
    waiting: list[tuple[QueueEntry, NoFit]] = field(default_factory=list)
    never: list[tuple[QueueEntry, NoFit]] = field(default_factory=list)  # refuse these
    reserved_for: list[str] = field(default_factory=list)  # starving entries, slices kept
    # With teams and elastic: card key -> the entry id whose merge it is kept for
    # (sched.clearing): work that would borrow got none of its free slices in this pass.
    kept_for: dict[str, str] = field(default_factory=dict)
    # Victims chosen for the first entry that preemption can help (the pass stops there:
    # what follows is decided again once they are gone).
    preempt: tuple[QueueEntry, list[str]] | None = None
    recuts: list[Recut] = field(default_factory=list)  # elastic re-cuts to make
    # With teams: the preemption is a reclaim (victims are requeued, whatever they asked)
    reclaim: bool = False
    borrowed: set[str] = field(default_factory=set)  # entries placed above their nominal
    # With `foresee`: entry id -> the re-cut a later pass makes for it, and when
    upcoming: dict[str, Upcoming] = field(default_factory=dict)

    def recut_for(self, entry: QueueEntry) -> Recut | None:
        """The re-cut this pass makes for the entry, if any."""
        job = entry.job or entry.id
        return next((r for r in self.recuts if job in r.jobs), None)

    def waiting_reason(self, entry: QueueEntry, nofit: NoFit) -> str:
        """Why a waiting entry waits: the re-cut made for it (now, or when a later pass
        may make it: sched.explain.recut_wait), else why nothing fits."""
        recut = self.recut_for(entry)
        if recut is not None:
            return recut_wait(recut.describe())
        coming = self.upcoming.get(entry.id)
        return coming.reason() if coming is not None else nofit.reason


def schedule_pass(
    entries: Sequence[QueueEntry],
    pool: PoolView,
    now: datetime,
    policy: str = "best-fit",
    *,
    interval: timedelta = AGING_INTERVAL,
    cap: int = AGING_CAP,
    preempt: bool = False,
    no_preempt: frozenset[str] = frozenset(),
    elastic: ElasticInputs | None = None,
    shares: ShareInputs | None = None,
    foresee: bool = False,
) -> PassResult:
    """Place what fits, in queue order. Each placement is held on `pool` (as a Holder named
    after the entry id) so later entries see it: pass a view you do not need afterwards.

    `preempt`: an entry that does not fit may name victims (not for entry ids in
    `no_preempt`: their earlier victims are still stopping). `elastic`: re-cut idle cards.
    `shares`: teams' quotas (limits, borrowing, reclaim) and fair-share order (sched.shares).
    `foresee` (with `elastic`): also the re-cut a later pass makes for work this one leaves
    waiting, and when (`upcoming`: what its reason tells; sched.elastic.foresee_recuts).
    """
    result = PassResult()
    # The pass only ever takes slices, so a request that did not fit cannot fit later in the
    # same pass: identical requests (priority aside) reuse the answer.
    failed: dict[tuple[Any, ...], NoFit] = {}  # (request shape, policy, team) -> answer
    reserved: list[str] = []
    mine: set[str] = set()  # holds placed by this pass: never preemption victims
    backing_off: set[str] = set()  # restarts whose back-off has not passed: not re-cut for
    elastic_on = elastic is not None and elastic.policy.enabled
    usage = share_rules.Usage.of_pool(pool, shares) if shares is not None else None
    at_limit: set[str] = set()  # waiting for their team's quota: no re-cut for them
    unclearable: set[tuple[Any, ...]] = set()  # request keys no clearing plan can serve
    planned: dict[str, list[dict[str, Any]]] = {}  # team -> what its clearing plans will hold
    starving: dict[str, str] = {}  # GPU key -> the starving entry an aging reservation kept it for
    # With teams, work that would borrow goes after all work within its team's nominal
    # (Kueue's order): else a borrower of higher priority takes what a reclaim freed for a
    # guaranteed job, and the next pass reclaims it again. Borrowers wait for a second round.
    deferred: list[QueueEntry] = []
    borrowing: set[tuple[Any, ...]] = set()  # request keys whose placement borrowed

    def in_two_rounds() -> Iterator[tuple[QueueEntry, bool]]:
        for first in _in_order(entries, now, interval, cap, usage):
            yield first, False
        # Cards kept for the merge of work within its nominal (sched.clearing) are not
        # lent: work that would borrow does not get their free slices.
        for card_key in result.kept_for:
            for sid in elastic.cards[card_key].slices if elastic is not None else ():
                if pool.is_free(sid):
                    pool.take(sid)
                    reserved.append(sid)
        for later in deferred:  # read once the first round is over
            yield later, True

    try:
        for entry, second_round in in_two_rounds():
            if entry.not_before is not None and entry.not_before > now:
                # A restart waiting out its back-off: not placed, no victims, no slices
                # reserved, no re-cut made for it; it only waits.
                left = math.ceil((entry.not_before - now).total_seconds())
                result.waiting.append((entry, NoFit(backoff_reason(left), never=False)))
                backing_off.add(entry.id)
                continue
            how = entry.policy or policy
            team = entry.request.team if usage is not None else None
            key = (entry.request.shape_key(), how, team)
            if not second_round and key in borrowing:
                deferred.append(entry)
                continue
            outcome = failed.get(key)
            if outcome is None:
                if usage is not None and team is not None:
                    outcome = share_rules.place_for_team(
                        team,
                        entry.request,
                        pool,
                        usage,
                        partial(_place, entry.request, pool, how, elastic, now),
                        partial(_recut_reach, entry.request, elastic, pool) if elastic_on else None,
                    )
                else:
                    outcome = _place(entry.request, pool, how, elastic, now)
            if isinstance(outcome, Placement):
                borrowed = False
                if usage is not None and team is not None:
                    taken = [pool.slices[s] for s in outcome.slices]
                    borrowed = share_rules.borrows(team, taken, usage)
                    if borrowed and not second_round:
                        borrowing.add(key)
                        deferred.append(entry)
                        continue
                    usage.change(team, taken, +1)
                    if borrowed:
                        result.borrowed.add(entry.id)
                pool.hold(
                    outcome.slices,
                    Holder(
                        alloc=entry.id,
                        owner=entry.owner,
                        slices=tuple(outcome.slices),
                        job=entry.job,
                        priority=entry.request.priority,
                        preemptible=entry.request.preemptible,
                        team=team,
                        borrowed=borrowed,
                    ),
                )
                mine.add(entry.id)
                result.placed.append((entry, outcome))
                continue
            failed[key] = outcome
            if second_round:  # it fitted by borrowing; what is left no longer holds it
                result.waiting.append((entry, outcome))
                continue
            if outcome.never:
                result.never.append((entry, outcome))
                continue
            if isinstance(outcome, share_rules.QuotaWait):
                at_limit.add(entry.id)
                result.waiting.append((entry, outcome))
                continue
            clearing = None
            if elastic_on and team is not None and usage is not None and key not in unclearable:
                assert elastic is not None
                clearing = _clearing(
                    team,
                    entry.request,
                    pool,
                    usage,
                    elastic,
                    frozenset(mine),
                    result.kept_for,
                    planned.get(team, []),
                )
                if clearing is None:
                    unclearable.add(key)  # the pool only gets fuller in this pass
            if preempt and entry.id not in no_preempt:
                if team is not None and usage is not None and usage.inputs.reclaim:
                    victims = share_rules.choose_reclaim(
                        team, entry.request, pool, usage, now, how, spare=mine
                    )
                    if not victims and clearing is not None:
                        victims = list(clearing.victims)
                    if victims:
                        result.preempt, result.reclaim = (entry, victims), True
                        break
                candidates = None
                if usage is not None:  # with teams, priority preemption stays in the team
                    from gpupoolctl.sched.preempt import eligible

                    candidates = [
                        h
                        for h in pool.holds.values()
                        if h.team == team and eligible(h, entry.request, now)
                    ]
                victims = choose_preemption(
                    entry.request, pool, now, how, spare=mine, candidates=candidates
                )
                if victims:
                    result.preempt = (entry, victims)
                    break
            if clearing is not None and usage is not None and team is not None:
                # Kept for its merge: work that would borrow gets none of the cards' free
                # slices in this pass (work within its nominal still may), no re-cut for
                # such work takes them, and no other plan of the pass counts on them or on
                # the room in its team's nominal that it will take.
                for card_key in (*(c.key for c in clearing.cards), *clearing.ready):
                    result.kept_for[card_key] = entry.id
                planned.setdefault(team, []).extend(clearing.entries)
                outcome = NoFit(f"{outcome.reason}; {clearing.describe()}", never=False)
            result.waiting.append((entry, outcome))
            if effective_priority(entry, now, interval=interval, cap=cap) >= cap:
                for slot in list(pool.free_candidates(entry.request)):
                    pool.take(slot.id)
                    reserved.append(slot.id)
                    starving.setdefault(slot.gpu, entry.id)
                result.reserved_for.append(entry.id)
    finally:
        for slice_id in reversed(reserved):
            pool.give(slice_id)
    if elastic_on and result.preempt is None:
        # After the aging reservations are given back: a starving entry's slices are
        # reserved against smaller work in this pass, not against a re-cut made for it
        # (re-cuts go to waiting work in queue order, the starving entry first), nor for
        # the smaller work: a card with a slice reserved for it is re-cut only for it.
        assert elastic is not None
        from gpupoolctl.sched.elastic import plan_recuts

        ready = [e for e, _ in result.waiting if e.id not in backing_off | at_limit]
        may_recut = None
        if result.kept_for or starving:
            may_recut = partial(_may_recut, kept=result.kept_for, starving=starving, usage=usage)
        result.recuts = plan_recuts(ready, pool, elastic, now, may_recut)
        if foresee:
            from gpupoolctl.sched.elastic import foresee_recuts

            result.upcoming = foresee_recuts(ready, pool, elastic, now, result.recuts, may_recut)
    return result


def _in_order(
    entries: Sequence[QueueEntry],
    now: datetime,
    interval: timedelta,
    cap: int,
    usage: share_rules.Usage | None,
) -> Iterator[QueueEntry]:
    """order_queue's order; with teams, within one effective priority the team with the
    least usage for its share next, its usage counting what this pass has placed so far
    (the caller updates `usage` between entries)."""
    ordered = order_queue(entries, now, interval=interval, cap=cap)
    if usage is None:
        yield from ordered
        return
    rank = {e.id: -effective_priority(e, now, interval=interval, cap=cap) for e in ordered}
    per_team: dict[str | None, deque[QueueEntry]] = {}
    for entry in ordered:
        per_team.setdefault(entry.request.team, deque()).append(entry)
    while per_team:
        best_team = min(
            per_team,
            key=lambda t: (
                rank[per_team[t][0].id],
                usage.fair_share_key(t),
                per_team[t][0].seq,
                per_team[t][0].id,
            ),
        )
        queue = per_team[best_team]
        yield queue.popleft()
        if not queue:
            del per_team[best_team]


def backoff_reason(seconds: int) -> str:
    """Why a restart waits: "restarting in 8s (backoff)"."""
    return f"restarting in {max(1, seconds)}s (backoff)"


def _may_recut(
    entry: QueueEntry,
    card: AnyCard,
    *,
    kept: Mapping[str, str],
    starving: Mapping[str, str],
    usage: share_rules.Usage | None,
) -> bool:
    """Whether a re-cut for `entry` may take `card`. A card with a slice an aging
    reservation kept for a starving entry: only for that entry. A card kept for another
    entry's merge (sched.clearing): only for work whose team has room in its nominal there
    (it is not lent to work that would borrow)."""
    from gpupoolctl.sched.cards import gpu_keys  # only with elastic: the catalogs are loaded

    owners = {starving[g] for g in gpu_keys(card) if g in starving}
    if owners and entry.id not in owners:
        return False
    claimant = kept.get(card.key)
    team = entry.request.team
    if claimant is None or claimant == entry.id or team is None or usage is None:
        return True
    one = {**card.common, "kind": "mig", "memory_mib": entry.request.memory_mib or 0}
    return share_rules.within_nominal(team, [one], usage)


def _clearing(
    team: str,
    request: JobRequest,
    pool: PoolView,
    usage: share_rules.Usage,
    elastic: ElasticInputs,
    spare: frozenset[str],
    kept: Mapping[str, str],
    planned: Sequence[Mapping[str, Any]],
) -> ClearingPlan | None:
    """sched.clearing.plan_clearing, loaded only by passes with an elastic policy."""
    from gpupoolctl.sched.clearing import plan_clearing

    return plan_clearing(
        team, request, pool, usage, elastic, spare=spare, kept=kept, planned=planned
    )


def _recut_reach(
    request: JobRequest,
    elastic: ElasticInputs,
    pool: PoolView,
    where: Callable[[Mapping[str, Any]], bool],
) -> bool:
    """Whether a re-cut of cards that `where` selects could hold `request` (one slice; all of
    it on one node when it must stay on one)."""
    from gpupoolctl.sched import elastic as elastic_rules

    reach = elastic_rules.recut_reach(request, elastic, where, pool.slices.values())
    return reach.serves(request)


def _place(
    request: JobRequest,
    pool: PoolView,
    policy: str,
    elastic: ElasticInputs | None,
    now: datetime,
) -> Placement | NoFit:
    """place(), with elastic's rules: whole cards that may be cut for a small request are
    kept from it (the no-fit reason counts them, and says when they may be cut), and work
    that a re-cut could serve is waiting, not never fitting."""
    if elastic is None or not elastic.policy.enabled:
        return place(request, pool, policy)
    # Imported here: a pool without an elastic policy never loads the catalogs for it.
    from gpupoolctl.sched import elastic as elastic_rules

    cards = elastic_rules.hidden_cards(request, pool, elastic)
    why = elastic_rules.kept_text(cards, elastic, now)
    hidden = pool.keep([s for card in cards for s in card.slices], why)
    try:
        outcome = place(request, pool, policy)
    finally:
        pool.unkeep(hidden)
    if isinstance(outcome, NoFit):
        if hidden:
            return NoFit(outcome.reason, never=False)  # the reason counts what is kept
        if outcome.never:
            reach = elastic_rules.recut_reach(request, elastic, slices=pool.slices.values())
            told = reach.why(request)
            if told:
                return NoFit(f"{outcome.reason}; {told}", never=not reach.serves(request))
    return outcome
