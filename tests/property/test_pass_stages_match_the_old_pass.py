"""The pass in named stages (sched.queue) decides exactly as the one-function pass it
replaced: a frozen copy of that function, kept here only while the change is checked, against
sched.schedule_pass on the random pools and queues of the elastic, shares and clearing
properties, with restarts in back-off, per-entry policies, fast aging and entries whose
victims are still stopping mixed in. Every field of the result and the pool's holds after
the pass must be equal."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from copy import deepcopy
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.sched import shares as share_rules
from gpupoolctl.sched.entry import QueueEntry
from gpupoolctl.sched.place import NoFit, Placement
from gpupoolctl.sched.pool import Holder, PoolView
from gpupoolctl.sched.preempt import choose_preemption
from gpupoolctl.sched.queue import (
    AGING_CAP,
    AGING_INTERVAL,
    PassResult,
    _clearing,
    _in_order,
    _may_recut,
    _place,
    _recut_reach,
    backoff_reason,
    effective_priority,
    schedule_pass,
)
from tests.property import test_clearing_properties as clearing_cases
from tests.property import test_elastic_properties as elastic_cases
from tests.property import test_shares_properties as share_cases

if TYPE_CHECKING:
    from gpupoolctl.sched.elastic import ElasticInputs
    from gpupoolctl.sched.shares import ShareInputs

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def frozen_schedule_pass(
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


@st.composite
def twists(draw: st.DrawFn, entries: list[QueueEntry], now: datetime) -> dict[str, Any]:
    """What the case strategies leave out: restarts in back-off, per-entry policies, fast
    aging (so aging reservations happen), entries whose victims are still stopping."""
    changed = []
    for entry in entries:
        back_off = draw(st.sampled_from([None, None, None, -30, 0, 1, 45]))
        how = draw(st.sampled_from([None, None, None, "spread", "best-fit", "topology"]))
        not_before = None if back_off is None else now + timedelta(seconds=back_off)
        changed.append(replace(entry, not_before=not_before, policy=how))
    ids = [e.id for e in entries]
    return {
        "entries": changed,
        "interval": draw(st.sampled_from([AGING_INTERVAL, timedelta(seconds=5)])),
        "cap": draw(st.sampled_from([AGING_CAP, 60])),
        "no_preempt": frozenset(draw(st.sets(st.sampled_from(ids))) if ids else ()),
        "policy": draw(st.sampled_from(["best-fit", "spread", "topology"])),
        "foresee": draw(st.booleans()),
    }


def both(slices: list[dict[str, Any]], holds: list[Holder], now: datetime, **kwargs: Any) -> None:
    twisted = kwargs.pop("twist")
    entries = twisted.pop("entries")
    new_pool, old_pool = PoolView(deepcopy(slices), holds), PoolView(deepcopy(slices), holds)
    new = schedule_pass(entries, new_pool, now, **twisted, **kwargs)
    old = frozen_schedule_pass(entries, old_pool, now, **twisted, **kwargs)
    assert new == old
    assert [type(n) for _, n in new.waiting] == [type(n) for _, n in old.waiting]
    assert new_pool.holds == old_pool.holds
    assert {s: new_pool.is_free(s) for s in new_pool.slices} == {
        s: old_pool.is_free(s) for s in old_pool.slices
    }


@SETTINGS
@given(st.data(), elastic_cases.cases())
def test_elastic_passes_decide_as_before(data: st.DataObject, case: dict[str, Any]) -> None:
    now = elastic_cases.NOW
    twist = data.draw(twists(case["entries"], now))
    both(case["slices"], case["holders"], now, twist=twist, preempt=case["preempt"],
         elastic=case["inputs"])  # fmt: skip


@SETTINGS
@given(st.data(), share_cases.cases() | share_cases.cases(crowded=True))
def test_passes_with_teams_decide_as_before(data: st.DataObject, case: dict[str, Any]) -> None:
    now = share_cases.NOW
    twist = data.draw(twists(case["entries"], now))
    both(case["slices"], case["holds"], now, twist=twist, preempt=case["preempt"],
         shares=case["shares"])  # fmt: skip


@SETTINGS
@given(st.data(), clearing_cases.cases(), st.sampled_from([0, 1, 30]))
def test_clearing_passes_decide_as_before(
    data: st.DataObject, case: dict[str, Any], idle_min: int
) -> None:
    now = clearing_cases.NOW
    twist = data.draw(twists(case["queue"], now))
    elastic = clearing_cases.inputs(case["slices"], now - timedelta(minutes=idle_min))
    both(case["slices"], case["holds"], now, twist=twist, preempt=data.draw(st.booleans()),
         shares=case["shares"], elastic=elastic)  # fmt: skip
