"""jobs.reshape against a simulated DGX reached by the real agent (local transport): a
re-cut whose node cannot be read afterwards stays reserved, and the same thread's next
pass closes it once the node answers again."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.jobs import Jobs, Nodes, reshape, scheduling
from gpupoolctl.jobs.repartition import Reserved
from gpupoolctl.ledger import Ledger, slices_from_facts
from gpupoolctl.policy import ElasticPolicy, ElasticRule, PoolPolicy
from gpupoolctl.remote import HostResult, run_agent_each, target_from_vars


class FlakyFacts:
    """The real agent, except that while `down` every facts call fails as unreachable."""

    def __init__(self) -> None:
        self.down = False
        self.verbs: list[str] = []

    def __call__(self, requests: list[tuple[Any, dict[str, Any]]]) -> list[HostResult]:
        self.verbs.extend(r["verb"] for _, r in requests)
        answers = run_agent_each(requests)
        if self.down:
            answers = [
                HostResult(a.name, "unreachable", error="gone") if r["verb"] == "facts" else a
                for a, (_, r) in zip(answers, requests, strict=True)
            ]
        return answers


def elastic_loop(ledger_path: Path, host: str) -> tuple[Jobs, FlakyFacts]:
    """A loop (a Jobs) over a ledger of its own and one simulated DGX, elastic on."""
    target = target_from_vars(host, {"transport": "local", "sim": "dgx-h100"})
    facts = run_agent_each([(target, {"verb": "facts", "args": {}})])[0]
    ledger = Ledger(ledger_path, durable=False)
    ledger.refresh_slices([host], slices_from_facts(host, facts.data))
    runner = FlakyFacts()
    rule = ElasticRule(line=1, profiles=("1g.10gb",))
    policy = PoolPolicy(
        elastic=ElasticPolicy(enabled=True, rules=(rule,), min_idle_s=0, batch_window_s=0)
    )
    return Jobs(ledger, Nodes([target], runner), owner="alice", policy=policy), runner


@pytest.fixture
def dgx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Jobs, FlakyFacts]:
    monkeypatch.setenv("GPUPOOL_SIM_DIR", str(tmp_path / "sim"))
    return elastic_loop(tmp_path / "ledger.jsonl", "dgx")


def test_a_recut_whose_node_is_not_read_again_stays_reserved_until_it_is(dgx) -> None:
    jobs, runner = dgx
    state = jobs.read().state
    inputs = jobs.snapshot(state, jobs.read().now).elastic
    assert inputs is not None
    card = inputs.cards["dgx/gpu0"]
    from gpupoolctl.sched.elastic import Recut

    recut = Recut(card, tuple(("1g.10gb", n) for n in range(7)), "test", ("j-1",), None)
    reserved = jobs.ledger.write(lambda tx: reshape.reserve(tx, recut)).value
    assert reserved is not None

    runner.down = False
    original = runner.__call__

    def down_after_partition(requests: list[tuple[Any, dict[str, Any]]]) -> list[HostResult]:
        answers = original(requests)
        if any(r["verb"] == "partition" for _, r in requests):
            runner.down = True  # the node re-cut the card, then the network went
        return answers

    jobs.nodes = Nodes(list(jobs.nodes.targets.values()), down_after_partition)
    events = reshape.execute(jobs, [reserved])
    assert events == []  # nothing closed
    assert any("kept reserved" in w for w in jobs.warnings)
    assert list(jobs.read().state.reshapes) == [reserved.id]
    # Still held back from placement: the ledger's slices of the card are the old ones.
    assert jobs.read().state.slice_state("dgx/gpu0", jobs.read().now) == "re-cutting"

    # The node answers again; the same thread's next pass closes the reshape (interrupted)
    # and records the slices the node really has now: the new layout.
    runner.down = False
    jobs.nodes = Nodes(list(jobs.nodes.targets.values()), runner)
    outcome = scheduling.schedule(jobs)
    closed = [e.to_dict() for e in outcome.events if e.kind == "reshape-failed"]
    assert [e["gpu"] for e in closed] == ["dgx/gpu0"] and "interrupted" in closed[0]["error"]
    state = jobs.read().state
    assert state.reshapes == {}
    cut = sorted(s for s in state.slices if s.startswith("dgx/gpu0/"))
    assert cut == [f"dgx/gpu0/mig-1g.10gb@{n}" for n in range(7)]


def test_a_reserved_card_stays_blocked_under_the_new_ids_a_refresh_records(dgx) -> None:
    """A refresh of the host while its card is re-cut (another card's re-cut, `ledger show`,
    a partition apply) records the card's half-made slices under new ids: they too may not
    be taken until the reshape is closed."""
    from gpupoolctl.jobs.alloc import alloc
    from gpupoolctl.ledger.errors import NothingFits
    from gpupoolctl.sched import JobRequest, PoolView
    from gpupoolctl.sched.elastic import Recut

    jobs, _ = dgx
    view = jobs.read()
    inputs = jobs.snapshot(view.state, view.now).elastic
    assert inputs is not None
    recut = Recut(inputs.cards["dgx/gpu0"], (("1g.10gb", 0),) * 1, "test", ("j-1",), None)
    assert jobs.ledger.write(lambda tx: reshape.reserve(tx, recut)).value is not None
    half_made = [
        {**s, "id": f"dgx/gpu0/mig-1g.10gb@{n}", "kind": "mig", "profile": "1g.10gb",
         "memory_mib": 9984, "uuid": f"MIG-{n}"}
        for n, s in enumerate([view.state.slices["dgx/gpu0"]] * 3)
    ]  # fmt: skip
    others = [s for k, s in view.state.slices.items() if not k.startswith("dgx/gpu0")]
    jobs.ledger.refresh_slices(["dgx"], others + half_made)
    view = jobs.read()
    states = {view.state.slice_state(s["id"], view.now) for s in half_made}
    assert states == {"re-cutting"}
    pool = PoolView.from_state(view.state, view.now)
    assert not any(pool.is_free(s["id"]) for s in half_made)
    with pytest.raises(NothingFits):  # the only 1g.10gb slices are the card's half-made ones
        alloc(jobs.ledger, JobRequest(profile="1g.10gb"), owner="bob")


def test_a_pass_limited_by_l_never_fails_a_job_elastic_could_serve_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpupoolctl.jobs.spec import JobSpec
    from gpupoolctl.sched import JobRequest

    monkeypatch.setenv("GPUPOOL_SIM_DIR", str(tmp_path / "sim"))
    targets = [target_from_vars(n, {"transport": "local", "sim": "dgx-h100"}) for n in ("a", "b")]
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    for target in targets:
        facts = run_agent_each([(target, {"verb": "facts", "args": {}})])[0]
        ledger.refresh_slices([target.name], slices_from_facts(target.name, facts.data))
    rule = ElasticRule(line=1, hosts="a", profiles=("1g.10gb",))
    policy = PoolPolicy(
        elastic=ElasticPolicy(enabled=True, rules=(rule,), min_idle_s=0, batch_window_s=3600)
    )
    everyone = Jobs(ledger, Nodes(targets, run_agent_each), owner="alice", policy=policy)
    spec = JobSpec(argv=["true"], request=JobRequest(profile="1g.10gb"))

    def queue(tx: Any) -> str:
        job = {"id": f"j-{tx.next_seq}", "owner": "alice", "run": 0, **spec.record()}
        tx.append("job", {**job, "state": "queued"})
        everyone.enqueue(tx, job)
        return str(job["id"])

    job_id = ledger.write(queue).value
    only_b = Jobs(ledger, Nodes(targets, run_agent_each), owner="alice", policy=policy, hosts={"b"})
    outcome = scheduling.schedule(only_b)
    assert [e.kind for e in outcome.events if getattr(e, "job", None) == job_id] == ["waiting"]
    assert ledger.read().state.jobs[job_id]["state"] == "queued"  # not failed


def reserve_gpu1(jobs: Jobs) -> Reserved:
    """Reserve the loop's gpu1 for a re-cut into one 1g.10gb, as a pass would."""
    from gpupoolctl.sched.elastic import Recut

    view = jobs.read()
    inputs = jobs.snapshot(view.state, view.now).elastic
    assert inputs is not None
    host = next(iter(jobs.nodes.targets))
    recut = Recut(inputs.cards[f"{host}/gpu1"], (("1g.10gb", 0),), "test", ("j-1",), None)
    reserved = jobs.ledger.write(lambda tx: reshape.reserve(tx, recut)).value
    assert reserved is not None
    return reserved


def recut_unanswered(jobs: Jobs, runner: FlakyFacts) -> Reserved:
    """A re-cut the node makes, but whose answer is lost: kept reserved."""
    reserved = reserve_gpu1(jobs)

    def no_answer(requests: list[tuple[Any, dict[str, Any]]]) -> list[HostResult]:
        answers = runner(requests)  # the node does it...
        return [  # ...but the answer is lost
            HostResult(a.name, "timed-out", error="slow", error_type="CommandTimeout")
            if r["verb"] == "partition"
            else a
            for a, (_, r) in zip(answers, requests, strict=True)
        ]

    targets = list(jobs.nodes.targets.values())
    jobs.nodes = Nodes(targets, no_answer)
    assert reshape.execute(jobs, [reserved]) == []
    assert any("got no answer" in w for w in jobs.warnings)
    jobs.nodes = Nodes(targets, runner)
    return reserved


def test_a_recut_that_got_no_answer_stays_reserved_while_its_node_may_be_at_it(dgx) -> None:
    jobs, runner = dgx
    reserved = recut_unanswered(jobs, runner)
    # The next pass of the same thread leaves it reserved: the node may still be at it.
    scheduling.schedule(jobs)
    assert list(jobs.read().state.reshapes) == [reserved.id]


def test_two_loops_in_one_process_do_not_share_what_went_unanswered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPOOL_SIM_DIR", str(tmp_path / "sim"))
    one, one_runner = elastic_loop(tmp_path / "one.jsonl", "dgx-one")
    two, _ = elastic_loop(tmp_path / "two.jsonl", "dgx-two")
    # Loop one: a re-cut whose answer was lost (its node may still be at it).
    unanswered = recut_unanswered(one, one_runner)
    # Loop two, on a ledger of its own: a reservation that an earlier call of this thread
    # left open (it ended before closing it), with the same id in its own ledger.
    left_open = reserve_gpu1(two)
    assert left_open.id == unanswered.id
    # Loop two's next pass recovers what it left: its node answers and is not at it.
    scheduling.schedule(two)
    assert two.read().state.reshapes == {}
    # Loop one still waits for its own: nothing loop two did changed what it knows.
    scheduling.schedule(one)
    assert list(one.read().state.reshapes) == [unanswered.id]


def test_a_hold_that_expired_counts_idle_from_its_expiry(dgx) -> None:
    import time

    from gpupoolctl.ledger.units import format_ts, parse_ts, utc_now

    jobs, _ = dgx
    expires = format_ts(utc_now() + timedelta(seconds=0.3))

    def hold(tx: Any) -> None:
        tx.append(
            "alloc",
            {"id": "a-x", "owner": "alice", "slices": ["dgx/gpu2"], "expires": expires},
        )

    jobs.ledger.write(hold)
    began = jobs.read().state.card_changed["dgx/gpu2"]
    time.sleep(0.5)  # past the expiry; no release or expire record is written
    view = jobs.read()
    assert "a-x" in view.state.allocations  # still recorded, but expired
    inputs = jobs.snapshot(view.state, view.now).elastic
    assert inputs is not None
    # Idle since it expired, not since the hold began: min-idle counts from the expiry.
    assert inputs.changed["dgx/gpu2"] == parse_ts(expires) > parse_ts(began)


def test_an_amd_node_with_two_hives_is_not_elastic() -> None:
    """A compute change renumbers every AMD logical GPU of the node: with two hives on one
    node, neither can change alone (the node's facts would never match a one-hive re-cut)."""
    from gpupoolctl.sched.cards import AmdHive, cards_of

    def card(index: int, island: int) -> dict[str, Any]:
        return {
            "id": f"m/gpu{index}", "host": "m", "gpu": index, "kind": "gpu", "profile": None,
            "memory_mib": 196592, "vendor": "amd", "model": "AMD Instinct MI300X",
            "island": f"m/island{island}",
        }  # fmt: skip

    one = cards_of([card(i, 0) for i in range(4)])
    assert [type(c) for c in one.values()] == [AmdHive]
    assert cards_of([card(i, i // 2) for i in range(4)]) == {}
