"""When an elastic re-cut is made, in words and in fact: the reason work waits with names the
re-cut, how long until a pass may make it and what holds it until then (the batch window,
the card's min-idle), and a pass at that moment makes exactly that re-cut, none before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.policy.model import ElasticPolicy, ElasticRule
from gpupoolctl.sched import Holder, JobRequest, PoolView, QueueEntry, explain, schedule_pass
from gpupoolctl.sched.cards import cards_of
from gpupoolctl.sched.elastic import ElasticInputs, Upcoming
from tests.property.test_elastic_properties import base_slices

NOW = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
HOST = "sg-dgx01"  # eight whole H100 cards
RECUT = "re-cut idle sg-dgx01/gpu0 (whole card) into 7 x 1g.10gb"


def test_the_reason_says_what_re_cut_when_and_what_holds_it() -> None:
    assert explain.recut_wait(RECUT, 24.2, "batch window") == (
        f"waits for a re-cut: {RECUT} in 25s (batch window), "
        "next `schedule` pass or `submit`/`jobs` acts then"
    )
    assert explain.recut_wait(RECUT, 220, "min-idle") == (
        f"waits for a re-cut: {RECUT} in 3m40s (min-idle), "
        "next `schedule` pass or `submit`/`jobs` acts then"
    )
    # Made by the pass that decided it: no wait to tell.
    assert explain.recut_wait(RECUT) == f"waits for a re-cut: {RECUT}"
    assert explain.recut_wait(RECUT, 0.0, "batch window") == f"waits for a re-cut: {RECUT}"
    # Never "in 0s": a wait under a second is one.
    assert explain.due_in(0.2, "batch window") == "in 1s (batch window)"


def _slices() -> list[dict[str, Any]]:
    return [dict(s) for s in base_slices() if s["host"] == HOST]


def _inputs(
    slices: list[dict[str, Any]], window_s: float, min_idle_s: float, changed: dict[str, datetime]
) -> ElasticInputs:
    policy = ElasticPolicy(
        enabled=True,
        rules=(ElasticRule(line=1, profiles=("1g.10gb", "3g.40gb")),),
        min_idle_s=min_idle_s,
        max_cards_per_pass=4,
        batch_window_s=window_s,
    )
    return ElasticInputs(policy=policy, cards=cards_of(slices), changed=changed)


def _entry(enqueued: datetime, **request: Any) -> QueueEntry:
    return QueueEntry(
        id="q-1",
        priority=50,
        seq=1,
        enqueued=enqueued,
        request=JobRequest(**request),
        job="j-1",
    )


def _pass(slices, held, entry, inputs, at) -> Any:
    holders = [Holder(alloc=f"a-{sid}", slices=(sid,)) for sid in held]
    return schedule_pass([entry], PoolView(slices, holders), at, elastic=inputs, foresee=True)


def test_a_job_younger_than_the_batch_window_is_told_when_it_ends() -> None:
    slices = _slices()
    inputs = _inputs(slices, 30, 300, {})
    entry = _entry(NOW - timedelta(seconds=5), memory_mib=9537)
    result = _pass(slices, [], entry, inputs, NOW)
    assert not result.recuts and not result.placed
    coming = result.upcoming["q-1"]
    assert (coming.wait_s, coming.cause) == (25.0, "batch window")
    assert coming.recut.after == "7 x 1g.10gb"
    ((waiting, nofit),) = result.waiting
    assert result.waiting_reason(waiting, nofit) == explain.recut_wait(
        coming.recut.describe(), 25.0, "batch window"
    )
    assert "in 25s (batch window)" in result.waiting_reason(waiting, nofit)


def test_a_card_idle_for_less_than_min_idle_is_waited_for() -> None:
    slices = _slices()
    # Every card was given back a minute ago: min-idle (5m) holds them four more minutes.
    changed = {f"{HOST}/gpu{g}": NOW - timedelta(minutes=1) for g in range(8)}
    inputs = _inputs(slices, 30, 300, changed)
    entry = _entry(NOW - timedelta(minutes=2), memory_mib=9537)
    coming = _pass(slices, [], entry, inputs, NOW).upcoming["q-1"]
    assert (coming.wait_s, coming.cause) == (240.0, "min-idle")
    # Its idleness as the card stands now, not as it will then.
    assert coming.recut.idle_s == 60.0 and "idle 60 s" in coming.recut.describe()


def test_work_no_card_could_ever_be_re_cut_for_is_told_nothing_of_a_re_cut() -> None:
    slices = _slices()
    inputs = _inputs(slices, 30, 300, {})
    held = [s["id"] for s in slices]  # every card held: nothing idle to re-cut
    result = _pass(slices, held, _entry(NOW, memory_mib=9537), inputs, NOW)
    assert result.upcoming == {} and result.waiting
    ((waiting, nofit),) = result.waiting
    assert result.waiting_reason(waiting, nofit) == nofit.reason


REQUESTS = st.sampled_from(
    [{"memory_mib": 9537}, {"profile": "3g.40gb"}, {"profile": "1g.10gb", "gpus": 2,
     "same_node": True}]
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    window_s=st.integers(0, 120),
    min_idle_s=st.integers(0, 600),
    waited_s=st.integers(0, 180),
    idle_s=st.lists(st.none() | st.integers(0, 900), min_size=8, max_size=8),
    held=st.sets(st.integers(0, 7), max_size=7),
    request=REQUESTS,
)
def test_the_pass_at_the_foretold_moment_makes_the_foretold_re_cut_and_none_before(
    window_s, min_idle_s, waited_s, idle_s, held, request
) -> None:
    slices = _slices()
    changed = {
        f"{HOST}/gpu{g}": NOW - timedelta(seconds=s) for g, s in enumerate(idle_s) if s is not None
    }
    holds = [s["id"] for s in slices if s["gpu"] in held]
    inputs = _inputs(slices, window_s, min_idle_s, changed)
    entry = _entry(NOW - timedelta(seconds=waited_s), **request)
    now = _pass(slices, holds, entry, inputs, NOW)
    if now.placed or now.recut_for(entry) is not None:
        return  # placed, or re-cut for by this very pass: nothing to foretell
    coming: Upcoming | None = now.upcoming.get(entry.id)
    later = _pass(slices, holds, entry, inputs, NOW + timedelta(days=1))
    if coming is None:
        # Nothing foretold: no pass ever re-cuts for it while the pool stands as it is.
        assert later.recut_for(entry) is None
        return
    assert coming.wait_s > 0 and coming.cause in ("batch window", "min-idle")
    due = NOW + timedelta(seconds=coming.wait_s)
    then = _pass(slices, holds, entry, inputs, due)
    made = then.recut_for(entry)
    assert made is not None and made.card.key == coming.recut.card.key
    assert made.layout == coming.recut.layout
    before = _pass(slices, holds, entry, inputs, due - timedelta(milliseconds=1))
    assert before.recut_for(entry) is None
    # What it waits for is what ends then: the card's min-idle, else the batch window.
    idle_since = changed.get(made.card.key)
    card_ready = idle_since + timedelta(seconds=min_idle_s) if idle_since else None
    assert (coming.cause == "min-idle") == (card_ready == due)
    if coming.cause == "batch window":
        assert entry.enqueued + timedelta(seconds=window_s) == due
