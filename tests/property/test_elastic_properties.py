"""Elastic re-cutting decisions (sched.elastic through sched.schedule_pass), on the bundled sim
pool's real slices with random holds, random earlier re-cuts, random queues and policies:

1. a re-cut never touches a card with a held slice, nor a blocked card;
2. every layout it makes is valid for the card's geometry and uses only allowed profiles;
3. one re-cut per card per pass, at most max-cards-per-pass, none within min-idle, none
   triggered by work younger than the batch window;
4. keep-whole holds after the pass's re-cuts;
5. elastic off (or a policy that selects no card) decides exactly as the static pass;
6. a small request never takes a whole idle card that hidden_for hides from it;
7. predicted slices are what the (simulated) hardware gives for the same layout, through
   the very path production takes (reshape.spec_for, partition.plan_host, the agent);
8. two passes at once never reserve one card twice, and a card being re-cut is not free.
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.hw import catalog
from gpupoolctl.jobs import reshape
from gpupoolctl.jobs.alloc import alloc as sched_alloc
from gpupoolctl.ledger import Ledger, slices_from_facts
from gpupoolctl.partition import plan_host, planner
from gpupoolctl.policy import ElasticPolicy, ElasticRule
from gpupoolctl.sched import (
    AGING_CAP,
    Holder,
    JobRequest,
    NoFit,
    Placement,
    PoolView,
    QueueEntry,
    effective_priority,
    order_queue,
    place,
    schedule_pass,
)
from gpupoolctl.sched.cards import WHOLE, AmdHive, Card, Layout, cards_of, predicted_slices
from gpupoolctl.sched.elastic import ElasticInputs, Recut, hidden_for, plan_recuts

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _simpool() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gpupool_bench_simpool", ROOT / "bench" / "utilization" / "simpool.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def base_slices() -> tuple[dict[str, Any], ...]:
    """The bundled sim pool's slices as shipped, made for real through the sim driver."""
    return tuple(_simpool().pool_slices(None))


@cache
def base_cards() -> dict[str, Card]:
    return cards_of(base_slices())


def gpu_key(entry: dict[str, Any]) -> str | None:
    return f"{entry['host']}/gpu{entry['gpu']}" if entry.get("gpu") is not None else None


def is_whole(card: Any, layout: Any) -> bool:
    if isinstance(card, AmdHive):
        return card.per_card(layout) == 1
    return layout == WHOLE or layout == card.full_layout


def whole_cards(card: Any, layout: Any) -> int:
    """Whole cards the card (or AMD hive) gives in this layout."""
    if not is_whole(card, layout):
        return 0
    return card.cards if isinstance(card, AmdHive) else 1


def without(slices: list[dict[str, Any]], card: Any) -> list[dict[str, Any]]:
    mine = set(card.slices)
    return [s for s in slices if s["id"] not in mine]


# -- strategies -----------------------------------------------------------------------------


@st.composite
def layouts(draw: st.DrawFn, card: Any) -> Any:
    """A valid layout of the card: WHOLE (only where MIG may be switched off), or profiles
    added one by one while the planner still finds placements for all of them; for an AMD
    hive one of the product's allowed mode pairs."""
    if isinstance(card, AmdHive):
        return draw(st.sampled_from(sorted(card.product.allowed)))
    if card.mig_toggle and draw(st.integers(0, 3)) == 0:
        return WHOLE
    names = [p.name for p in card.geometry.profiles]
    wanted = draw(st.lists(st.sampled_from(names), min_size=1, max_size=8))
    counts: dict[str, int] = {}
    for name in wanted:
        trial = {**counts, name: counts.get(name, 0) + 1}
        if planner.place(card.geometry, trial) is not None:
            counts = trial
    placed = planner.place(card.geometry, counts)
    assert placed is not None
    return tuple(sorted(placed, key=lambda p: (p[1], p[0])))


@st.composite
def pools(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[Holder]]:
    """The sim pool's slices, some cards re-cut (as predicted), random holds."""
    cards = base_cards()
    slices = list(base_slices())
    if draw(st.booleans()):  # a part of the pool: more contention
        hosts = sorted({s["host"] for s in slices})
        keep = draw(st.sets(st.sampled_from(hosts), min_size=1, max_size=3))
        keep.add(draw(st.sampled_from(sorted({c.host for c in cards.values()}))))
        slices = [s for s in slices if s["host"] in keep]
        cards = {k: c for k, c in cards.items() if c.host in keep}
    recut = draw(st.sets(st.sampled_from(sorted(cards)), max_size=10)) if cards else set()
    for key in sorted(recut):
        card = cards[key]
        layout = draw(layouts(card))
        slices = without(slices, card) + predicted_slices(card, layout)
    ids = sorted(s["id"] for s in slices)
    held = draw(st.lists(st.sampled_from(ids), unique=True, max_size=min(36, len(ids) // 2)))
    holders = []
    start = 0
    while start < len(held):
        size = draw(st.integers(1, 4))
        group = tuple(held[start : start + size])
        start += size
        n = len(holders)
        holders.append(
            Holder(
                alloc=f"a-{n}",
                owner=draw(st.sampled_from(["ana", "bo"])),
                slices=group,
                job=f"held-{n}",
                priority=draw(st.sampled_from([10, 50, 90])),
                preemptible=draw(st.booleans()),
            )
        )
    return slices, holders


HOST_GLOBS = [None] * 6 + ["sg-*", "sg-dgx01", "*a100*", "dxb-*"]


MEMORY_GB = st.integers(1, 90) | st.integers(1, 20)  # 1..90 GB, small ones more often


@st.composite
def queues(draw: st.DrawFn) -> list[QueueEntry]:
    entries = []
    for i in range(draw(st.integers(0, 20))):
        gpus = draw(st.integers(1, 4))
        kind = draw(st.sampled_from(["memory", "memory", "memory", "gpu", "gpu", "any"]))
        priority = draw(st.sampled_from([0, 10, 50, 90, 100]))
        request = JobRequest(
            gpus=gpus,
            profile="gpu" if kind == "gpu" else None,
            memory_mib=draw(st.integers(1, 90) | st.integers(1, 20)) * 1024
            if kind == "memory"
            else None,
            same_node=gpus > 1 and draw(st.booleans()),
            host=draw(st.sampled_from(HOST_GLOBS)),
            priority=priority,
            preemptible=draw(st.booleans()),
        )
        age = draw(st.sampled_from([0, 5, 29, 30, 31, 120, 600, 900, 3600, 3600, 4 * 3600]))
        entries.append(
            QueueEntry(
                id=f"q-{i}",
                priority=priority,
                seq=i,
                enqueued=NOW - timedelta(seconds=age),
                request=request,
                job=f"j-{i}" if draw(st.booleans()) else None,
                owner=draw(st.sampled_from(["ana", "bo", "cy"])),
            )
        )
    return entries


RULE_HOSTS = [None, None, None, "*", "sg-*", "sg-dgx0*", "sg-dgx01", "sg-dgx02", "*a100*", "dxb-*"]
RULE_HOSTS += ["sg-dgx01,sg-a100-01", "nohost-*", "dxb-mi300x-01"]
MODEL_PROFILES = {
    None: sorted(
        {
            p.name
            for n in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-PCIE-40GB")
            for p in catalog.find_nvidia_model(name=n).mig.profiles  # type: ignore[union-attr]
        }
    ),
    "H100": [p.name for p in base_cards()["sg-dgx01/gpu0"].geometry.profiles],
    "A100": [p.name for p in base_cards()["sg-a100-01/gpu3"].geometry.profiles],
    "L40S": [],
}


AMD_MODES = ["spx/nps1", "dpx/nps1", "dpx/nps2", "qpx/nps1", "cpx/nps1", "cpx/nps4"]


@st.composite
def rules(draw: st.DrawFn, line: int) -> ElasticRule:
    if draw(st.integers(0, 2)) == 0:  # a broad rule: most cards elastic
        return ElasticRule(line=line, keep_whole=draw(st.integers(0, 3)))
    if draw(st.integers(0, 4)) == 0:  # an AMD rule (MI300X hives)
        modes = draw(st.none() | st.lists(st.sampled_from(AMD_MODES), unique=True, min_size=1))
        return ElasticRule(
            line=line,
            hosts=draw(st.sampled_from(RULE_HOSTS)),
            vendor="amd",
            amd_modes=None if modes is None else tuple(modes),
            keep_whole=draw(st.integers(0, 9)),
        )
    model = draw(st.sampled_from([None, None, "H100", "A100", "L40S"]))
    known = MODEL_PROFILES[model]
    profiles = None
    if known and draw(st.booleans()):
        profiles = tuple(draw(st.lists(st.sampled_from(known), unique=True, min_size=1)))
    return ElasticRule(
        line=line,
        hosts=draw(st.sampled_from(RULE_HOSTS)),
        vendor=draw(st.sampled_from([None, "nvidia"])),
        model=model,
        enabled=draw(st.integers(0, 5)) > 0,
        profiles=profiles,
        keep_whole=draw(st.integers(0, 3)),
    )


@st.composite
def policies(draw: st.DrawFn, enabled: bool = True) -> ElasticPolicy:
    count = draw(st.integers(1, 3))
    return ElasticPolicy(
        enabled=enabled,
        rules=tuple(draw(rules(10 + i)) for i in range(count)),
        min_idle_s=draw(st.sampled_from([0.0, 0.0, 60.0, 300.0, 3600.0])),
        max_cards_per_pass=draw(st.integers(1, 5)),
        batch_window_s=draw(st.sampled_from([0.0, 30.0, 600.0])),
        backoff_s=900.0,
    )


@st.composite
def cases(draw: st.DrawFn, enabled: bool = True) -> dict[str, Any]:
    slices, holders = draw(pools())
    cards = cards_of(slices)
    keys = st.sets(st.sampled_from(sorted(cards)), max_size=8) if cards else st.just(set())
    changed = {
        key: NOW - timedelta(seconds=draw(st.sampled_from([0, 30, 59, 60, 299, 301, 7200])))
        for key in sorted(draw(keys))
    }
    blocked = {key: "being re-cut (r-1)" for key in sorted(draw(keys))[:3]}
    policy = draw(policies(enabled))
    inputs = ElasticInputs(policy=policy, cards=cards, changed=changed, blocked=blocked)
    return {
        "slices": slices,
        "holders": holders,
        "entries": draw(queues()),
        "inputs": inputs,
        "preempt": draw(st.booleans()),
    }


def view(case: dict[str, Any]) -> PoolView:
    return PoolView(case["slices"], case["holders"])


# -- checks shared by the pass-level and the plan_recuts-level properties --------------------


def check_recuts(
    recuts: list[Recut],
    case: dict[str, Any],
    held: set[str],
    waiting: list[QueueEntry],
) -> None:
    inputs: ElasticInputs = case["inputs"]
    policy = inputs.policy
    cards = inputs.cards
    # 3: one re-cut per card, within the budget
    keys = [r.card.key for r in recuts]
    assert len(keys) == len(set(keys)), f"a card re-cut twice in one pass: {keys}"
    assert len(recuts) <= policy.max_cards_per_pass
    ready = {
        (e.job or e.id)
        for e in waiting
        if (NOW - e.enqueued).total_seconds() >= policy.batch_window_s
    }
    for recut in recuts:
        card = recut.card
        assert cards[card.key] == card, "the re-cut names a card that is not the pool's"
        # 1: no held slice, not blocked
        assert not (set(card.slices) & held), f"{card.key} has a held slice"
        assert card.key not in inputs.blocked, f"{card.key} is blocked"
        # 3: min idle
        changed = inputs.changed.get(card.key)
        if changed is not None:
            idle = (NOW - changed).total_seconds()
            assert idle >= policy.min_idle_s, f"{card.key} idle {idle} s < {policy.min_idle_s}"
        # 3: batch window: made for work that has waited long enough, and only for such work
        assert recut.jobs, f"{card.key} re-cut for no job"
        assert set(recut.jobs) <= ready, f"{recut.jobs} not all waited {policy.batch_window_s}s"
        # 2: a valid layout of allowed profiles, of this rule
        rule = inputs.rule(card)
        assert rule is not None, f"{card.key}: no rule allows it"
        assert recut.layout != card.layout, f"{card.key} re-cut into what it has"
        if isinstance(card, AmdHive):
            assert recut.layout in card.product.allowed, recut.layout
            assert rule.allows_amd_mode(*recut.layout), f"{recut.layout} not in {rule.amd_modes}"
        elif recut.layout == WHOLE:
            assert card.mig_toggle, f"{card.key}: MIG off needs a reset on {card.model}"
        else:
            assert planner.check_layout(card.geometry, list(recut.layout)) == []
            for profile, _ in recut.layout:
                if rule.profiles is not None:
                    assert profile in rule.profiles, f"{profile} not in {rule.profiles}"
                else:
                    assert "+" not in profile and "-" not in profile, profile
    # 4: keep-whole, per rule and host
    after = {r.card.key: r.layout for r in recuts}
    for rule in policy.rules:
        mine = [c for c in cards.values() if inputs.rule(c) is rule]
        for host in {c.host for c in mine}:
            on_host = [c for c in mine if c.host == host]
            before = sum(whole_cards(c, c.layout) for c in on_host)
            now = sum(whole_cards(c, after.get(c.key, c.layout)) for c in on_host)
            assert now >= min(rule.keep_whole, before), (
                f"{host} keeps {now} whole cards under rule {rule.line}, "
                f"had {before}, keep-whole {rule.keep_whole}"
            )


# -- 1..4 ------------------------------------------------------------------------------------


@SETTINGS
@given(cases())
def test_pass_recuts_respect_holds_limits_layouts_and_keep_whole(case: dict[str, Any]) -> None:
    pool = view(case)
    result = schedule_pass(
        case["entries"], pool, NOW, preempt=case["preempt"], elastic=case["inputs"]
    )
    if result.preempt is not None:
        assert result.recuts == []
        return
    held = {s for h in case["holders"] for s in h.slices}
    held |= {s for _, p in result.placed for s in p.slices}
    check_recuts(result.recuts, case, held, [e for e, _ in result.waiting])


@SETTINGS
@given(cases())
def test_plan_recuts_respects_holds_limits_layouts_and_keep_whole(case: dict[str, Any]) -> None:
    # plan_recuts on its own, on the whole queue: the rules do not depend on what the pass
    # hands it.
    waiting = order_queue(case["entries"], NOW)
    recuts = plan_recuts(waiting, view(case), case["inputs"], NOW)
    held = {s for h in case["holders"] for s in h.slices}
    check_recuts(recuts, case, held, waiting)
    young = [
        e
        for e in waiting
        if (NOW - e.enqueued).total_seconds() < case["inputs"].policy.batch_window_s
    ]
    assert plan_recuts(young, view(case), case["inputs"], NOW) == []


# -- 5 ---------------------------------------------------------------------------------------


def decisions(result: Any) -> tuple[Any, ...]:
    return (result.placed, result.waiting, result.never, result.reserved_for, result.preempt)


@SETTINGS
@given(cases(enabled=False))
def test_elastic_off_decides_exactly_as_the_static_pass(case: dict[str, Any]) -> None:
    entries, preempt, off = case["entries"], case["preempt"], case["inputs"]
    static = schedule_pass(entries, view(case), NOW, preempt=preempt)
    no_inputs = schedule_pass(entries, view(case), NOW, preempt=preempt, elastic=None)
    disabled = schedule_pass(entries, view(case), NOW, preempt=preempt, elastic=off)
    # enabled, but no rule selects a card: still a static pool
    nothing = ElasticInputs(
        policy=replace(off.policy, enabled=True, rules=(ElasticRule(line=1, hosts="nohost-*"),)),
        cards=off.cards,
        changed=off.changed,
        blocked=off.blocked,
    )
    unmatched = schedule_pass(entries, view(case), NOW, preempt=preempt, elastic=nothing)
    assert decisions(no_inputs) == decisions(static)
    assert decisions(disabled) == decisions(static)
    assert decisions(unmatched) == decisions(static)
    assert static.recuts == no_inputs.recuts == disabled.recuts == unmatched.recuts == []


# -- 6 ---------------------------------------------------------------------------------------


@SETTINGS
@given(cases())
def test_small_requests_never_take_a_hidden_whole_card(case: dict[str, Any]) -> None:
    inputs: ElasticInputs = case["inputs"]
    entries = case["entries"]
    result = schedule_pass(entries, view(case), NOW, elastic=inputs)
    placed = {e.id: p for e, p in result.placed}
    waiting = {e.id for e, _ in result.waiting}
    # Replay the pass's own steps (placements held, starving entries' slices reserved) to
    # see the pool each placement was made on.
    replay = view(case)
    for entry in order_queue(entries, NOW):
        if entry.id in placed:
            placement = placed[entry.id]
            hidden = set(hidden_for(entry.request, replay, inputs))
            taken = hidden & set(placement.slices)
            assert not taken, f"{entry.request.describe()} took hidden {sorted(taken)}"
            replay.hold(placement.slices, Holder(alloc=entry.id, slices=tuple(placement.slices)))
        elif entry.id in waiting and effective_priority(entry, NOW) >= AGING_CAP:
            for slot in list(replay.free_candidates(entry.request)):
                replay.take(slot.id)


def test_hidden_whole_card_example() -> None:
    """The property above is not vacuous: a 10 GB request that the static pass puts on a
    whole H100 is, with elastic on, kept off the whole cards that could be cut for it."""
    slices = list(base_slices())
    request = JobRequest(memory_mib=10 * 1024, host="sg-dgx01")
    entry = QueueEntry(id="q-0", priority=50, seq=0, enqueued=NOW, request=request)
    static = schedule_pass([entry], PoolView(slices), NOW)
    assert [p.slices for _, p in static.placed] == [["sg-dgx01/gpu0"]]
    inputs = ElasticInputs(
        policy=ElasticPolicy(enabled=True, rules=(ElasticRule(line=1, hosts="sg-dgx01"),)),
        cards=cards_of(slices),
    )
    hidden = hidden_for(request, PoolView(slices), inputs)
    assert "sg-dgx01/gpu0" in hidden
    elastic = schedule_pass([entry], PoolView(slices), NOW, elastic=inputs)
    assert elastic.placed == []
    assert [e.id for e, _ in elastic.waiting] == ["q-0"]


# -- 6b: hiding a card from work is only honest if the card is then cut for it -------------


def apply_recuts(slices: list[dict[str, Any]], recuts: list[Recut]) -> list[dict[str, Any]]:
    """The pool after the re-cuts, as the benchmarks replay them (predicted slices)."""
    for recut in recuts:
        slices = without(slices, recut.card) + recut.slices()
    return slices


@st.composite
def single_entry_cases(draw: st.DrawFn) -> dict[str, Any]:
    slices, holders = draw(pools())
    entry = draw(queues().filter(bool))[0]
    rule_list = tuple(draw(rules(10 + i)) for i in range(draw(st.integers(1, 2))))
    policy = ElasticPolicy(
        enabled=True,
        rules=rule_list,
        min_idle_s=0.0,
        batch_window_s=0.0,
        max_cards_per_pass=draw(st.integers(1, 4)),
    )
    return {"slices": slices, "holders": holders, "entry": entry, "policy": policy}


def rounds_until_placed(
    slices: list[dict[str, Any]], holders: list[Holder], entry: QueueEntry, policy: ElasticPolicy
) -> tuple[bool, list[str]]:
    """The scheduling loop on one entry: pass, apply its re-cuts, pass again (no clock, no
    idle limit: only progress matters). (placed, what each round did)."""
    log = []
    for _ in range(8):
        inputs = ElasticInputs(policy=policy, cards=cards_of(slices))
        result = schedule_pass([entry], PoolView(slices, holders), NOW, elastic=inputs)
        if result.placed:
            return True, log
        if not result.recuts:
            reasons = [nf.reason for _, nf in result.waiting + result.never]
            log.append(f"no re-cut; {reasons}")
            return False, log
        log.extend(r.describe() for r in result.recuts)
        slices = apply_recuts(slices, result.recuts)
    return False, log


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(single_entry_cases())
def test_work_kept_off_a_whole_card_gets_a_recut(case: dict[str, Any]) -> None:
    """Elastic hides idle whole cards from small work so that they can be cut for it. So
    whatever the static pool would place now, elastic places too, at once or after the
    re-cuts it chooses (with no idle limit or batch window to wait for)."""
    slices, holders, entry = case["slices"], case["holders"], case["entry"]
    static = schedule_pass([entry], PoolView(slices, holders), NOW)
    if not static.placed:
        return
    placed, log = rounds_until_placed(slices, holders, entry, case["policy"])
    assert placed, f"{entry.request.describe()} (static: placed) waits: {log}"


def _dgx01(held: range) -> tuple[list[dict[str, Any]], list[Holder]]:
    slices = [s for s in base_slices() if s["host"] == "sg-dgx01"]
    holders = [Holder(alloc=f"a-{i}", slices=(f"sg-dgx01/gpu{i}",)) for i in held]
    return slices, holders


BROAD = ElasticPolicy(enabled=True, rules=(ElasticRule(line=1),), min_idle_s=0, batch_window_s=0)


@pytest.mark.parametrize(
    ("request_", "age", "held"),
    [
        # one card cannot hold 3 x 3g.40gb, and the other whole cards are hidden
        (JobRequest(gpus=3, memory_mib=30 * 1024, same_node=True), timedelta(minutes=5), range(0)),
        # aged to the cap: its starvation reservation takes the card it is kept off
        (JobRequest(memory_mib=10 * 1024), timedelta(hours=3), range(7)),
    ],
    ids=["same-node-beyond-one-card", "starving-small-request"],
)
def test_recut_progress_examples(request_: JobRequest, age: timedelta, held: range) -> None:
    slices, holders = _dgx01(held)
    entry = QueueEntry(id="q-0", priority=50, seq=0, enqueued=NOW - age, request=request_)
    assert schedule_pass([entry], PoolView(slices, holders), NOW).placed
    placed, log = rounds_until_placed(slices, holders, entry, BROAD)
    assert placed, log


def test_a100_merge_uses_only_allowed_profiles() -> None:
    """An Ampere card made whole again becomes its full-size instance (7g.40gb), a MIG
    profile like any other: a rule that does not list it does not allow it."""
    slices = [s for s in base_slices() if gpu_key(s) == "sg-a100-01/gpu3"]
    rule = ElasticRule(line=1, model="A100", profiles=("1g.5gb", "2g.10gb", "3g.20gb"))
    inputs = ElasticInputs(policy=replace(BROAD, rules=(rule,)), cards=cards_of(slices))
    request = JobRequest(memory_mib=30 * 1024)
    entry = QueueEntry(id="q-0", priority=50, seq=0, enqueued=NOW, request=request)
    result = schedule_pass([entry], PoolView(slices), NOW, elastic=inputs)
    used = {p for r in result.recuts for p, _ in r.layout}
    assert used <= set(rule.profiles), [r.describe() for r in result.recuts]


# -- 7 ---------------------------------------------------------------------------------------

H100_LAYOUTS: list[Layout] = [
    tuple(("1g.10gb", i) for i in range(7)),
    (("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)),
    WHOLE,  # merge back: MIG off
    (("7g.80gb", 0),),
    (("4g.40gb", 0), ("1g.20gb", 4), ("1g.10gb", 6)),
    (("1g.10gb+me", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4)),
    WHOLE,
]
A100_LAYOUTS: list[Layout] = [
    (("7g.40gb", 0),),  # the full-size instance: "whole" on Ampere
    tuple(("1g.5gb", i) for i in range(7)),
    (("4g.20gb", 0), ("3g.20gb", 4)),
    (("1g.10gb", 0), ("2g.10gb", 2), ("3g.20gb", 4)),
    (("7g.40gb", 0),),
]


def _agent(target: Any, verb: str, args: dict[str, Any]) -> Any:
    from gpupoolctl.remote import run_agent

    result = run_agent([target], {"verb": verb, "args": args})[0]
    assert result.ok, f"{verb}: {result.error}"
    return result.data


@pytest.mark.parametrize(
    ("host", "index", "steps"),
    [("sg-dgx01", 0, H100_LAYOUTS), ("sg-a100-01", 3, A100_LAYOUTS)],
    ids=["h100", "a100-mig"],
)
def test_predicted_slices_are_what_the_hardware_gives(
    host: str, index: int, steps: list[Layout], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpupoolctl.inventory import load_inventory
    from gpupoolctl.remote.target import target_from_vars

    monkeypatch.setenv("GPUPOOL_SIM_DIR", str(tmp_path))
    node = load_inventory(ROOT / "inventories" / "sim.yaml").hosts[host]
    target = target_from_vars(node.name, node.vars)
    key = f"{host}/gpu{index}"
    facts = _agent(target, "facts", {})
    for layout in steps:
        card = cards_of(slices_from_facts(host, facts))[key]
        if layout != WHOLE:
            assert planner.check_layout(card.geometry, list(layout)) == [], layout
        recut = Recut(card, layout, "property test", ("j-1",), None)
        predicted = predicted_slices(card, layout)
        assert recut.slices() == predicted
        plan = plan_host(reshape.spec_for(recut), reshape.ELASTIC_LABEL, host, (), facts)
        assert plan.errors == []
        answer = _agent(target, "partition", plan.agent_args(False))
        assert [g["ok"] for g in answer["gpus"] if g.get("index") == index] == [True], answer
        facts = _agent(target, "facts", {})
        real = [s for s in slices_from_facts(host, facts) if gpu_key(s) == key]
        fields = ("id", "kind", "profile", "memory_mib")
        got = [{f: s.get(f) for f in fields} for s in real]
        want = [{f: s.get(f) for f in fields} for s in predicted]
        assert got == want, f"{card.layout} -> {layout}"
        # everything but the placeholders (uuid, devices) agrees too
        rest = [{k: v for k, v in s.items() if k not in ("uuid", "devices")} for s in real]
        guess = [{k: v for k, v in s.items() if k not in ("uuid", "devices")} for s in predicted]
        assert rest == guess, f"{card.layout} -> {layout}"


# -- 8 ---------------------------------------------------------------------------------------


def _ledger_with_pool(path: Path) -> Ledger:
    ledger = Ledger(path, durable=False)
    slices = list(base_slices())
    ledger.refresh_slices(sorted({s["host"] for s in slices}), slices)
    return ledger


def _recut(state: Any, key: str, layout: Layout) -> Recut:
    card = cards_of(state.slices.values())[key]
    return Recut(card, layout, "property test", ("j-1",), None)


CUT_7 = tuple(("1g.10gb", i) for i in range(7))
CUT_2 = (("3g.40gb", 0), ("3g.40gb", 4))


def test_a_card_is_reserved_once_and_is_not_free_while_reserved(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    first, second = _ledger_with_pool(path), Ledger(path, durable=False)
    state = first.read().state
    one = _recut(state, "sg-dgx01/gpu0", CUT_7)
    other = _recut(state, "sg-dgx01/gpu0", CUT_2)  # the second pass chose another layout
    got = first.write(lambda tx: reshape.reserve(tx, one)).value
    assert got is not None
    assert second.write(lambda tx: reshape.reserve(tx, other)).value is None
    assert second.write(lambda tx: reshape.reserve(tx, one)).value is None
    state = second.read().state
    assert [r["gpu"] for r in state.reshapes.values()] == ["sg-dgx01/gpu0"]
    # a card being re-cut is not free: placement, alloc and the next pass leave it alone
    pool = PoolView.from_state(state, NOW)
    assert not pool.is_free("sg-dgx01/gpu0")
    assert all(pool.is_free(f"sg-dgx01/gpu{i}") for i in range(1, 8))
    all_eight = JobRequest(gpus=8, profile="gpu", host="sg-dgx01", same_node=True)
    assert isinstance(place(all_eight, pool, "best-fit"), NoFit)
    seven = JobRequest(gpus=7, profile="gpu", host="sg-dgx01", same_node=True)
    placement = place(seven, PoolView.from_state(state, NOW), "best-fit")
    assert isinstance(placement, Placement) and "sg-dgx01/gpu0" not in placement.slices
    entries = [
        QueueEntry(id=f"q-{i}", priority=50, seq=i, enqueued=NOW - timedelta(hours=1), request=r)
        for i, r in enumerate([JobRequest(profile="gpu", host="sg-dgx01")] * 8)
    ]
    blocked = {str(r["gpu"]): "being re-cut" for r in state.reshapes.values()}
    inputs = ElasticInputs(
        policy=ElasticPolicy(enabled=True, rules=(ElasticRule(line=1),), min_idle_s=0),
        cards=cards_of(state.slices.values()),
        blocked=blocked,
    )
    again = schedule_pass(entries, PoolView.from_state(state, NOW), NOW, elastic=inputs)
    assert all("sg-dgx01/gpu0" not in p.slices for _, p in again.placed)
    assert len(again.placed) == 7
    assert all(r.card.key != "sg-dgx01/gpu0" for r in again.recuts)
    with pytest.raises(Exception, match=r"(?i)nothing fits"):
        sched_alloc(first, all_eight, owner="ana")
    # closed, the card is free again (so the checks above could have failed)
    first.write(
        lambda tx: tx.append("reshape", {"id": got.id, "state": "done", "gpu": "sg-dgx01/gpu0"})
    )
    assert PoolView.from_state(first.read().state, NOW).is_free("sg-dgx01/gpu0")
    assert first.write(lambda tx: reshape.reserve(tx, other)).value is not None


def test_a_card_with_a_held_slice_is_not_reserved(tmp_path: Path) -> None:
    ledger = _ledger_with_pool(tmp_path / "ledger.jsonl")
    state = ledger.read().state
    recut = _recut(state, "sg-dgx02/gpu6", WHOLE)
    ledger.alloc(lambda state, now: ["sg-dgx02/gpu6/mig-1g.10gb@3"], owner="ana")
    assert ledger.write(lambda tx: reshape.reserve(tx, recut)).value is None
    assert ledger.read().state.reshapes == {}


def test_two_passes_at_once_reserve_a_card_once(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _ledger_with_pool(path).close()
    state = Ledger(path, durable=False).read().state
    recuts = [_recut(state, "sg-dgx01/gpu3", CUT_7), _recut(state, "sg-dgx01/gpu3", CUT_2)]
    barrier = threading.Barrier(2)
    got: list[Any] = [None, None]

    def run(k: int) -> None:
        ledger = Ledger(path, durable=False)
        barrier.wait()
        got[k] = ledger.write(lambda tx: reshape.reserve(tx, recuts[k])).value
        ledger.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sum(1 for g in got if g is not None) == 1, got
    state = Ledger(path, durable=False).read().state
    assert [r["gpu"] for r in state.reshapes.values()] == ["sg-dgx01/gpu3"]
    assert state.problems == []
