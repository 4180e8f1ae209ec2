"""Merges across passes: same-node work that needs more whole cards than one pass may
re-cut (max-cards-per-pass) gets them over several passes, and then runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.policy.model import ElasticPolicy, ElasticRule
from gpupoolctl.sched import JobRequest, PoolView, QueueEntry, schedule_pass
from gpupoolctl.sched.cards import cards_of
from gpupoolctl.sched.elastic import ElasticInputs, recut_reach
from tests.property.test_elastic_properties import base_slices
from tests.unit.test_sched_clearing import HOST, cut_node

T0 = datetime(2025, 6, 1, 22, 0, tzinfo=UTC)
MIN_IDLE = timedelta(minutes=5)


def whole_cards(name: str, gpus: int) -> QueueEntry:
    """A same-node job of `gpus` whole cards that has waited ten minutes."""
    return QueueEntry(
        id=name,
        priority=10,
        seq=1,
        enqueued=T0 - timedelta(minutes=10),
        request=JobRequest(priority=10, gpus=gpus, profile="gpu", same_node=True),
        job=f"j-{name}",
    )


BIG = whole_cards("big", 8)


def inputs(slices: list[dict[str, Any]], changed: dict[str, datetime], per_pass: int = 4):
    policy = ElasticPolicy(
        enabled=True,
        rules=(ElasticRule(line=1, profiles=("1g.10gb", "3g.40gb")),),
        min_idle_s=MIN_IDLE.total_seconds(),
        max_cards_per_pass=per_pass,
        batch_window_s=0,
    )
    return ElasticInputs(policy=policy, cards=cards_of(slices), changed=changed)


def made(slices: list[dict[str, Any]], result: Any) -> list[dict[str, Any]]:
    """The slices once the pass's re-cuts are done (as the node reports them)."""
    cut = {r.card.key for r in result.recuts}
    kept = [s for s in slices if f"{s['host']}/gpu{s['gpu']}" not in cut]
    return kept + [s for r in result.recuts for s in r.slices()]


def test_an_eight_card_job_is_merged_for_over_two_passes_and_then_placed():
    slices = cut_node()  # eight idle cards, each cut into 7 x 1g.10gb
    long_ago = {f"{HOST}/gpu{g}": T0 - timedelta(hours=1) for g in range(8)}

    first = schedule_pass([BIG], PoolView(slices), T0, elastic=inputs(slices, long_ago))
    assert first.placed == []
    assert len(first.recuts) == 4  # the pass's budget, not nothing
    assert all(r.after == "whole card" and r.jobs == ("j-big",) for r in first.recuts)
    assert "4 of the 8 merges" in first.recuts[0].reason

    slices = made(slices, first)
    changed = {**long_ago, **{r.card.key: T0 + timedelta(minutes=1) for r in first.recuts}}
    at = T0 + timedelta(minutes=2)  # the merged cards are idle under min-idle: not re-cut
    second = schedule_pass([BIG], PoolView(slices), at, elastic=inputs(slices, changed))
    assert second.placed == []
    done = {r.card.key for r in first.recuts}
    assert len(second.recuts) == 4 and not done & {r.card.key for r in second.recuts}
    assert "4 of the" not in second.recuts[0].reason  # these are all it still needs

    slices = made(slices, second)
    third = schedule_pass([BIG], PoolView(slices), at + timedelta(minutes=1))
    assert [e.id for e, _ in third.placed] == ["big"]
    assert len(third.placed[0][1].slices) == 8


def test_a_job_no_host_could_ever_serve_gets_no_partial_merge():
    slices = cut_node()
    nine = whole_cards("nine", 9)
    long_ago = {f"{HOST}/gpu{g}": T0 - timedelta(hours=1) for g in range(8)}
    result = schedule_pass([nine], PoolView(slices), T0, elastic=inputs(slices, long_ago))
    assert result.recuts == []  # eight cards can never hold nine GPUs: nothing is merged


def test_partial_merges_only_where_the_idle_cards_could_serve_it_all():
    slices = cut_node()
    long_ago = {f"{HOST}/gpu{g}": T0 - timedelta(hours=1) for g in range(8)}
    # Two of the node's cards are busy: six cards could never serve eight GPUs.
    from gpupoolctl.sched import Holder

    busy = [next(s["id"] for s in slices if s["gpu"] == g) for g in (0, 1)]
    holds = [Holder(alloc=f"a{n}", slices=(sid,)) for n, sid in enumerate(busy)]
    result = schedule_pass(
        [BIG], PoolView(slices, holds), T0, elastic=inputs(slices, long_ago, per_pass=2)
    )
    assert result.recuts == []
    # Six GPUs instead: the six idle cards, two per pass.
    six = whole_cards("six", 6)
    result = schedule_pass(
        [six], PoolView(slices, holds), T0, elastic=inputs(slices, long_ago, per_pass=2)
    )
    assert sorted(r.card.key for r in result.recuts) == [f"{HOST}/gpu2", f"{HOST}/gpu3"]
    assert "2 of the 6 merges" in result.recuts[0].reason


def test_same_node_work_no_node_could_ever_hold_is_refused_not_left_waiting():
    """With elastic re-cuts, work that fits no slice today waits for a re-cut, but only if
    a re-cut could serve all of it: a same-node job must fit one node's cards re-cut (a
    DGX node: 8 whole cards, or 56 x 1g.10gb), else it is refused as never fitting."""
    slices = whole_node()
    long_ago = {f"{HOST}/gpu{g}": T0 - timedelta(hours=1) for g in range(8)}
    policy = inputs(slices, long_ago)

    def outcome(gpus: int, **request: Any) -> str:
        entry = QueueEntry(
            id="e",
            priority=10,
            seq=1,
            enqueued=T0 - timedelta(minutes=10),
            request=JobRequest(priority=10, gpus=gpus, same_node=True, **request),
        )
        result = schedule_pass([entry], PoolView(slices), T0, elastic=policy)
        if result.never:
            return "never"
        return "placed" if result.placed else "waits"

    assert outcome(8, profile="gpu") == "placed"
    assert outcome(9, profile="gpu") == "never"
    small = {"memory_mib": 8 * 1024}
    assert outcome(56, **small) == "waits"  # every card cut into 7 x 1g.10gb
    assert outcome(57, **small) == "never"


def whole_node() -> list[dict[str, Any]]:
    """The bundled pool's sg-dgx01 with every card whole."""
    from tests.property.test_elastic_properties import base_slices

    return [dict(s) for s in base_slices() if s["host"] == HOST]


@given(st.integers(2, 80))
def test_same_island_work_could_ever_be_served_only_within_what_the_island_holds_re_cut(
    gpus: int,
) -> None:
    # sg-dgx01's 8 H100s are one NVLink island: cut into 1g.10gb each holds 7, 56 in all.
    # Whether the island starts cut or whole must not change what it could ever hold.
    cut, whole = cut_node(), [dict(s) for s in base_slices() if s["host"] == HOST]
    assert len({s["island"] for s in cut}) == len({s["island"] for s in whole}) == 1
    request = JobRequest(gpus=gpus, memory_mib=9537, same_island=True)
    for slices in (cut, whole):
        reach = recut_reach(request, inputs(slices, {}), slices=slices)
        assert reach.serves(request) == (gpus <= 56)
        assert (reach.level, reach.most, reach.group) == ("island", 56, f"{HOST}/island0")


def test_the_reason_says_what_a_re_cut_could_give_work_kept_to_one_island() -> None:
    """A refusal quotes the most a re-cut could give one island, not only the pool as it is
    (8 whole cards), and work that fits re-cut says where it waits to go."""
    slices = whole_node()
    too_big = JobRequest(gpus=57, memory_mib=9537, same_island=True)
    fits = JobRequest(gpus=9, memory_mib=9537, same_island=True)
    never = recut_reach(too_big, inputs(slices, {}), slices=slices)
    waits = recut_reach(fits, inputs(slices, {}), slices=slices)
    assert not never.serves(too_big) and waits.serves(fits)
    assert never.why(too_big) == f"nor re-cut (the most on one island: 56 on {HOST}/island0)"
    assert waits.why(fits) == f"re-cut, the most on one island: 56 on {HOST}/island0"
    anywhere = JobRequest(gpus=2, memory_mib=9537)
    assert recut_reach(anywhere, inputs(slices, {})).why(anywhere) == (
        "an idle card re-cut could hold it"
    )
    none = JobRequest(gpus=1, memory_mib=200 * 1024)  # more than any H100 holds
    assert recut_reach(none, inputs(slices, {})).why(none) == ""
