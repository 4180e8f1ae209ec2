"""No-fit reasons are typed (sched.place.NoFit: a code from sched.explain.CODES, the detail
its words are made from) and rendered in one place (sched.explain.render), with the very
words placement composed before they were typed: `_old_no_fit` below is a copy of the
string-composing code they replaced, and the reference here."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.sched import JobRequest, NoFit, PoolView, explain, place
from gpupoolctl.sched.place import _largest, group_counts, levels, not_free
from tests.property.test_sched_properties import SETTINGS, held_pools, policies, requests


def _old_no_fit(request: JobRequest, pool: PoolView, tried: list[str | None]) -> tuple[str, bool]:
    """sched.place._no_fit as it was when reasons were strings: (reason, never)."""
    want = request.describe()
    if None in tried:
        free_now, taken = not_free(request, pool)
        total = free_now + sum(n for _, n in taken)
        if total == 0:
            return f"no slice in the pool matches {want}", True
        if total < request.gpus:
            return f"the pool has only {total} slice(s) matching {want}, even with all free", True
        return (
            f"nothing fits {want} now: {free_now} matching slice(s) free of {total}"
            + explain.not_free(taken),
            False,
        )
    level = tried[-1]
    assert level is not None
    best_ever = _largest(group_counts(request, pool, level, free=False))
    best_now = _largest(group_counts(request, pool, level))
    if best_ever[1] == 0:
        return f"no slice in the pool matches {want}", True
    if best_ever[1] < request.gpus:
        return (
            f"no {level} has {request.gpus} slices matching {want}, even with all free "
            f"(the most: {best_ever[1]} on {best_ever[0]})",
            True,
        )
    now = f"the most free on one {level}: {best_now[1]}" + (
        f" on {best_now[0]}" if best_now[1] else ""
    )
    free_now, taken = not_free(request, pool)
    total = free_now + sum(n for _, n in taken)
    if taken:
        now += f"; {free_now} matching slice(s) free of {total}" + explain.not_free(taken)
    return f"nothing fits {want} now: {now}", False


PLACEMENT_CODES = {"no-match", "too-few-ever", "group-too-small", "nothing-free", "no-group-free"}
KEPT = ("kept to be cut", "kept to be cut in 3m40s (min-idle)")  # sched.elastic.kept_text


@SETTINGS
@given(held_pools(), requests, policies, st.data())
def test_placement_reasons_are_typed_and_say_what_they_said(pool_and_holds, request, policy, data):
    slices, holders = pool_and_holds
    view = PoolView(slices, holders)
    # Some free slices kept aside with a why (as elastic keeps cards to be cut): the reason
    # counts them under that why.
    free = sorted(view.free)
    kept = data.draw(st.lists(st.sampled_from(free), unique=True) if free else st.just([]))
    view.keep(kept, data.draw(st.sampled_from(KEPT)))
    result = place(request, view, policy)
    if not isinstance(result, NoFit):
        return
    assert result.code in explain.CODES and result.code in PLACEMENT_CODES
    assert result.inner is None
    words, never = _old_no_fit(request, view, levels(request, policy))
    assert (result.reason, result.never) == (words, never)
    assert explain.render(result) == words
    # The same answer again is an equal NoFit, words read or not.
    again = place(request, view, policy)
    assert again == result and again.reason == result.reason


@SETTINGS
@given(held_pools(), requests, policies)
def test_a_reason_that_adds_to_another_renders_it_first(pool_and_holds, request, policy):
    slices, holders = pool_and_holds
    result = place(request, PoolView(slices, holders), policy)
    if not isinstance(result, NoFit):
        return
    team = result.wrap("where-quota", never=False, team="T")
    assert team.reason == f"{result.reason} where team T has quota" and team.inner is result
    assert team.code == "where-quota" and not team.never
    stopping = result.wrap("victims-stopping")
    assert stopping.never == result.never and stopping != result
    assert stopping.reason == f"{result.reason}; the jobs preempted for it are still stopping"
