"""Clearing cut cards for a merge (sched.clearing through sched.schedule_pass): a team within
its nominal that waits for whole cards, while every card is cut small and held by another
team's borrowed work, reclaims the holds of the cheapest cards, keeps the emptied cards from
borrowers while it waits, and gets them merged; never below anyone's nominal, never above
its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpupoolctl.policy.model import GPU_MEMORY, ElasticPolicy, ElasticRule, QuotaScope
from gpupoolctl.sched import Holder, JobRequest, PoolView, QueueEntry, schedule_pass
from gpupoolctl.sched.cards import cards_of, predicted_slices
from gpupoolctl.sched.elastic import ElasticInputs
from gpupoolctl.sched.shares import ShareInputs

T0 = datetime(2025, 6, 1, 22, 0, tzinfo=UTC)
GIB = 1024
HOST = "sg-dgx01"
# How many 1g.10gb slices of each card the serving team holds (borrowed): gpu1 and gpu2
# are the cheapest pair to empty (1 + 2 holds), gpu0 has 3, the rest all 7 (full).
HELD = {0: 3, 1: 1, 2: 2, 3: 7, 4: 7, 5: 7, 6: 7, 7: 7}
SINCE = "2025-06-01T20:00:00.000Z"


def cut_node() -> list[dict[str, Any]]:
    """The bundled pool's sg-dgx01, every card cut into 7 x 1g.10gb."""
    from tests.property.test_elastic_properties import base_slices

    whole = [dict(s) for s in base_slices() if s["host"] == HOST]
    out: list[dict[str, Any]] = []
    for card in cards_of(whole).values():
        starts = card.geometry.by_name("1g.10gb").placement_starts  # type: ignore[union-attr]
        out += predicted_slices(card, tuple(("1g.10gb", s) for s in starts))
    return out


def serving_holds(slices: list[dict[str, Any]], *, borrowed: bool = True) -> list[Holder]:
    holds = []
    for gpu, count in HELD.items():
        mine = [s["id"] for s in slices if s["gpu"] == gpu][:count]
        for n, sid in enumerate(mine):
            holds.append(
                Holder(
                    alloc=f"a-{gpu}-{n}",
                    slices=(sid,),
                    job=f"s-{gpu}-{n}",
                    priority=50,
                    team="serve",
                    borrowed=borrowed,
                    since=SINCE,
                )
            )
    return holds


def shares(train_gib: int = 320, serve_gib: int = 0) -> ShareInputs:
    return ShareInputs(
        quotas={
            "train": (QuotaScope(line=1, nominal={GPU_MEMORY: train_gib * GIB}),),
            "serve": (QuotaScope(line=2, nominal={GPU_MEMORY: serve_gib * GIB}),),
        }
    )


def elastic(slices: list[dict[str, Any]], idle_since: datetime | None = None) -> ElasticInputs:
    policy = ElasticPolicy(
        enabled=True,
        rules=(ElasticRule(line=1, profiles=("1g.10gb", "3g.40gb")),),
        min_idle_s=300,
        batch_window_s=0,
    )
    changed = {} if idle_since is None else {f"{HOST}/gpu{g}": idle_since for g in range(8)}
    return ElasticInputs(policy=policy, cards=cards_of(slices), changed=changed)


def entry(name: str, team: str, seq: int, priority: int, **request: Any) -> QueueEntry:
    return QueueEntry(
        id=name,
        priority=priority,
        seq=seq,
        enqueued=T0 - timedelta(minutes=10),
        request=JobRequest(priority=priority, team=team, **request),
        job=f"j-{name}",
    )


TRAIN = entry("train", "train", 1, 10, gpus=2, profile="gpu", same_node=True)
SMALL = entry("small", "serve", 2, 50, memory_mib=8 * GIB)


def test_the_holds_of_the_cheapest_cards_are_reclaimed_for_a_merge():
    slices = cut_node()
    view = PoolView(slices, serving_holds(slices))
    result = schedule_pass(
        [TRAIN], view, T0, preempt=True, shares=shares(), elastic=elastic(slices)
    )
    assert result.reclaim and result.preempt is not None
    entry_, victims = result.preempt
    assert entry_.id == "train"
    assert victims == ["s-1-0", "s-2-0", "s-2-1"]  # gpu1 (1 hold) and gpu2 (2)


def emptied_holds(slices: list[dict[str, Any]]) -> list[Holder]:
    """The serving team's holds with gpu1 and gpu2 emptied and gpu0 full as well: the two
    emptied cards' slices are the only free ones."""
    holds = [h for h in serving_holds(slices) if not h.job.startswith(("s-1-", "s-2-"))]
    holds += [
        Holder(alloc=f"b-{n}", slices=(s["id"],), job=f"s-0-x{n}", priority=50, team="serve",
               borrowed=True, since=SINCE)
        for n, s in enumerate(x for x in slices if x["gpu"] == 0)
        if n >= HELD[0]
    ]  # fmt: skip
    return holds


def test_emptied_cards_are_kept_from_borrowers_and_merged_for_the_waiting_work():
    slices = cut_node()
    holds = emptied_holds(slices)
    inputs = elastic(slices, idle_since=T0 - timedelta(minutes=1))  # emptied a minute ago
    queue = [TRAIN, SMALL]
    result = schedule_pass(queue, PoolView(slices, holds), T0, preempt=True, shares=shares(),
                           elastic=inputs)  # fmt: skip
    # The small job would borrow, and the only free slices are on the emptied cards: it
    # waits; the training job waits for their merge (min-idle has not passed).
    assert result.placed == [] and result.preempt is None and result.recuts == []
    assert result.kept_for == {f"{HOST}/gpu1": "train", f"{HOST}/gpu2": "train"}
    why = dict((e.id, n.reason) for e, n in result.waiting)
    assert "gpu1, sg-dgx01/gpu2 kept to be made whole for it" in why["train"]
    # Without teams' clearing (the same pool, no training work), the small job takes them.
    alone = schedule_pass([SMALL], PoolView(slices, holds), T0, shares=shares(), elastic=inputs)
    assert [e.id for e, _ in alone.placed] == ["small"]

    # Once min-idle has passed, the pass merges exactly those two cards for it.
    later = elastic(slices, idle_since=T0 - timedelta(minutes=6))
    result = schedule_pass(queue, PoolView(slices, holds), T0, preempt=True, shares=shares(),
                           elastic=later)  # fmt: skip
    merged = sorted(r.card.key for r in result.recuts)
    assert merged == [f"{HOST}/gpu1", f"{HOST}/gpu2"]
    assert all(r.after == "whole card" and r.jobs == ("j-train",) for r in result.recuts)


def test_no_clearing_below_anyones_nominal_or_above_ones_own():
    slices = cut_node()
    # The serving team's holds were placed within its nominal (not borrowed): reclaim may
    # not stop them, so nothing is reclaimed and no card is kept.
    within = PoolView(slices, serving_holds(slices, borrowed=False))
    result = schedule_pass([TRAIN], within, T0, preempt=True, shares=shares(),
                           elastic=elastic(slices))  # fmt: skip
    assert result.preempt is None and result.kept_for == {}
    # Two whole cards (160 GiB) would take training above a 100 GiB nominal: no clearing.
    result = schedule_pass([TRAIN], PoolView(slices, serving_holds(slices)), T0, preempt=True,
                           shares=shares(train_gib=100), elastic=elastic(slices))  # fmt: skip
    assert result.preempt is None and result.kept_for == {}


def test_work_that_fits_a_cut_card_as_it_is_clears_nothing():
    slices = cut_node()
    small_train = entry("lora", "train", 1, 10, memory_mib=8 * GIB)
    holds = serving_holds(slices)
    result = schedule_pass([small_train], PoolView(slices, holds), T0, preempt=True,
                           shares=shares(), elastic=elastic(slices))  # fmt: skip
    assert [e.id for e, _ in result.placed] == ["lora"] and result.kept_for == {}


def test_two_waiting_jobs_never_plan_the_same_room_in_the_teams_nominal():
    slices = cut_node()
    second = entry("train2", "train", 2, 10, gpus=2, profile="gpu", same_node=True)
    holds = serving_holds(slices)
    roomy = schedule_pass([TRAIN, second], PoolView(slices, holds), T0, shares=shares(),
                          elastic=elastic(slices))  # fmt: skip
    assert sorted(set(roomy.kept_for.values())) == ["train", "train2"]  # 4 cards in 320 GiB
    assert len(roomy.kept_for) == 4
    tight = schedule_pass([TRAIN, second], PoolView(slices, holds), T0,
                          shares=shares(train_gib=200), elastic=elastic(slices))  # fmt: skip
    assert set(tight.kept_for.values()) == {"train"} and len(tight.kept_for) == 2
    # ...and a plan takes nothing from the team's own later work within its nominal: it is
    # neither deferred as borrowing nor kept off the planned cards.
    lora = entry("lora", "train", 3, 10, memory_mib=8 * GIB)
    placed = schedule_pass([TRAIN, lora], PoolView(slices, holds), T0,
                           shares=shares(train_gib=200), elastic=elastic(slices))  # fmt: skip
    assert [e.id for e, _ in placed.placed] == ["lora"] and not placed.borrowed


def test_a_whole_card_the_job_counts_on_is_kept_too():
    """A two-card job on one node with one whole card free already: the plan empties one cut
    card and keeps the whole one as well, so no re-cut for borrowing work cuts it while the
    merge waits (the flapping bench/shares found: one card merged, the other cut again)."""
    from tests.property.test_elastic_properties import base_slices

    slices = [s for s in cut_node() if s["gpu"] != 0]
    slices += [dict(s) for s in base_slices() if s["id"] == f"{HOST}/gpu0"]
    holds = [h for h in serving_holds(slices) if not h.job.startswith("s-0-")]
    holds += [
        Holder(
            alloc=f"b-{n}",
            slices=(s["id"],),
            job=f"s-x{n}",
            priority=50,
            team="serve",
            borrowed=True,
            since=SINCE,
        )
        for n, s in enumerate(
            x
            for x in slices
            if x["gpu"] in (1, 2) and x["id"] not in {sid for h in holds for sid in h.slices}
        )
    ]  # fmt: skip — every cut card full: the small job can only go to gpu0, cut
    long_idle = elastic(slices, idle_since=T0 - timedelta(hours=1))
    result = schedule_pass([TRAIN, SMALL], PoolView(slices, holds), T0, shares=shares(),
                           elastic=long_idle)  # fmt: skip
    assert result.kept_for[f"{HOST}/gpu0"] == "train"
    assert f"{HOST}/gpu0" not in {r.card.key for r in result.recuts}
    assert result.placed == []
    # The control: without the training job the idle whole card is cut for the small one.
    alone = schedule_pass([SMALL], PoolView(slices, holds), T0, shares=shares(),
                          elastic=long_idle)  # fmt: skip
    assert f"{HOST}/gpu0" in {r.card.key for r in alone.recuts}


def test_cards_an_aging_reservation_keeps_are_not_recut_for_smaller_work():
    """A starving entry (aged to the cap) reserves the free slices that could serve it
    against smaller work in the pass; a re-cut for that smaller work must not undo it by
    cutting the reserved cards (bench/shares: two whole cards flapped between whole and
    2 x 3g.40gb all night, 513 re-cuts on one day). No teams needed."""
    from tests.property.test_elastic_properties import base_slices

    whole = [dict(s) for s in base_slices() if s["host"] == HOST]
    busy = [Holder(alloc=f"a-{g}", slices=(f"{HOST}/gpu{g}",), job=f"b-{g}") for g in range(6)]
    starving = QueueEntry(
        id="big",
        priority=10,
        seq=0,
        enqueued=T0 - timedelta(days=1),  # aged to the cap
        request=JobRequest(gpus=3, profile="gpu", same_node=True, priority=10),
        job="j-big",
    )
    small = QueueEntry(
        id="small", priority=50, seq=1, enqueued=T0 - timedelta(minutes=10),
        request=JobRequest(memory_mib=8 * GIB, priority=50), job="j-small",
    )  # fmt: skip
    policy = elastic(whole, idle_since=T0 - timedelta(hours=1))
    result = schedule_pass([starving, small], PoolView(whole, busy), T0, elastic=policy)
    assert result.reserved_for == ["big"] and result.placed == []
    assert result.recuts == []  # gpu6 and gpu7 stay whole for the starving job
    # The control: not yet starving, the small job gets an idle card cut for it.
    young = QueueEntry(**{**starving.__dict__, "enqueued": T0 - timedelta(minutes=5)})
    result = schedule_pass([young, small], PoolView(whole, busy), T0, elastic=policy)
    assert result.reserved_for == [] and [r.jobs for r in result.recuts] == [("j-small",)]


def test_the_whole_card_counted_on_counts_against_the_nominal_too():
    """A two-card job with one card whole and free already needs one merge, but holds two
    cards: a nominal of 120 GiB (one card and a half) admits no plan for it."""
    from tests.property.test_elastic_properties import base_slices

    slices = [s for s in cut_node() if s["gpu"] != 0]
    slices += [dict(s) for s in base_slices() if s["id"] == f"{HOST}/gpu0"]
    holds = [h for h in serving_holds(slices) if not h.job.startswith("s-0-")]
    roomy = schedule_pass([TRAIN], PoolView(slices, holds), T0, preempt=True, shares=shares(),
                          elastic=elastic(slices))  # fmt: skip
    assert roomy.reclaim and roomy.kept_for == {}  # the pass stopped at the reclaim
    tight = schedule_pass([TRAIN], PoolView(slices, holds), T0, preempt=True,
                          shares=shares(train_gib=120), elastic=elastic(slices))  # fmt: skip
    assert tight.preempt is None and tight.kept_for == {}


def test_a_job_of_more_cards_than_one_pass_merges_is_cleared_and_merged_over_passes():
    """Eight cards for an eight-GPU job, four merges a pass: the plan reclaims the borrowed
    work on all eight cut cards at once (it used to plan none: more than one pass could
    merge), then the elastic pass merges four, the next pass the other four, and the job
    runs."""
    from tests.property.test_elastic_properties import apply_recuts

    slices = cut_node()
    big = entry("big", "train", 1, 10, gpus=8, profile="gpu", same_node=True)
    holds = serving_holds(slices)
    result = schedule_pass([big], PoolView(slices, holds), T0, preempt=True,
                           shares=shares(train_gib=640), elastic=elastic(slices))  # fmt: skip
    assert result.reclaim and result.preempt is not None
    assert len(result.preempt[1]) == sum(HELD.values())  # every hold on the node
    # Too little nominal for eight cards: nothing is reclaimed for it.
    short = schedule_pass([big], PoolView(slices, holds), T0, preempt=True,
                          shares=shares(train_gib=600), elastic=elastic(slices))  # fmt: skip
    assert short.preempt is None

    current, at = slices, T0 + timedelta(minutes=10)
    merged: list[str] = []
    for _ in range(2):  # victims gone, cards idle past min-idle: four merges a pass
        step = schedule_pass([big], PoolView(current), at, shares=shares(train_gib=640),
                             elastic=elastic(current, idle_since=T0))  # fmt: skip
        assert step.placed == [] and len(step.recuts) == 4
        merged += [r.card.key for r in step.recuts]
        current = apply_recuts(current, step.recuts)
    assert sorted(merged) == [f"{HOST}/gpu{g}" for g in range(8)]
    last = schedule_pass([big], PoolView(current), at, shares=shares(train_gib=640),
                         elastic=elastic(current, idle_since=T0))  # fmt: skip
    assert [e.id for e, _ in last.placed] == ["big"]
