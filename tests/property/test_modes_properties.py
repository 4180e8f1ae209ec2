"""The scheduler's three questions (sched.modes) agree with one another: a request that
`never_fits` is never placed by any later pass on the same pool, and `what_if` says what a
real pass does with the request queued."""

from __future__ import annotations

from datetime import timedelta
from types import MappingProxyType

from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.sched import NoFit, Placement, PoolView, QueueEntry, place
from gpupoolctl.sched.modes import WHAT_IF_ID, never_fits, run_pass, what_if
from gpupoolctl.sched.pool import Holder
from gpupoolctl.sched.snapshot import Snapshot
from tests.property.test_sched_properties import SETTINGS, T0, held_pools, policies, requests


def snap_of(slices: list[dict], holders: list[Holder], queue: list[QueueEntry]) -> Snapshot:
    return Snapshot(
        now=T0,
        queue=tuple(queue),
        slices=MappingProxyType({s["id"]: s for s in slices}),
        holders=tuple(holders),
    )


def queue_of(asked: list) -> list[QueueEntry]:
    return [
        QueueEntry(
            id=f"q-{n}",
            priority=r.priority,
            seq=n,
            enqueued=T0 - timedelta(minutes=n),
            request=r,
            job=f"job-{n}",
        )
        for n, r in enumerate(asked)
    ]


@SETTINGS
@given(held_pools(), requests, policies, st.data())
def test_what_never_fits_no_later_pass_places_whatever_is_held(pool_and_holds, request, how, data):
    slices, holders = pool_and_holds
    never = never_fits(snap_of(slices, holders, []), request, how)
    # a later pass: any subset of today's holds gone, the request alone in the queue
    kept = []
    if holders:
        kept = data.draw(st.lists(st.sampled_from(holders), unique_by=lambda h: h.alloc))
    entry = QueueEntry(id="q", priority=50, seq=0, enqueued=T0, request=request, job="j")
    later = run_pass(snap_of(slices, kept, [entry]), how, preempt=True)
    placed = any(e.id == "q" for e, _ in later.placed)
    if never is not None:
        assert not placed and later.preempt is None
        # without an elastic section, it is placement's own answer on the pool
        assert never.never and never == place(request, PoolView(slices, holders), how)
    elif not kept:  # it fits the empty pool, so a pass on the empty pool places it
        assert placed


@SETTINGS
@given(held_pools(), st.lists(requests, max_size=4), requests, policies)
def test_what_if_says_what_a_real_pass_with_the_request_queued_does(
    pool_and_holds, ahead, request, how
):
    slices, holders = pool_and_holds
    queue = queue_of(ahead)
    answer = what_if(snap_of(slices, holders, queue), request, how, seq=len(queue))
    mine = QueueEntry(
        id=WHAT_IF_ID,
        priority=request.priority,
        seq=len(queue),
        enqueued=T0,
        request=request,
        job=WHAT_IF_ID,
        policy=how,
    )
    real = run_pass(snap_of(slices, holders, [*queue, mine]))
    placed = {e.id: p for e, p in real.placed}
    if isinstance(answer, Placement):
        assert placed.get(WHAT_IF_ID) == answer
    else:
        assert isinstance(answer, NoFit)
        assert WHAT_IF_ID not in placed
        waits = {e.id: n for e, n in (*real.waiting, *real.never)}
        assert waits[WHAT_IF_ID] == answer
