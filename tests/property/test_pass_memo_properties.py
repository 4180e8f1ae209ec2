"""What a pass remembers to stay fast on a full pool changes none of its answers.

Two memories (bench/scale found each was most of a full pool's pass): the pool view keeps
a tally per shape of why its slices are not free (`PoolView.shape_tally`, read by every
no-fit reason), and the pass finds the holds eligible for preemption once and remembers
the requests for which no victims would do (`PassState.eligible`, `no_victims`). Each is
checked here against the walk it replaces.
"""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.sched import PoolView, QueueEntry, choose_preemption, schedule_pass
from gpupoolctl.sched import queue as queue_module
from gpupoolctl.sched.place import not_free
from gpupoolctl.sched.pool import Holder
from gpupoolctl.sched.preempt import Eligible, eligible
from gpupoolctl.sched.request import JobRequest, host_matches
from tests.property.test_sched_properties import (
    SETTINGS,
    T0,
    contested,
    held_pools,
    policies,
    requests,
)


def walked(request: JobRequest, view: PoolView) -> tuple[int, dict[str, int]]:
    """not_free's answer by walking every matching slice, as it did before the tally."""
    free, counts = 0, {}
    for shape in view.shapes_for(request):
        for slot in shape.members:
            if not host_matches(slot.host, request):
                continue
            if view.is_free(slot.id):
                free += 1
            else:
                why = view.why_taken(slot.id)
                counts[why] = counts.get(why, 0) + 1
    return free, counts


steps = st.lists(
    st.tuples(st.sampled_from(["hold", "unhold", "keep", "unkeep"]), st.integers(0, 50)),
    max_size=30,
)


@SETTINGS
@given(held_pools(), steps, st.lists(requests, min_size=1, max_size=3))
def test_the_no_fit_tally_follows_every_change_of_the_view(pool_and_holds, changes, asked):
    slices, holders = pool_and_holds
    view = PoolView(slices, holders)
    ids = [s["id"] for s in slices]
    live = {h.alloc: h for h in holders}
    kept: list[list[str]] = []
    for number, (change, pick) in enumerate(changes):
        for request in asked:  # read between every change, so a stale tally would show
            free, ranked = not_free(request, view)
            assert (free, dict(ranked)) == walked(request, view)
        sid = ids[pick % len(ids)]
        if change == "hold" and view.is_free(sid):
            holder = Holder(alloc=f"x-{number}", slices=(sid,))
            view.hold([sid], holder)
            live[holder.alloc] = holder
        elif change == "unhold" and live:
            view.unhold(live.pop(sorted(live)[pick % len(live)]).alloc)
        elif change == "keep":
            kept.append(view.keep([sid], "kept to be cut"))
        elif change == "unkeep" and kept:
            view.unkeep(kept.pop())
    for request in asked:
        free, ranked = not_free(request, view)
        assert (free, dict(ranked)) == walked(request, view)


def preempt_without_memory(state: queue_module.PassState, turn: queue_module.Turn) -> bool:
    """`_preempt` as it was: every hold looked at again for every waiting entry."""
    request = turn.entry.request
    candidates = None
    if state.usage is not None:
        candidates = [
            h
            for h in state.pool.holds.values()
            if h.team == turn.team and eligible(h, request, state.now)
        ]
    victims = choose_preemption(
        request, state.pool, state.now, turn.how, spare=state.mine, candidates=candidates
    )
    if not victims:
        return False
    state.result.preempt = (turn.entry, victims)
    return True


def answers(result: queue_module.PassResult) -> tuple[object, ...]:
    return (
        [(e.id, p.slices) for e, p in result.placed],
        [(e.id, n.reason, n.never) for e, n in result.waiting],
        [(e.id, n.reason) for e, n in result.never],
        None if result.preempt is None else (result.preempt[0].id, result.preempt[1]),
    )


@SETTINGS
@given(
    st.one_of(held_pools(busy=True), held_pools()),
    st.lists(st.one_of(contested, requests), min_size=1, max_size=8),
    policies,
)
def test_a_pass_that_remembers_decides_as_one_that_looks_again(pool_and_holds, asked, policy):
    slices, holders = pool_and_holds
    queue = [
        QueueEntry(
            id=f"q-{n}",
            priority=r.priority,
            seq=n,
            enqueued=T0 + timedelta(seconds=n),
            request=r,
            job=f"job-{n}",
        )
        for n, r in enumerate(asked)
    ]
    now = T0 + timedelta(minutes=1)
    fast = schedule_pass(queue, PoolView(slices, holders), now, policy, preempt=True)
    with mock.patch.object(queue_module, "_preempt", preempt_without_memory):
        slow = schedule_pass(queue, PoolView(slices, holders), now, policy, preempt=True)
    assert answers(fast) == answers(slow)


@settings(SETTINGS, max_examples=100)  # a filter compared with a filter: few examples do
@given(held_pools(busy=True), st.sampled_from([0, 10, 50, 90, 100]))
def test_eligible_below_a_priority_is_every_hold_eligible_for_it(pool_and_holds, priority):
    slices, holders = pool_and_holds
    view = PoolView(slices, holders)
    request = JobRequest(priority=priority)
    assert Eligible(view, T0).below(priority) == [
        h for h in view.holds.values() if eligible(h, request, T0)
    ]
