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
from typing import TYPE_CHECKING, Any, NamedTuple

from gpupoolctl.sched import shares as share_rules
from gpupoolctl.sched.entry import QueueEntry
from gpupoolctl.sched.place import NoFit, Placement, place
from gpupoolctl.sched.pool import Holder, PoolView
from gpupoolctl.sched.preempt import Eligible, choose_preemption
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
        if not self.recuts:  # asked for every waiting entry, on queues of thousands
            return None
        job = entry.job or entry.id
        return next((r for r in self.recuts if job in r.jobs), None)

    def waiting_reason(self, entry: QueueEntry, nofit: NoFit) -> str:
        """Why a waiting entry waits, in words (waiting_nofit's)."""
        return self.waiting_nofit(entry, nofit).reason

    def waiting_nofit(self, entry: QueueEntry, nofit: NoFit) -> NoFit:
        """Why a waiting entry waits: the re-cut made for it (now, or when a later pass
        may make it: a "recut-wait"), else why nothing fits (`nofit`)."""
        recut = self.recut_for(entry)
        if recut is not None:
            from gpupoolctl.sched.elastic import Upcoming  # a re-cut: elastic is loaded

            return Upcoming(recut).nofit()
        coming = self.upcoming.get(entry.id)
        return coming.nofit() if coming is not None else nofit


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

    The stages, each a function over one PassState: the queue in order (`_in_two_rounds`);
    for each entry, a restart's back-off (`_backing_off`), then `_try_to_place`; when
    nothing fits, `_nothing_fits`: clearing (`_plan_clearing`), reclaim (`_reclaim`),
    preemption (`_preempt`), the merge kept (`_keep_for_clearing`) and the aging
    reservation (`_reserve_for_starving`); at the end, the re-cuts (`_plan_recuts`).
    """
    usage = share_rules.Usage.of_pool(pool, shares) if shares is not None else None
    state = PassState(pool, now, policy, interval, cap, preempt, no_preempt, elastic, usage)
    try:
        for turn in _in_two_rounds(state, entries):
            if _backing_off(state, turn.entry):
                continue
            nofit = _try_to_place(state, turn)
            if nofit is not None and _nothing_fits(state, turn, nofit):
                break  # victims chosen: what follows is decided again once they are gone
    finally:
        _give_back_reserved(state)
    if state.elastic_on and state.result.preempt is None:
        _plan_recuts(state, foresee=foresee)
    return state.result


# The answers a pass remembers are keyed on (request shape, placement policy, team).
ShapeKey = tuple[Any, ...]


@dataclass
class PassState:
    """One pass: its inputs (read only), what it has decided so far (`result`), and what it
    remembers from one entry to the next. Every stage reads and changes this, nothing else
    (besides the holds it places on `pool`)."""

    pool: PoolView
    now: datetime
    policy: str
    interval: timedelta
    cap: int
    preempt: bool
    no_preempt: frozenset[str]
    elastic: ElasticInputs | None
    usage: share_rules.Usage | None  # with teams: their usage, counting this pass's holds
    result: PassResult = field(default_factory=PassResult)
    # The pass only ever takes slices, so a request that did not fit cannot fit later in the
    # same pass: identical requests (priority aside) reuse the answer. (bench/utilization's
    # queue trimming relies on it: only the first NoFit of a shape matters.)
    failed: dict[ShapeKey, NoFit] = field(default_factory=dict)
    # Slices taken out of the pool for the rest of the pass (aging reservations, cards kept
    # from borrowers), given back at its end.
    reserved: list[str] = field(default_factory=list)
    mine: set[str] = field(default_factory=set)  # holds placed by this pass: never victims
    backing_off: set[str] = field(default_factory=set)  # restarts in back-off: not re-cut for
    at_limit: set[str] = field(default_factory=set)  # waiting for their team's quota: idem
    unclearable: set[ShapeKey] = field(default_factory=set)  # no clearing plan serves these
    planned: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # team -> what
    # its clearing plans will hold
    starving: dict[str, str] = field(default_factory=dict)  # GPU key -> the starving entry
    # an aging reservation kept it for
    # Request shapes whose free slices an aging reservation took: a later entry of the
    # shape finds none left (the pass only fills the pool), so it is not looked for again.
    exhausted: set[tuple[Any, ...]] = field(default_factory=set)
    # Preemption: the holds that may be victims (made on first need), and the requests
    # (shape key, priority) for which none would do. The pass only fills the pool and its
    # own holds are never victims, so a request refused once is refused again.
    eligible: Eligible | None = None
    no_victims: set[tuple[ShapeKey, int]] = field(default_factory=set)
    # With teams, work that would borrow goes after all work within its team's nominal
    # (Kueue's order): else a borrower of higher priority takes what a reclaim freed for a
    # guaranteed job, and the next pass reclaims it again. Borrowers wait for a second round.
    deferred: list[QueueEntry] = field(default_factory=list)
    borrowing: set[ShapeKey] = field(default_factory=set)  # shapes whose placement borrowed

    @property
    def elastic_on(self) -> bool:
        return self.elastic is not None and self.elastic.policy.enabled


class Turn(NamedTuple):
    """One entry's turn in the pass: its placement policy, its team (with teams only), the
    key its answer is remembered by, and whether it is the borrowers' second round. (A
    tuple: one is made per entry per pass, on queues of thousands.)"""

    entry: QueueEntry
    how: str
    team: str | None
    key: ShapeKey
    second_round: bool

    @classmethod
    def of(cls, state: PassState, entry: QueueEntry, second_round: bool) -> Turn:
        how = entry.policy or state.policy
        team = entry.request.team if state.usage is not None else None
        return cls(entry, how, team, (entry.request.shape_key(), how, team), second_round)


def _in_two_rounds(state: PassState, entries: Sequence[QueueEntry]) -> Iterator[Turn]:
    """Order the queue. Reads the queue and `usage` (lazily: fair share counts what the
    pass has placed so far); between the rounds takes the free slices of the cards in
    `result.kept_for` out of the pool (into `reserved`), then yields `deferred`, the
    entries that would borrow."""
    for first in _in_order(entries, state.now, state.interval, state.cap, state.usage):
        yield Turn.of(state, first, False)
    # Cards kept for the merge of work within its nominal (sched.clearing) are not lent:
    # work that would borrow does not get their free slices.
    cards = state.elastic.cards if state.elastic is not None else {}
    for card_key in state.result.kept_for:
        for sid in cards[card_key].slices:
            if state.pool.is_free(sid):
                state.pool.take(sid)
                state.reserved.append(sid)
    for later in state.deferred:  # read once the first round is over
        yield Turn.of(state, later, True)


def _backing_off(state: PassState, entry: QueueEntry) -> bool:
    """Whether the entry is a restart waiting out its back-off: then it is only waiting
    (`result.waiting`, `backing_off`): not placed, no victims, no slices reserved, no re-cut
    made for it."""
    if entry.not_before is None or entry.not_before <= state.now:
        return False
    left = math.ceil((entry.not_before - state.now).total_seconds())
    state.result.waiting.append((entry, backoff_nofit(left)))
    state.backing_off.add(entry.id)
    return True


def _try_to_place(state: PassState, turn: Turn) -> NoFit | None:
    """Place the entry if it fits (the answer remembered in `failed` for its shape, else
    placement: within its team's quota with teams). A placement that would borrow is
    deferred to the second round (`borrowing`, `deferred`); one made is held on `pool`,
    counted in `usage`, and recorded (`result.placed`, `result.borrowed`, `mine`). Returns
    None then, else why nothing fits."""
    if not turn.second_round and turn.key in state.borrowing:
        state.deferred.append(turn.entry)
        return None
    outcome: Placement | NoFit | None = state.failed.get(turn.key)
    if outcome is None:
        outcome = _fit(state, turn)
    if isinstance(outcome, NoFit):
        return outcome
    entry, pool, usage, team = turn.entry, state.pool, state.usage, turn.team
    borrowed = False
    if usage is not None and team is not None:
        taken = [pool.slices[s] for s in outcome.slices]
        borrowed = share_rules.borrows(team, taken, usage)
        if borrowed and not turn.second_round:
            state.borrowing.add(turn.key)
            state.deferred.append(entry)
            return None
        usage.change(team, taken, +1)
        if borrowed:
            state.result.borrowed.add(entry.id)
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
    state.mine.add(entry.id)
    state.result.placed.append((entry, outcome))
    return None


def _fit(state: PassState, turn: Turn) -> Placement | NoFit:
    """Where the entry's request fits on the pool now (within its team's quota, with
    teams), or why it does not. Reads only."""
    request, pool, elastic = turn.entry.request, state.pool, state.elastic
    if state.usage is None or turn.team is None:
        return _place(request, pool, turn.how, elastic, state.now)
    return share_rules.place_for_team(
        turn.team,
        request,
        pool,
        state.usage,
        partial(_place, request, pool, turn.how, elastic, state.now),
        partial(_recut_reach, request, elastic, pool) if state.elastic_on else None,
    )


def _nothing_fits(state: PassState, turn: Turn, nofit: NoFit) -> bool:
    """The entry does not fit: remember the answer for its shape (`failed`) and decide what
    follows, in this order: refused if it never fits (`result.never`); waiting on its team's
    quota (`at_limit`); else the clearing that could serve it, reclaim or preemption (True:
    victims chosen, the pass stops), the clearing's cards kept for it, and, once it has
    aged to the cap, the aging reservation. Every entry that does not stop the pass or get
    refused ends in `result.waiting`."""
    entry = turn.entry
    state.failed[turn.key] = nofit
    if turn.second_round:  # it fitted by borrowing; what is left no longer holds it
        state.result.waiting.append((entry, nofit))
        return False
    if nofit.never:
        state.result.never.append((entry, nofit))
        return False
    if isinstance(nofit, share_rules.QuotaWait):
        state.at_limit.add(entry.id)
        state.result.waiting.append((entry, nofit))
        return False
    clearing = _plan_clearing(state, turn)
    may_preempt = state.preempt and entry.id not in state.no_preempt
    if may_preempt and (_reclaim(state, turn, clearing) or _preempt(state, turn)):
        return True
    if clearing is not None:
        nofit = _keep_for_clearing(state, turn, clearing, nofit)
    state.result.waiting.append((entry, nofit))
    if effective_priority(entry, state.now, interval=state.interval, cap=state.cap) >= state.cap:
        _reserve_for_starving(state, entry)
    return False


def _plan_clearing(state: PassState, turn: Turn) -> ClearingPlan | None:
    """With elastic and teams: the cut cards a reclaim could clear and merge for the
    entry's team (sched.clearing), or None. Reads the pool, `mine`, `result.kept_for` and
    the team's `planned`; a shape no plan serves goes into `unclearable` (the pool only gets
    fuller in this pass)."""
    usage, team, elastic = state.usage, turn.team, state.elastic
    if not state.elastic_on or team is None or usage is None or turn.key in state.unclearable:
        return None
    assert elastic is not None
    clearing = _clearing(
        team,
        turn.entry.request,
        state.pool,
        usage,
        elastic,
        frozenset(state.mine),
        state.result.kept_for,
        state.planned.get(team, []),
    )
    if clearing is None:
        state.unclearable.add(turn.key)
    return clearing


def _reclaim(state: PassState, turn: Turn, clearing: ClearingPlan | None) -> bool:
    """With teams that reclaim: victims among teams above their nominal (or the clearing's
    own victims), never this pass's holds. Sets `result.preempt` and `result.reclaim`;
    True when it chose any."""
    usage, team = state.usage, turn.team
    if team is None or usage is None or not usage.inputs.reclaim:
        return False
    victims = share_rules.choose_reclaim(
        team, turn.entry.request, state.pool, usage, state.now, turn.how, spare=state.mine
    )
    if not victims and clearing is not None:
        victims = list(clearing.victims)
    if not victims:
        return False
    state.result.preempt, state.result.reclaim = (turn.entry, victims), True
    return True


def _preempt(state: PassState, turn: Turn) -> bool:
    """Priority preemption (within the entry's team, with teams): the fewest eligible
    victims, never this pass's holds. Sets `result.preempt`; True when it chose any."""
    request = turn.entry.request
    tried = (turn.key, request.priority)
    if tried in state.no_victims:
        return False
    if state.eligible is None:
        state.eligible = Eligible(state.pool, state.now)
    candidates = state.eligible.below(request.priority, request)
    if state.usage is not None:
        candidates = [h for h in candidates if h.team == turn.team]
    victims = None
    if candidates:
        victims = choose_preemption(
            request, state.pool, state.now, turn.how, spare=state.mine, candidates=candidates
        )
    if not victims:
        state.no_victims.add(tried)
        return False
    state.result.preempt = (turn.entry, victims)
    return True


def _keep_for_clearing(state: PassState, turn: Turn, clearing: ClearingPlan, nofit: NoFit) -> NoFit:
    """Keep the clearing's cards for the entry's merge (`result.kept_for`): work that would
    borrow gets none of their free slices in this pass (work within its nominal still may),
    no re-cut for such work takes them, and no other plan of the pass counts on them or on
    the room in the team's nominal it will take (`planned`). Returns the entry's reason,
    which tells the clearing."""
    for card_key in (*(c.key for c in clearing.cards), *clearing.ready):
        state.result.kept_for[card_key] = turn.entry.id
    assert turn.team is not None  # a clearing is planned for a team only
    state.planned.setdefault(turn.team, []).extend(clearing.entries)
    return nofit.wrap("clearing", never=False, **clearing.detail())


def _reserve_for_starving(state: PassState, entry: QueueEntry) -> None:
    """The aging reservation of an entry aged to the cap: every free slice that could serve
    it is taken out of the pool for the rest of the pass (`reserved`; its cards in
    `starving`), and the entry is named in `result.reserved_for`."""
    shape = entry.request.shape_key()  # all that free_candidates looks at
    if shape not in state.exhausted:
        state.exhausted.add(shape)
        for slot in list(state.pool.free_candidates(entry.request)):
            state.pool.take(slot.id)
            state.reserved.append(slot.id)
            state.starving.setdefault(slot.gpu, entry.id)
    state.result.reserved_for.append(entry.id)


def _give_back_reserved(state: PassState) -> None:
    """Put every slice the pass took out of the pool (`reserved`) back, last first."""
    for slice_id in reversed(state.reserved):
        state.pool.give(slice_id)


def _plan_recuts(state: PassState, *, foresee: bool) -> None:
    """With elastic, after the reservations are given back: the re-cuts for the waiting
    work (`result.recuts`; with `foresee`, `result.upcoming`), in queue order, for none in
    back-off or at its team's limit. A starving entry's slices are reserved against smaller
    work in this pass, not against a re-cut made for it, nor for the smaller work: a card
    with a slice reserved for it (`starving`) is re-cut only for it; a card kept for a merge
    (`result.kept_for`) only for work within its team's nominal."""
    from gpupoolctl.sched.elastic import plan_recuts

    assert state.elastic is not None
    result = state.result
    skip = state.backing_off | state.at_limit
    ready = [e for e, _ in result.waiting if e.id not in skip]
    may_recut = None
    if result.kept_for or state.starving:
        may_recut = partial(
            _may_recut, kept=result.kept_for, starving=state.starving, usage=state.usage
        )
    result.recuts = plan_recuts(ready, state.pool, state.elastic, state.now, may_recut)
    if foresee:
        from gpupoolctl.sched.elastic import foresee_recuts

        result.upcoming = foresee_recuts(
            ready, state.pool, state.elastic, state.now, result.recuts, may_recut
        )


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


def backoff_nofit(seconds: int) -> NoFit:
    """Why a restart waits (a "backoff"): "restarting in 8s (backoff)"."""
    return NoFit("backoff", False, {"seconds": seconds})


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
    if isinstance(outcome, NoFit) and outcome.never:
        if hidden:  # it waits for the cards kept from it (the reason counts them)
            return outcome.wrap("recut-kept", never=False)
        reach = elastic_rules.recut_reach(request, elastic, slices=pool.slices.values())
        if reach.reachable:
            return reach.nofit(request, outcome)
    return outcome
