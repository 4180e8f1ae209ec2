"""Each no-fit code (sched.explain.CODES) is what the situation it names produces, with its
words (sched.explain.render) as users have always read them."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from types import MappingProxyType
from typing import Any

import pytest

from gpupoolctl.policy.model import GPU_MEMORY
from gpupoolctl.sched import JobRequest, NoFit, PoolView, explain, place, schedule_pass
from gpupoolctl.sched.cards import cards_of
from gpupoolctl.sched.modes import never_fits
from gpupoolctl.sched.queue import backoff_nofit
from gpupoolctl.sched.shares import QuotaWait, ShareInputs
from gpupoolctl.sched.snapshot import Snapshot
from tests.unit.test_sched_shares import (
    GIB,
    T0,
    _dgx,
    _hive_cut_small,
    card,
    entry,
    hold,
    scope,
)


def only(result: Any) -> tuple[Any, NoFit]:
    ((queued, nofit),) = [*result.waiting, *result.never]
    return queued, nofit


# -- placement ----------------------------------------------------------------------------


def test_placement_codes() -> None:
    pool = [card("a", 0), card("a", 1), card("b", 0)]
    held = PoolView(pool, [hold("h", ("a/gpu0",), None)])

    none = place(JobRequest(profile="1g.10gb"), held)
    assert (none.code, none.never) == ("no-match", True)
    assert none.reason == "no slice in the pool matches 1 x 1g.10gb"
    assert none.detail == {"want": "1 x 1g.10gb"}

    few = place(JobRequest(gpus=4, profile="gpu"), held)
    assert (few.code, few.never, few.detail["total"]) == ("too-few-ever", True, 3)
    assert few.reason.startswith("the pool has only 3 slice(s) matching 4 x gpu")

    busy = place(JobRequest(gpus=3, profile="gpu"), held)
    assert (busy.code, busy.never) == ("nothing-free", False)
    assert (busy.detail["free"], busy.detail["total"], busy.detail["taken"]) == (
        2,
        3,
        (("held", 1),),
    )
    assert busy.reason.endswith("now: 2 matching slice(s) free of 3: 1 held")

    small = place(JobRequest(gpus=3, profile="gpu", same_node=True), held)
    assert (small.code, small.never) == ("group-too-small", True)
    assert (small.detail["level"], small.detail["most"], small.detail["group"]) == ("host", 2, "a")
    assert small.reason.endswith("even with all free (the most: 2 on a)")

    split = place(JobRequest(gpus=2, profile="gpu", same_node=True), held)
    assert (split.code, split.never) == ("no-group-free", False)
    assert split.reason.endswith(
        "now: the most free on one host: 1 on a; 2 matching slice(s) free of 3: 1 held"
    )


def test_a_restart_in_backoff_waits_with_backoff() -> None:
    later = dataclasses.replace(
        entry("r", None, 1, profile="gpu"), not_before=T0 + timedelta(seconds=8)
    )
    _, nofit = only(schedule_pass([later], PoolView([card("a", 0)]), T0))
    assert nofit == backoff_nofit(8) and nofit.code == "backoff" and not nofit.never
    assert nofit.reason == "restarting in 8s (backoff)"


# -- teams' quotas ------------------------------------------------------------------------


def test_a_team_at_its_limit_waits_with_quota_limit() -> None:
    pool = [card("a", g) for g in range(3)]
    holds = [hold("t0", ("a/gpu0",), "T"), hold("t1", ("a/gpu1",), "T", borrowed=True)]
    shares = ShareInputs(quotas={"T": (scope(80, borrow_gib=80),)})
    queued = [entry("q", "T", 1, profile="gpu")]
    _, nofit = only(schedule_pass(queued, PoolView(pool, holds), T0, shares=shares))
    assert isinstance(nofit, QuotaWait) and nofit.code == "quota-limit"
    assert nofit.detail == {
        "team": "T",
        "resource": GPU_MEMORY,
        "used": 160 * GIB,
        "limit": 160 * GIB,
        "scope": None,
    }
    assert nofit.reason == "team T at its limit (160 of 160 GiB)"


def test_a_borrower_that_would_take_what_another_team_keeps_waits_with_quota_kept() -> None:
    pool = [card("a", g) for g in range(4)]
    shares = ShareInputs(quotas={"T": (scope(80),), "U": (scope(160, lend_gib=80),)})
    queue = [entry(f"t{i}", "T", i, profile="gpu") for i in range(4)]
    result = schedule_pass(queue, PoolView(pool), T0, shares=shares)
    ((waiting, nofit),) = result.waiting
    assert waiting.id == "t3" and isinstance(nofit, QuotaWait) and nofit.code == "quota-kept"
    assert nofit.reason.endswith("kept for team U (80 GiB it does not lend)")


def test_work_placed_off_its_teams_scopes_waits_with_quota_off_scope() -> None:
    """Placement picks the free card, on site s1, which the team's quota (site s2) does not
    cover; its s2 card (held) is at the limit: it waits for its quota."""
    pool = [card("a", 0, "s1"), card("b", 0, "s2")]
    holds = [hold("t", ("b/gpu0",), "T")]
    shares = ShareInputs(quotas={"T": (scope(80, borrow_gib=0, site="s2"),)})
    queued = [entry("q", "T", 1, profile="gpu")]
    _, nofit = only(schedule_pass(queued, PoolView(pool, holds), T0, shares=shares))
    assert isinstance(nofit, QuotaWait) and nofit.code == "quota-off-scope"
    assert nofit.reason == "team T has no quota on a's NVIDIA H100 80GB HBM3 cards"


def test_work_that_fits_only_off_its_teams_scopes_waits_where_quota() -> None:
    pool = [card("a", 0, "s1"), card("b", 0, "s2")]
    holds = [hold("u", ("b/gpu0",), None)]
    shares = ShareInputs(quotas={"T": (scope(320, site="s2"),)})
    queued = [entry("q", "T", 1, profile="gpu")]
    _, nofit = only(schedule_pass(queued, PoolView(pool, holds), T0, shares=shares))
    assert (nofit.code, nofit.never, nofit.detail) == ("where-quota", False, {"team": "T"})
    assert nofit.inner is not None and nofit.inner.code == "nothing-free"
    assert nofit.reason == f"{nofit.inner.reason} where team T has quota"


def test_a_team_with_no_quota_on_any_card_never_fits_with_team_no_quota() -> None:
    pool = [card("a", 0, "s1")]
    shares = ShareInputs(quotas={"T": (scope(320, site="s3"),)})
    _, nofit = only(schedule_pass([entry("q", "T", 1)], PoolView(pool), T0, shares=shares))
    assert (nofit.code, nofit.never) == ("team-no-quota", True)
    assert nofit.reason == "team T has no quota on any card that could hold 1 x any slice"


# -- elastic re-cuts and clearing ---------------------------------------------------------


def test_work_a_recut_could_hold_waits_with_recut_reach_then_recut_wait() -> None:
    slices, inputs = _hive_cut_small()
    queued = [entry("big", None, 1, memory_mib=40 * GIB, vendor="amd")]
    result = schedule_pass(queued, PoolView(slices), T0, elastic=inputs)
    waiting, nofit = only(result)
    assert (nofit.code, nofit.never) == ("recut-reach", False)
    assert nofit.inner is not None and nofit.inner.code == "no-match"
    assert nofit.reason == f"{nofit.inner.reason}; an idle card re-cut could hold it"
    # The pass makes that re-cut: the job's reason is the re-cut it waits for.
    told = result.waiting_nofit(waiting, nofit)
    assert told.code == "recut-wait" and told.reason == result.waiting_reason(waiting, nofit)
    assert told.reason.startswith("waits for a re-cut: re-cut idle dxb-mi300x-01/")


def test_work_no_recut_could_hold_never_fits_with_recut_reach() -> None:
    slices, _, inputs = _dgx(held=0)
    queued = [entry("x", None, 1, memory_mib=10 * GIB, gpus=57, same_node=True)]
    _, nofit = only(schedule_pass(queued, PoolView(slices), T0, elastic=inputs))
    assert (nofit.code, nofit.never) == ("recut-reach", True)
    assert nofit.inner is not None and nofit.inner.code == "group-too-small"
    assert nofit.reason.endswith("; nor re-cut (the most on one node: 32 on sg-dgx01)")


def test_work_kept_from_cards_a_recut_serves_waits_with_recut_kept() -> None:
    """One idle card, kept from small work to be cut for it: placement alone says the
    work never fits (one whole card, two slices asked); it waits for the cut."""
    slices, _, inputs = _dgx(held=0)
    one = [s for s in slices if s["gpu"] == 0]
    inputs = dataclasses.replace(inputs, cards=cards_of(one))
    queued = [entry("x", None, 1, memory_mib=9000, gpus=2, same_node=True)]
    _, nofit = only(schedule_pass(queued, PoolView(one), T0, elastic=inputs))
    assert (nofit.code, nofit.never) == ("recut-kept", False)
    assert nofit.inner is not None and (nofit.inner.code, nofit.inner.never) == (
        "group-too-small",
        True,
    )
    assert nofit.reason == nofit.inner.reason


def test_work_whose_merge_is_cleared_waits_with_clearing() -> None:
    from tests.unit.test_sched_clearing import (
        HOST,
        SMALL,
        TRAIN,
        cut_node,
        elastic,
        emptied_holds,
    )
    from tests.unit.test_sched_clearing import shares as team_shares

    slices = cut_node()
    holds = emptied_holds(slices)
    inputs = elastic(slices, idle_since=T0 - timedelta(minutes=1))
    result = schedule_pass(
        [TRAIN, SMALL], PoolView(slices, holds), T0, shares=team_shares(), elastic=inputs
    )
    why = {e.id: n for e, n in result.waiting}
    train = why["train"]
    assert (train.code, train.never) == ("clearing", False)
    assert train.detail == {"cards": (f"{HOST}/gpu1", f"{HOST}/gpu2"), "victims": 0}
    assert train.inner is not None and train.inner.code in explain.CODES
    assert (
        train.reason
        == f"{train.inner.reason}; {HOST}/gpu1, {HOST}/gpu2 kept to be made whole for it"
    )


# -- the three questions ------------------------------------------------------------------


def test_behind_queue_and_never() -> None:
    assert NoFit("behind-queue", False).reason == "it would wait behind the queue"
    pool = [card("a", 0)]
    snap_request = JobRequest(profile="1g.10gb")
    nofit = place(snap_request, PoolView(pool))
    assert nofit.code == "no-match"
    # never_fits, without an elastic section: placement's own answer, as it is
    snap = Snapshot(now=T0, queue=(), slices=MappingProxyType({s["id"]: s for s in pool}),
                    holders=())  # fmt: skip
    assert never_fits(snap, snap_request) == nofit


# -- the closed set -----------------------------------------------------------------------


def test_a_code_outside_the_closed_set_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown no-fit code"):
        NoFit("nothing-fits", False)
    assert len(explain.CODES) == 18 and all(c == c.lower() and " " not in c for c in explain.CODES)


def test_equal_reasons_are_the_same_answer() -> None:
    one = NoFit(
        "nothing-free", False, {"want": "w", "free": 0, "total": 1, "taken": (("held", 1),)}
    )
    two = NoFit(
        "nothing-free", False, {"want": "w", "free": 0, "total": 1, "taken": (("held", 1),)}
    )
    assert one.reason  # read on one only: the words read or not do not tell them apart
    assert one == two and one != dataclasses.replace(two, never=True)
    drained = {"want": "w", "free": 0, "total": 1, "taken": (("drained", 1),)}
    assert one != NoFit("nothing-free", False, drained)  # other words: another answer
    assert one != one.wrap("victims-stopping") and one.wrap("hosts-limited").inner is one
    quota = {"team": "T", "host": "a", "model": "m"}
    assert QuotaWait("quota-off-scope", False, quota) != NoFit("quota-off-scope", False, quota)
