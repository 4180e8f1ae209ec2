"""Clearing cut cards for a merge, on random pools of the bundled pool's two DGX nodes
(each card whole, 7 x 1g.10gb or 2 x 3g.40gb), with random holds of a serving team (small
nominal, borrowed or not, preemptible or not) and a training team that queues whole-card
work within or above its nominal:

(a) a reclaim stops only borrowed or preemptible work of teams above their nominal, and
    never takes a team below its nominal (recomputed here from the holds);
(b) a clearing plan is honest: once its victims have stopped and the cards have been idle
    for min-idle, the elastic pass merges cards for the claimant and the pass after that
    places it (work within its own nominal may take the cards first: it has that right);
(c) cards kept for a merge are not lent: no placement that borrows and no re-cut for work
    that would borrow.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpupoolctl.policy.model import GPU_MEMORY, ElasticPolicy, ElasticRule, QuotaScope
from gpupoolctl.sched import Holder, JobRequest, PoolView, QueueEntry, schedule_pass
from gpupoolctl.sched.cards import cards_of, predicted_slices
from gpupoolctl.sched.elastic import ElasticInputs
from gpupoolctl.sched.shares import ShareInputs
from tests.property.test_elastic_properties import apply_recuts, base_slices

NOW = datetime(2025, 6, 1, 22, 0, tzinfo=UTC)
GIB = 1024
HOSTS = ("sg-dgx01", "sg-dgx02")
POLICY = ElasticPolicy(
    enabled=True,
    rules=(ElasticRule(line=1, profiles=("1g.10gb", "3g.40gb")),),
    min_idle_s=300,
    batch_window_s=0,
    max_cards_per_pass=4,
)


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    whole = [dict(s) for s in base_slices() if s["host"] in HOSTS]
    slices: list[dict[str, Any]] = []
    for card in cards_of(whole).values():
        layout = draw(st.sampled_from(["whole", "small", "small", "small", "40"]))
        if layout == "whole":
            slices += [s for s in whole if s["id"] == card.key]
            continue
        name = "1g.10gb" if layout == "small" else "3g.40gb"
        profile = card.geometry.by_name(name)
        assert profile is not None
        starts = profile.placement_starts[: 7 if name == "1g.10gb" else 2]
        slices += predicted_slices(card, tuple((name, s) for s in starts))
    ids = [s["id"] for s in slices]
    density = draw(st.sampled_from([3, 7, 9, 10]))  # of 10 slices, about this many held
    held = [sid for sid in ids if draw(st.integers(0, 9)) < density]
    holds = [
        Holder(
            alloc=f"a-{n}",
            slices=(sid,),
            job=f"s-{n}",
            priority=50,
            preemptible=draw(st.booleans()),
            team="serve",
            borrowed=draw(st.sampled_from([True, True, False])),
            since=f"2025-06-01T{10 + n // 60:02d}:{n % 60:02d}:00.000Z",
        )
        for n, sid in enumerate(held)
    ]
    gpus = draw(st.sampled_from([1, 2, 4, 8]))  # 8: merged over two passes
    train = QueueEntry(
        id="train",
        priority=10,
        seq=0,
        enqueued=NOW - timedelta(hours=1),
        request=JobRequest(gpus=gpus, profile="gpu", same_node=gpus > 1, priority=10, team="train"),
        job="j-train",
    )
    small = [
        QueueEntry(
            id=f"q-{i}",
            priority=50,
            seq=1 + i,
            enqueued=NOW - timedelta(minutes=30),
            request=JobRequest(memory_mib=8 * GIB, priority=50, team="serve"),
            job=f"j-q-{i}",
        )
        for i in range(draw(st.integers(0, 4)))
    ]
    train_gib = draw(st.sampled_from([80, 160, 400, 800]))
    serve_gib = draw(st.sampled_from([0, 40, 200]))
    shares = ShareInputs(
        quotas={
            "train": (QuotaScope(line=1, nominal={GPU_MEMORY: train_gib * GIB}),),
            "serve": (QuotaScope(line=2, nominal={GPU_MEMORY: serve_gib * GIB}),),
        }
    )
    return {"slices": slices, "holds": holds, "queue": [train, *small], "shares": shares}


def serve_memory(pool: PoolView) -> int:
    return sum(
        pool.slices[s]["memory_mib"]
        for h in pool.holds.values()
        if h.team == "serve"
        for s in h.slices
    )


def inputs(slices: list[dict[str, Any]], idle_since: datetime) -> ElasticInputs:
    changed = {card: idle_since for card in cards_of(slices)}
    return ElasticInputs(policy=POLICY, cards=cards_of(slices), changed=changed)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases())
def test_clearing_reclaims_honestly_and_its_cards_get_merged_for_the_claimant(
    case: dict[str, Any],
) -> None:
    slices, holds, queue, shares = case["slices"], case["holds"], case["queue"], case["shares"]
    pool = PoolView(slices, holds)
    recent = NOW - timedelta(minutes=1)
    result = schedule_pass(queue, pool, NOW, preempt=True, shares=shares,
                           elastic=inputs(slices, recent))  # fmt: skip
    # (c) kept cards are not lent: no placement that borrows lands on them, no re-cut
    # for work that would borrow takes them
    lent = {s for e, p in result.placed if e.id in result.borrowed for s in p.slices}
    (serve_scope,) = shares.quotas["serve"]
    serve_full = serve_memory(pool) >= serve_scope.nominal[GPU_MEMORY]
    borrowers = {f"j-{e.id}" for e in queue if e.request.team == "serve" and serve_full}
    for card in result.kept_for:
        card_slices = {s["id"] for s in slices if f"{s['host']}/gpu{s['gpu']}" == card}
        assert not card_slices & lent
        assert all(r.card.key != card or not set(r.jobs) & borrowers for r in result.recuts)
    gpus = queue[0].request.gpus
    event(f"reclaim={result.reclaim}, kept={bool(result.kept_for)}, gpus={gpus}")
    if not result.reclaim:
        return
    assert result.preempt is not None
    claimant, victim_ids = result.preempt
    assert claimant.id == "train"
    victims = [h for h in pool.holds.values() if h.victim_id in set(victim_ids)]
    # (a) borrowed or preemptible serving work, never below its nominal
    assert victims and all(h.team == "serve" and (h.borrowed or h.preemptible) for h in victims)
    before = serve_memory(pool)
    for holder in victims:
        pool.unhold(holder.alloc)
    after = serve_memory(pool)
    assert after >= min(before, serve_scope.nominal[GPU_MEMORY])
    # (b) with the victims gone and min-idle passed, the loop serves the claimant (only when
    # the plan was a clearing: a plain reclaim frees whole cards it can take at once)
    remaining = [h for h in holds if h.victim_id not in set(victim_ids)]
    later = NOW + timedelta(minutes=6)
    current = slices
    for _ in range(4):
        step = schedule_pass([claimant], PoolView(current, remaining), later, shares=shares,
                             elastic=inputs(current, NOW))  # fmt: skip
        if any(e.id == "train" for e, _ in step.placed):
            return
        assert step.recuts, [n.reason for e, n in step.waiting if e.id == "train"]
        assert all("j-train" in r.jobs for r in step.recuts if not r.card.whole)
        current = apply_recuts(current, step.recuts)
    raise AssertionError("the claimant was never placed after its clearing")
