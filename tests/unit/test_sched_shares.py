"""Teams' shares in the scheduling pass (sched.shares through sched.schedule_pass), on small
hand-built pools: limits, scopes, borrowing, lending limits, fair-share order, reclaim, and
priority preemption inside a team."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gpupoolctl.policy.model import CARDS, GPU_MEMORY, ElasticPolicy, ElasticRule, QuotaScope
from gpupoolctl.sched import Holder, JobRequest, PoolView, QueueEntry, schedule_pass
from gpupoolctl.sched.cards import cards_of
from gpupoolctl.sched.elastic import ElasticInputs
from gpupoolctl.sched.shares import QuotaWait, ShareInputs

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
GIB = 1024
CARD_GIB = 80


def card(host: str, gpu: int, site: str = "s1", gib: int = CARD_GIB) -> dict[str, Any]:
    return {
        "id": f"{host}/gpu{gpu}",
        "host": host,
        "gpu": gpu,
        "kind": "gpu",
        "profile": None,
        "memory_mib": gib * GIB,
        "island": f"{host}/island0",
        "site": site,
        "vendor": "nvidia",
        "model": "NVIDIA H100 80GB HBM3",
    }


def mig(host: str, gpu: int, index: int, site: str = "s1") -> dict[str, Any]:
    """A 3g.40gb slice of card `gpu`."""
    return {
        **card(host, gpu, site),
        "id": f"{host}/gpu{gpu}/mig{index}",
        "kind": "mig",
        "profile": "3g.40gb",
        "memory_mib": 40 * GIB,
    }


def scope(
    nominal_gib: int,
    borrow_gib: int | None = None,
    lend_gib: int | None = None,
    site: str | None = None,
) -> QuotaScope:
    return QuotaScope(
        line=1,
        site=site,
        nominal={GPU_MEMORY: nominal_gib * GIB},
        borrowing_limit=None if borrow_gib is None else {GPU_MEMORY: borrow_gib * GIB},
        lending_limit=None if lend_gib is None else {GPU_MEMORY: lend_gib * GIB},
    )


def entry(
    name: str, team: str | None, seq: int, priority: int = 50, minutes: float = 0, **request: Any
) -> QueueEntry:
    return QueueEntry(
        id=name,
        priority=priority,
        seq=seq,
        enqueued=T0 - timedelta(minutes=minutes),
        request=JobRequest(priority=priority, team=team, **request),
        job=f"j-{name}",
    )


def hold(
    name: str,
    slices: tuple[str, ...],
    team: str | None,
    *,
    priority: int = 50,
    preemptible: bool = False,
    borrowed: bool = False,
    since: str = "2025-06-01T10:00:00.000Z",
) -> Holder:
    return Holder(
        alloc=name,
        slices=slices,
        job=f"j-{name}",
        priority=priority,
        preemptible=preemptible,
        team=team,
        borrowed=borrowed,
        since=since,
    )


def placed_ids(result: Any) -> list[str]:
    return [e.id for e, _ in result.placed]


# -- limits -------------------------------------------------------------------------------


def test_a_team_at_its_limit_waits_for_its_quota_and_preempts_nothing():
    pool = [card("a", g) for g in range(3)]
    holds = [
        hold("t-low", ("a/gpu0",), "T", priority=10, preemptible=True),
        hold("t-other", ("a/gpu1",), "T", borrowed=True),
    ]
    shares = ShareInputs(quotas={"T": (scope(80, borrow_gib=80),)})
    queue = [entry("q", "T", 1, priority=90, profile="gpu")]
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert placed_ids(result) == [] and result.preempt is None and not result.reclaim
    ((waiting, why),) = result.waiting
    assert waiting.id == "q" and isinstance(why, QuotaWait) and not why.never
    assert why.reason == "team T at its limit (160 of 160 GiB)"
    # the control: one card less held, and it is placed (borrowing)
    result = schedule_pass(queue, PoolView(pool, holds[:1]), T0, preempt=True, shares=shares)
    assert placed_ids(result) == ["q"] and result.borrowed == {"q"}


def test_a_team_at_its_limit_on_a_full_pool_waits_for_its_quota_too():
    """No free slice either: still the team's quota it waits for (no victims, no re-cut)."""
    pool = [card("a", g) for g in range(3)]
    holds = [
        hold("t-low", ("a/gpu0",), "T", priority=10, preemptible=True),
        hold("t-other", ("a/gpu1",), "T", borrowed=True),
        hold("u", ("a/gpu2",), "U"),
    ]
    shares = ShareInputs(quotas={"T": (scope(80, borrow_gib=80),), "U": (scope(160),)})
    queue = [entry("q", "T", 1, priority=90, profile="gpu")]
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert result.preempt is None and placed_ids(result) == []
    ((_, why),) = result.waiting
    assert isinstance(why, QuotaWait) and not why.never
    assert why.reason == "team T at its limit (160 of 160 GiB)"


def _dgx(held: int) -> tuple[list[dict[str, Any]], list[Holder], ElasticInputs]:
    from tests.property.test_elastic_properties import base_slices

    slices = [dict(s) for s in base_slices() if s["host"] == "sg-dgx01"]
    holds = [hold(f"t-{g}", (f"sg-dgx01/gpu{g}",), "T") for g in range(held)]
    policy = ElasticPolicy(
        enabled=True, rules=(ElasticRule(line=1),), min_idle_s=0, batch_window_s=0
    )
    return slices, holds, ElasticInputs(policy=policy, cards=cards_of(slices))


def test_a_team_at_its_limit_gets_no_recut():
    slices, holds, inputs = _dgx(held=6)
    memory = sum(s["memory_mib"] for s in slices if s["id"] in {h.slices[0] for h in holds})
    queue = [entry("small", "T", 1, memory_mib=10 * GIB)]
    # without teams the small request has an idle whole card cut for it
    assert schedule_pass(queue, PoolView(slices, holds), T0, elastic=inputs).recuts
    at_limit = QuotaScope(line=1, nominal={GPU_MEMORY: memory}, borrowing_limit={GPU_MEMORY: 0})
    shares = ShareInputs(quotas={"T": (at_limit,)})
    result = schedule_pass(queue, PoolView(slices, holds), T0, elastic=inputs, shares=shares)
    assert result.recuts == [] and placed_ids(result) == []
    ((_, why),) = result.waiting
    assert isinstance(why, QuotaWait) and why.reason.startswith("team T at its limit (")
    # room for one more card: the re-cut is made
    roomy = ShareInputs(quotas={"T": (scope(memory // GIB + 80),)})
    assert schedule_pass(queue, PoolView(slices, holds), T0, elastic=inputs, shares=roomy).recuts


def test_a_cards_limit_counts_whole_cards_only():
    pool = [card("a", 0), mig("a", 1, 0), mig("a", 1, 1), card("a", 2)]
    cards_only = QuotaScope(line=1, nominal={CARDS: 1}, borrowing_limit={CARDS: 0})
    shares = ShareInputs(quotas={"T": (cards_only,)})
    queue = [
        entry("c1", "T", 1, profile="gpu"),
        entry("c2", "T", 2, profile="gpu"),
        entry("m1", "T", 3, profile="3g.40gb"),
        entry("m2", "T", 4, profile="3g.40gb"),
    ]
    result = schedule_pass(queue, PoolView(pool), T0, shares=shares)
    assert sorted(placed_ids(result)) == ["c1", "m1", "m2"]
    ((waiting, why),) = result.waiting
    assert waiting.id == "c2" and why.reason == "team T at its limit (1 of 1 cards)"


# -- scopes -------------------------------------------------------------------------------


def test_a_site_scoped_team_is_placed_only_on_its_site():
    pool = [card("a", 0, "s1"), card("a", 1, "s1"), card("b", 0, "s2"), card("b", 1, "s2")]
    shares = ShareInputs(quotas={"T": (scope(320, site="s2"),)})
    queue = [entry(f"q{i}", "T", i, profile="gpu") for i in range(3)]
    view = PoolView(pool)
    result = schedule_pass(queue, view, T0, shares=shares)
    assert placed_ids(result) == ["q0", "q1"]
    assert {s for _, p in result.placed for s in p.slices} == {"b/gpu0", "b/gpu1"}
    ((waiting, why),) = result.waiting
    assert waiting.id == "q2" and not why.never  # site s1's cards stay free: not its own
    assert set(view.free) == {"a/gpu0", "a/gpu1"}


def test_a_team_with_no_scope_on_any_candidate_never_fits():
    pool = [card("a", 0, "s1"), card("b", 0, "s2")]
    shares = ShareInputs(quotas={"T": (scope(320, site="s3"),)})
    result = schedule_pass([entry("q", "T", 1)], PoolView(pool), T0, shares=shares)
    ((never, why),) = result.never
    assert never.id == "q" and why.never and "team T has no quota" in why.reason
    assert result.placed == [] and result.waiting == []


def test_a_site_scoped_team_reclaims_on_its_site_while_another_site_has_room():
    """A does not fit where its quota lets it go (site s1, full of B's borrowed work); a free
    card on site s2 is no quota reason to wait: A is within nominal and reclaims on s1."""
    pool = [card("a", 0, "s1"), card("a", 1, "s1"), card("b", 0, "s2")]
    holds = [
        hold("b-0", ("a/gpu0",), "B"),
        hold("b-1", ("a/gpu1",), "B", borrowed=True),
    ]
    shares = ShareInputs(quotas={"A": (scope(160, site="s1"),), "B": (scope(80),)})
    queue = [entry("q", "A", 1, profile="gpu")]
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert result.preempt is not None and result.reclaim
    assert result.preempt[0].id == "q" and result.preempt[1] == ["j-b-1"]


# -- borrowing and lending ----------------------------------------------------------------


def test_borrowing_above_nominal_up_to_the_borrowing_limit():
    pool = [card("a", g) for g in range(4)]
    shares = ShareInputs(quotas={"T": (scope(80, borrow_gib=80),)})
    queue = [entry(f"q{i}", "T", i, profile="gpu") for i in range(3)]
    view = PoolView(pool)
    result = schedule_pass(queue, view, T0, shares=shares)
    assert placed_ids(result) == ["q0", "q1"]
    assert result.borrowed == {"q1"}
    assert view.holds["q1"].borrowed and not view.holds["q0"].borrowed
    ((waiting, why),) = result.waiting
    assert waiting.id == "q2" and isinstance(why, QuotaWait)
    assert why.reason == "team T at its limit (160 of 160 GiB)"


def test_no_borrowing_limit_borrows_as_far_as_the_pool_allows():
    pool = [card("a", g) for g in range(4)]
    shares = ShareInputs(quotas={"T": (scope(80),)})
    queue = [entry(f"q{i}", "T", i, profile="gpu") for i in range(4)]
    result = schedule_pass(queue, PoolView(pool), T0, shares=shares)
    assert placed_ids(result) == ["q0", "q1", "q2", "q3"]
    assert result.borrowed == {"q1", "q2", "q3"}


def test_a_lending_limit_keeps_the_unlent_nominal_free_for_its_team():
    pool = [card("a", g) for g in range(4)]
    # U keeps 160 - 80 = 80 GiB (one card) of its unused nominal for itself
    shares = ShareInputs(quotas={"T": (scope(80),), "U": (scope(160, lend_gib=80),)})
    queue = [entry(f"t{i}", "T", i, profile="gpu") for i in range(4)]
    view = PoolView(pool)
    result = schedule_pass(queue, view, T0, shares=shares)
    assert placed_ids(result) == ["t0", "t1", "t2"]
    ((waiting, why),) = result.waiting
    assert waiting.id == "t3" and isinstance(why, QuotaWait) and not why.never
    assert "kept for team U (80 GiB it does not lend)" in why.reason
    # U gets what it kept
    later = schedule_pass([entry("u", "U", 9, profile="gpu")], view, T0, shares=shares)
    assert placed_ids(later) == ["u"]
    # without the lending limit T borrows the whole pool
    lend_all = ShareInputs(quotas={"T": (scope(80),), "U": (scope(160),)})
    assert len(schedule_pass(queue, PoolView(pool), T0, shares=lend_all).placed) == 4


# -- fair share ---------------------------------------------------------------------------


def test_the_team_with_less_usage_for_its_share_goes_first():
    pool = [card("a", 0)]
    queue = [entry("a", "A", 1, profile="gpu"), entry("b", "B", 2, profile="gpu")]
    quotas = {"A": (scope(80),), "B": (scope(80),)}
    even = ShareInputs(quotas=quotas)
    assert placed_ids(schedule_pass(queue, PoolView(pool), T0, shares=even)) == ["a"]
    used = ShareInputs(quotas=quotas, history={"A": 1000.0, "B": 10.0})
    assert placed_ids(schedule_pass(queue, PoolView(pool), T0, shares=used)) == ["b"]
    # usage is over the share: B used less but has a quarter of A's share
    weighted = ShareInputs(
        quotas={"A": (scope(320),), "B": (scope(80),)}, history={"A": 300.0, "B": 100.0}
    )
    assert placed_ids(schedule_pass(queue, PoolView(pool), T0, shares=weighted)) == ["a"]
    # what a team holds now counts too
    holds = [hold("b-run", ("a/gpu1",), "B")]
    two = [card("a", 0), card("a", 1)]
    result = schedule_pass(queue, PoolView(two, holds), T0, shares=even)
    assert placed_ids(result) == ["a"]


def test_priority_still_comes_before_fair_share():
    pool = [card("a", 0)]
    queue = [entry("a", "A", 1, priority=90, profile="gpu"), entry("b", "B", 2, profile="gpu")]
    shares = ShareInputs(quotas={"A": (scope(80),), "B": (scope(80),)}, history={"A": 1e9})
    assert placed_ids(schedule_pass(queue, PoolView(pool), T0, shares=shares)) == ["a"]


def test_one_teams_burst_interleaves_with_the_others_work():
    pool = [card("a", g) for g in range(4)]
    queue = [entry(f"a{i}", "A", i, profile="gpu") for i in range(4)]
    queue += [entry(f"b{i}", "B", 10 + i, profile="gpu") for i in range(2)]
    shares = ShareInputs(quotas={"A": (scope(160),), "B": (scope(160),)})
    result = schedule_pass(queue, PoolView(pool), T0, shares=shares)
    assert placed_ids(result) == ["a0", "b0", "a1", "b1"]
    without = schedule_pass(queue, PoolView(pool), T0)
    assert placed_ids(without) == ["a0", "a1", "a2", "a3"]


# -- reclaim ------------------------------------------------------------------------------


def _reclaim_case() -> tuple[list[dict[str, Any]], list[Holder]]:
    pool = [card("a", g) for g in range(4)]
    holds = [
        hold("b-nominal", ("a/gpu0",), "B", since="2025-06-01T09:00:00.000Z"),
        hold("b-old", ("a/gpu1",), "B", borrowed=True, since="2025-06-01T10:00:00.000Z"),
        hold("b-new", ("a/gpu2",), "B", borrowed=True, since="2025-06-01T11:00:00.000Z"),
        hold(
            "b-high",
            ("a/gpu3",),
            "B",
            priority=90,
            borrowed=True,
            since="2025-06-01T11:30:00.000Z",
        ),
    ]
    return pool, holds


def test_reclaim_stops_the_newest_lowest_priority_borrowed_job_of_a_team_above_nominal():
    pool, holds = _reclaim_case()
    shares = ShareInputs(quotas={"A": (scope(160),), "B": (scope(80),)})
    queue = [entry("q", "A", 1, priority=10, profile="gpu")]  # lower priority than all of B
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert result.reclaim and result.preempt is not None
    assert result.preempt[0].id == "q" and result.preempt[1] == ["j-b-new"]
    # reclaim is a preemption: none without `preempt`, none when the inputs turn it off
    assert schedule_pass(queue, PoolView(pool, holds), T0, shares=shares).preempt is None
    off = ShareInputs(quotas=shares.quotas, reclaim=False)
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=off)
    assert result.preempt is None and not result.reclaim


def test_reclaim_is_only_for_a_team_within_its_nominal():
    pool, holds = _reclaim_case()
    holds = holds[1:]  # a card free: A takes it, and then is at its nominal
    shares = ShareInputs(quotas={"A": (scope(80),), "B": (scope(80),)})
    queue = [entry("q1", "A", 1, profile="gpu"), entry("q2", "A", 2, profile="gpu")]
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert placed_ids(result) == ["q1"] and result.preempt is None and not result.reclaim


def test_work_placed_within_nominal_and_not_preemptible_is_never_reclaimed():
    pool = [card("a", g) for g in range(2)]
    # B is above its (new, smaller) nominal, but with work it placed within its nominal then
    holds = [hold("b-0", ("a/gpu0",), "B"), hold("b-1", ("a/gpu1",), "B")]
    shares = ShareInputs(quotas={"A": (scope(160),), "B": (scope(40),)})
    queue = [entry("q", "A", 1, priority=90, profile="gpu")]
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert result.preempt is None and not result.reclaim
    # preemptible work above nominal is reclaimed
    holds[1] = hold("b-1", ("a/gpu1",), "B", preemptible=True)
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert result.reclaim and result.preempt is not None and result.preempt[1] == ["j-b-1"]


def test_reclaim_never_takes_a_team_below_its_nominal():
    pool = [mig("a", 0, 0), mig("a", 0, 1), mig("a", 1, 0), mig("a", 1, 1)]
    holds = [
        hold("b-0", ("a/gpu0/mig0",), "B"),
        hold("b-1", ("a/gpu0/mig1",), "B", borrowed=True, preemptible=True),
        hold("x-0", ("a/gpu1/mig0",), None),
        hold("x-1", ("a/gpu1/mig1",), None),
    ]
    queue = [entry("q", "A", 1, profile="3g.40gb")]
    # B holds 80 GiB, 10 above its nominal: its 40 GiB borrowed job is not reclaimed
    shares = ShareInputs(quotas={"A": (scope(80),), "B": (scope(70),)})
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert result.preempt is None and not result.reclaim
    # 40 GiB above: it is
    shares = ShareInputs(quotas={"A": (scope(80),), "B": (scope(40),)})
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert result.reclaim and result.preempt is not None and result.preempt[1] == ["j-b-1"]


def test_reclaim_looks_past_borrowed_work_that_would_not_help():
    """B's newest borrowed job is on a slice the request cannot use: it must not use up
    what B may give back, so that the card that helps is reclaimed."""
    pool = [card("a", 0), card("a", 1), mig("a", 2, 0), mig("a", 2, 1)]
    holds = [
        hold("b-nominal", ("a/gpu0",), "B", since="2025-06-01T09:00:00.000Z"),
        hold("b-card", ("a/gpu1",), "B", borrowed=True, since="2025-06-01T10:00:00.000Z"),
        hold("b-mig", ("a/gpu2/mig0",), "B", borrowed=True, since="2025-06-01T11:00:00.000Z"),
        hold("x", ("a/gpu2/mig1",), None),
    ]
    # B holds 200 GiB, 80 above its nominal: the card alone may go, the MIG job alone too
    shares = ShareInputs(quotas={"A": (scope(160),), "B": (scope(120),)})
    queue = [entry("q", "A", 1, profile="gpu")]
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert result.reclaim and result.preempt is not None and result.preempt[1] == ["j-b-card"]


# -- priority preemption with teams -------------------------------------------------------


def test_priority_preemption_takes_only_victims_of_the_same_team():
    pool = [card("a", 0), card("a", 1)]
    holds = [
        hold("b-low", ("a/gpu0",), "B", priority=10, preemptible=True, since="2025-06-01T11:00"),
        hold("a-low", ("a/gpu1",), "A", priority=10, preemptible=True, since="2025-06-01T10:00"),
    ]
    queue = [entry("q", "A", 1, priority=90, profile="gpu")]
    # without teams the newest (B's) is the cheapest victim
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True)
    assert result.preempt is not None and result.preempt[1] == ["j-b-low"]
    shares = ShareInputs(quotas={"A": (scope(160),), "B": (scope(160),)})
    result = schedule_pass(queue, PoolView(pool, holds), T0, preempt=True, shares=shares)
    assert result.preempt is not None and result.preempt[1] == ["j-a-low"]
    assert not result.reclaim
    # B's own high-priority work finds no victim of its team: it waits
    queue_b = [entry("qb", "B", 1, priority=90, profile="gpu")]
    holds_b = [holds[1], hold("b-run", ("a/gpu0",), "B", priority=90)]
    result = schedule_pass(queue_b, PoolView(pool, holds_b), T0, preempt=True, shares=shares)
    assert result.preempt is None and [e.id for e, _ in result.waiting] == ["qb"]


# -- without shares -----------------------------------------------------------------------


def _decided(result: Any) -> dict[str, Any]:
    def ids(pairs: list[tuple[QueueEntry, Any]]) -> list[tuple[str, Any]]:
        return [(e.id, getattr(x, "slices", getattr(x, "reason", None))) for e, x in pairs]

    return {
        "placed": ids(result.placed),
        "waiting": ids(result.waiting),
        "never": ids(result.never),
        "reserved_for": result.reserved_for,
        "preempt": (result.preempt[0].id, result.preempt[1]) if result.preempt else None,
        "reclaim": result.reclaim,
        "borrowed": result.borrowed,
        "recuts": result.recuts,
    }


def _random_case(rng: random.Random) -> tuple[list[dict[str, Any]], list[Holder], list]:
    pool: list[dict[str, Any]] = []
    for h in range(rng.randint(1, 3)):
        site = rng.choice(["s1", "s2"])
        for g in range(rng.randint(1, 3)):
            if rng.random() < 0.4:
                pool += [mig(f"h{h}", g, i, site) for i in range(2)]
            else:
                pool.append(card(f"h{h}", g, site))
    ids = [s["id"] for s in pool]
    rng.shuffle(ids)
    holds = [
        hold(
            f"h-{i}",
            (sid,),
            rng.choice(["A", "B", None]),
            priority=rng.choice([10, 50, 90]),
            preemptible=rng.random() < 0.5,
            borrowed=rng.random() < 0.3,
            since=f"2025-06-01T{10 + i:02d}:00:00.000Z",
        )
        for i, sid in enumerate(ids[: rng.randint(0, len(ids))])
    ]
    queue = [
        entry(
            f"q{i}",
            rng.choice(["A", "B", None]),
            i,
            priority=rng.choice([10, 50, 90]),
            minutes=rng.choice([0, 10, 400]),
            gpus=rng.randint(1, 2),
            profile=rng.choice([None, "gpu", "3g.40gb"]),
            preemptible=rng.random() < 0.5,
        )
        for i in range(rng.randint(0, 6))
    ]
    return pool, holds, queue


def test_without_shares_the_pass_decides_as_before():
    """shares=None: the teams that requests and holds name change nothing (the same
    decisions as with no team anywhere, as before teams existed)."""
    rng = random.Random(1234)
    for _ in range(60):
        pool, holds, queue = _random_case(rng)
        no_teams = [replace(h, team=None, borrowed=False) for h in holds]
        plain = [replace(e, request=replace(e.request, team=None)) for e in queue]
        for preempt in (False, True):
            before = schedule_pass(plain, PoolView(pool, no_teams), T0, preempt=preempt)
            now = schedule_pass(queue, PoolView(pool, holds), T0, preempt=preempt, shares=None)
            assert _decided(now) == _decided(before)
            assert not now.reclaim and now.borrowed == set()


def test_what_a_reclaim_freed_goes_to_the_guaranteed_work_not_to_a_higher_priority_borrower():
    """The reclaim livelock: inference holds both cards (one borrowed); training, within its
    nominal, reclaims the borrowed one; on the next pass inference's higher-priority queued
    job must not take the freed card by borrowing again (the pass after would reclaim it
    again, forever): within-nominal work goes first."""
    from datetime import UTC, datetime, timedelta

    from gpupoolctl.policy.model import GPU_MEMORY, QuotaScope
    from gpupoolctl.sched import Holder, JobRequest, PoolView, QueueEntry, schedule_pass
    from gpupoolctl.sched.shares import ShareInputs

    def card(n: int) -> dict:
        return {
            "id": f"h/gpu{n}", "kind": "gpu", "memory_mib": 81920, "island": "h/island0",
            "site": "x", "host": "h", "gpu": n, "vendor": "nvidia", "model": "H100",
        }  # fmt: skip

    now = datetime(2025, 6, 2, 6, tzinfo=UTC)
    scope = QuotaScope(line=0, site="x", nominal={GPU_MEMORY: 81920})
    shares = ShareInputs(quotas={"inference": (scope,), "training": (scope,)})
    view = PoolView([card(0), card(1)])
    view.hold(["h/gpu0"], Holder("i1", slices=("h/gpu0",), job="i1", priority=50, team="inference"))
    view.hold(
        ["h/gpu1"],
        Holder("i2", slices=("h/gpu1",), job="i2", priority=50, team="inference", borrowed=True),
    )

    def entry(job: str, team: str, priority: int, seq: int, at: datetime) -> QueueEntry:
        request = JobRequest(gpus=1, memory_mib=30000, priority=priority, team=team)
        return QueueEntry(id=job, priority=priority, seq=seq, enqueued=at, job=job, request=request)

    t1 = entry("t1", "training", 10, 1, now)
    i3 = entry("i3", "inference", 50, 2, now + timedelta(minutes=1))
    first = schedule_pass([t1, i3], view, now, preempt=True, shares=shares)
    assert first.reclaim and first.preempt == (t1, ["i2"])
    view.unhold("i2")  # the victim has stopped
    second = schedule_pass([t1, i3], view, now + timedelta(minutes=2), preempt=True, shares=shares)
    assert [(e.id, p.slices) for e, p in second.placed] == [("t1", ["h/gpu1"])]
    assert [e.id for e, _ in second.waiting] == ["i3"] and second.preempt is None


def _hive_cut_small() -> tuple[list[dict[str, Any]], ElasticInputs]:
    """The bundled pool's MI300X hive cut into CPX/NPS4: 64 partitions of 24 GB."""
    from gpupoolctl.sched.cards import AmdHive, predicted_slices
    from tests.property.test_elastic_properties import base_slices

    whole = [dict(s) for s in base_slices() if s["host"] == "dxb-mi300x-01"]
    (hive,) = [c for c in cards_of(whole).values() if isinstance(c, AmdHive)]
    slices = predicted_slices(hive, ("CPX", "NPS4"))
    policy = ElasticPolicy(
        enabled=True, rules=(ElasticRule(line=1),), min_idle_s=0, batch_window_s=0
    )
    return slices, ElasticInputs(policy=policy, cards=cards_of(slices))


def test_a_team_job_that_a_recut_of_its_cards_could_hold_waits_for_it_not_refused():
    slices, inputs = _hive_cut_small()
    assert max(s["memory_mib"] for s in slices) < 40 * GIB  # no partition holds it today
    amd = QuotaScope(line=1, vendor="amd", nominal={GPU_MEMORY: 1536 * GIB})
    shares = ShareInputs(quotas={"T": (amd,)})
    queue = [entry("big", "T", 1, memory_mib=40 * GIB, vendor="amd")]
    result = schedule_pass(queue, PoolView(slices), T0, elastic=inputs, shares=shares)
    assert result.never == [] and placed_ids(result) == []
    ((waiting, why),) = result.waiting
    assert waiting.id == "big" and not why.never
    ((recut,),) = [result.recuts]  # the hive is re-cut into partitions that hold it
    assert recut.card.host == "dxb-mi300x-01" and recut.layout != ("CPX", "NPS4")
    # Without elastic, and for a team whose quota covers no AMD card, it can never fit.
    alone = schedule_pass(queue, PoolView(slices), T0, shares=shares)
    assert [e.id for e, _ in alone.never] == ["big"]
    nvidia = QuotaScope(line=1, vendor="nvidia", nominal={GPU_MEMORY: 1536 * GIB})
    other = ShareInputs(quotas={"T": (nvidia,)})
    refused = schedule_pass(queue, PoolView(slices), T0, elastic=inputs, shares=other)
    ((_, why),) = refused.never
    assert why.reason.startswith("team T has no quota on any card that could hold")
