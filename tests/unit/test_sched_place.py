"""place() on small hand-made pools and on the bundled simulated pool's real facts."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.errors import UsageError
from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, slices_from_facts
from gpupoolctl.sched import (
    ALLOC_POLICY,
    POLICIES,
    Holder,
    JobRequest,
    NoFit,
    Placement,
    PoolView,
    place,
)

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def whole(host: str, gpu: int, memory: int = 81920, island: int = 0) -> dict[str, Any]:
    return {
        "id": f"{host}/gpu{gpu}",
        "host": host,
        "gpu": gpu,
        "kind": "gpu",
        "profile": None,
        "memory_mib": memory,
        "vendor": "nvidia",
        "model": "NVIDIA H100 80GB HBM3",
        "bandwidth_class": "ultra",
        "island": f"{host}/island{island}",
        "uuid": f"GPU-{host}-{gpu}",
    }


def mig(host: str, gpu: int, start: int, profile: str = "1g.10gb", memory: int = 9984) -> dict:
    return {
        **whole(host, gpu),
        "id": f"{host}/gpu{gpu}/mig-{profile}@{start}",
        "kind": "mig",
        "profile": profile,
        "memory_mib": memory,
    }


def held(*ids: str, alloc: str = "a-1") -> Holder:
    return Holder(alloc=alloc, slices=ids)


def test_best_fit_takes_least_waste_then_packs_gpus_and_hosts():
    slices = [whole("a", 0), whole("b", 0), whole("b", 1)]
    slices += [mig("c", 0, k) for k in range(3)] + [mig("c", 1, k) for k in range(3)]
    view = PoolView(slices, [held("b/gpu0"), held("c/gpu1/mig-1g.10gb@2", alloc="a-2")])
    small = place(JobRequest(memory_mib=9000), view)
    assert isinstance(small, Placement)
    assert small.slices == ["c/gpu1/mig-1g.10gb@0"]  # a GPU already partly used
    assert small.waste_mib == 984
    card = place(JobRequest(profile="gpu"), view)
    assert isinstance(card, Placement) and card.slices == ["b/gpu1"]  # a host partly used
    # alloc's rule is least memory, then id: no packing
    assert place(JobRequest(profile="gpu"), view, ALLOC_POLICY).slices == ["a/gpu0"]
    assert place(JobRequest(memory_mib=9000), view, ALLOC_POLICY).slices == ["c/gpu0/mig-1g.10gb@0"]


def test_best_fit_multi_slice_stays_on_the_gpu_it_started():
    slices = [mig("c", g, k) for g in range(2) for k in range(4)]
    view = PoolView(slices, [held("c/gpu1/mig-1g.10gb@3")])
    result = place(JobRequest(gpus=3, profile="1g.10gb"), view)
    assert isinstance(result, Placement)
    assert result.slices == [f"c/gpu1/mig-1g.10gb@{k}" for k in range(3)]
    assert result.hosts == ["c"]


def test_spread_prefers_the_least_loaded_host_and_gpu():
    slices = [whole(h, g) for h in ("a", "b") for g in range(2)]
    view = PoolView(slices, [held("a/gpu0")])
    assert place(JobRequest(), view, "spread").slices == ["b/gpu0"]
    two = place(JobRequest(gpus=2), view, "spread")
    assert isinstance(two, Placement) and two.slices == ["b/gpu0", "a/gpu1"]
    assert two.hosts == ["a", "b"]


def test_same_island_same_node_and_topology():
    slices = [whole("a", g, island=0 if g < 3 else 1) for g in range(4)]
    slices += [whole("b", g, island=g) for g in range(4)]  # PCIe only: islands of one
    view = PoolView(slices, [held("a/gpu0")])
    three = place(JobRequest(gpus=3, same_island=True), view)
    assert isinstance(three, NoFit) and not three.never  # a/island0: 2 of 3 free now
    assert "most free on one island: 2" in three.reason
    assert isinstance(place(JobRequest(gpus=3, same_island=True), PoolView(slices)), Placement)
    assert place(JobRequest(gpus=4, same_island=True), view).never
    two = place(JobRequest(gpus=2, same_island=True), view)
    assert isinstance(two, Placement) and two.slices == ["a/gpu1", "a/gpu2"]  # in-use island
    topo = place(JobRequest(gpus=2), view, "topology")
    assert isinstance(topo, Placement) and topo.slices == ["a/gpu1", "a/gpu2"]
    assert any("island" in line for line in topo.why)
    # no island can hold 3 now: topology falls back to one host and says so
    fallback = place(JobRequest(gpus=3), view, "topology")
    assert isinstance(fallback, Placement) and fallback.hosts == ["a"]
    assert "no single island can hold 3" in fallback.why[1]
    node = place(JobRequest(gpus=4, same_node=True), view)
    assert isinstance(node, Placement) and node.hosts == ["b"]
    never = place(JobRequest(gpus=5, same_node=True), view)
    assert isinstance(never, NoFit) and never.never and "the most: 4" in never.reason


def test_nofit_says_never_only_when_an_empty_pool_could_not():
    view = PoolView([whole("a", 0), whole("a", 1)], [held("a/gpu0", "a/gpu1")])
    busy = place(JobRequest(gpus=2), view)
    assert isinstance(busy, NoFit) and not busy.never
    assert "0 matching slice(s) free of 2" in busy.reason
    too_many = place(JobRequest(gpus=3), view)
    assert isinstance(too_many, NoFit) and too_many.never
    assert "only 2 slice(s)" in too_many.reason
    nothing = place(JobRequest(memory_mib=200_000), view)
    assert isinstance(nothing, NoFit) and nothing.never and "no slice" in nothing.reason


def test_why_names_candidates_and_the_reason_of_the_winner():
    slices = [whole("a", 0), *[mig("c", 0, k) for k in range(3)]]
    result = place(JobRequest(memory_mib=9000), PoolView(slices))
    assert isinstance(result, Placement)
    text = "\n".join(result.why)
    assert "considered 4 free matching slice(s) of 4" in text
    assert "chose c/gpu0/mig-1g.10gb@0" in text and "3 free candidate(s) of this size" in text
    assert "waste 0.9 GiB" in text  # 984 MiB, rounded down as every GiB figure is


def test_place_leaves_the_view_as_it_was_and_refuses_unknown_policies():
    slices = [whole("a", g) for g in range(4)]
    view = PoolView(slices, [held("a/gpu1")])
    before = set(view.free)
    place(JobRequest(gpus=3), view, "spread")
    place(JobRequest(gpus=9), view)
    assert set(view.free) == before
    with pytest.raises(UsageError, match="unknown placement policy"):
        place(JobRequest(), view, "first-fit")
    assert POLICIES == ("best-fit", "spread", "topology")


def test_view_refuses_double_holds():
    view = PoolView([whole("a", 0)], [held("a/gpu0")])
    with pytest.raises(ValueError):
        view.hold(["a/gpu0"], Holder(alloc="a-2", slices=("a/gpu0",)))
    view.unhold("a-1")
    assert set(view.free) == {"a/gpu0"}


def test_from_state_knows_job_holds_and_ignores_expired_ones(tmp_path):
    now = T0
    ledger = Ledger(tmp_path / "l.jsonl", durable=False, actor="t@h", clock=lambda: now)
    ledger.refresh_slices(["a"], [whole("a", g) for g in range(4)])
    manual = hold(ledger, JobRequest(profile="gpu"), owner="alice").value
    short = hold(ledger, JobRequest(profile="gpu"), owner="bob", ttl=timedelta(minutes=5)).value
    with ledger.transaction() as tx:
        alloc_id = f"a-{tx.next_seq}"
        request = JobRequest(priority=10, preemptible=True).to_dict()
        tx.append(
            "alloc",
            {
                "id": alloc_id,
                "owner": "carol",
                "slices": ["a/gpu2"],
                "uuids": [None],
                "expires": None,
                "request": {**request, "job": "j-1"},
            },
        )
        tx.append("job", {"id": "j-1", "state": "running", "alloc": alloc_id})
    state = ledger.read().state
    view = PoolView.from_state(state, now)
    assert view.holder("a/gpu0").alloc == manual.id
    assert view.holder("a/gpu0").priority is None and not view.holder("a/gpu0").preemptible
    job = view.holder("a/gpu2")
    assert (job.job, job.priority, job.preemptible, job.victim_id) == ("j-1", 10, True, "j-1")
    assert set(view.free) == {"a/gpu3"}
    later = PoolView.from_state(state, now + timedelta(minutes=6))
    assert set(later.free) == {"a/gpu3", *short.slices}


# -- the bundled simulated pool ---------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_slices(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    from gpupoolctl.inventory import load_inventory
    from gpupoolctl.remote import run_agent
    from gpupoolctl.remote.target import target_from_vars

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUPOOL_SIM_DIR", str(tmp_path_factory.mktemp("sim")))
        inventory = load_inventory(ROOT / "inventories" / "sim.yaml")
        targets = [target_from_vars(h.name, h.vars) for h in inventory.hosts.values()]
        results = run_agent(targets, {"verb": "facts", "args": {}})
        assert all(r.ok for r in results), [r.error for r in results]
        yield [s for r in results for s in slices_from_facts(r.name, r.data)]


def test_bundled_pool_examples_from_the_issue(sim_slices):
    view = PoolView(sim_slices)
    small = place(JobRequest(memory_mib=9537), view)  # --mem 10G: the smallest that fits
    assert isinstance(small, Placement)
    assert view.slices[small.slices[0]]["memory_mib"] == min(
        s["memory_mib"] for s in sim_slices if s["memory_mib"] >= 9537
    )
    train = place(JobRequest(gpus=4, profile="gpu", same_island=True, model="H100"), view)
    assert isinstance(train, Placement) and len(train.hosts) == 1
    assert len({view.slices[s]["island"] for s in train.slices}) == 1
    eval_ = place(JobRequest(profile="3g.40gb"), view)
    assert isinstance(eval_, Placement) and eval_.slices[0].endswith("mig-3g.40gb@0")
    fast = place(JobRequest(profile="gpu", bandwidth_class="ultra", vendor="amd"), view)
    assert isinstance(fast, Placement) and fast.hosts == ["dxb-mi300x-01"]
    never = place(JobRequest(profile="7g.80gb"), view)
    assert isinstance(never, NoFit) and never.never
