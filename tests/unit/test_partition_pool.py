"""Partition planning against the bundled simulated pool's real facts (agent run locally)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupoolctl.inventory import load_inventory
from gpupoolctl.partition import (
    assert_host,
    export_config,
    load_spec,
    parse_spec,
    plan_host,
    reset_plan,
)
from gpupoolctl.remote import run_agent
from gpupoolctl.remote.target import target_from_vars

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "mig-parted"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """{host: (groups, facts)} for every host of inventories/sim.yaml, on a fresh sim state."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUPOOL_SIM_DIR", str(tmp_path_factory.mktemp("sim")))
        inventory = load_inventory(ROOT / "inventories" / "sim.yaml")
        hosts = list(inventory.hosts.values())
        targets = [target_from_vars(h.name, h.vars) for h in hosts]
        results = run_agent(targets, {"verb": "facts", "args": {}})
        assert all(r.ok for r in results), [r.error for r in results]
        yield {h.name: (h.groups, r.data) for h, r in zip(hosts, results, strict=True)}


def test_pool_has_the_shapes_the_tests_rely_on(pool: dict[str, Any]) -> None:
    _, dgx02 = pool["sg-dgx02"]
    assert [g["mig"]["mode"] for g in dgx02["gpus"]][6:] == ["enabled", "enabled"]
    _, mi = pool["dxb-mi300x-01"]
    assert mi["gpus"][0]["partition"]["compute"] == "SPX"


@pytest.mark.parametrize("label", ["training", "inference", "mixed"])
def test_every_playbook_label_plans_without_errors(pool: dict[str, Any], label: str) -> None:
    spec = load_spec(ROOT / "playbooks" / "layouts.yaml")
    assert spec.labels == ["training", "inference", "mixed"]
    for host, (groups, facts) in pool.items():
        plan = plan_host(spec, label, host, groups, facts)
        assert plan.errors == [], plan.errors


def test_playbook_inference_slices_every_card_kind(pool: dict[str, Any]) -> None:
    spec = load_spec(ROOT / "playbooks" / "layouts.yaml")
    groups, facts = pool["sg-dgx01"]
    plan = plan_host(spec, "inference", "sg-dgx01", groups, facts)
    assert {g.desired for g in plan.gpus} == {"MIG 7x1g.10gb"}
    groups, facts = pool["dxb-a100-01"]
    plan = plan_host(spec, "inference", "dxb-a100-01", groups, facts)
    assert {g.desired for g in plan.gpus} == {"MIG 7x1g.5gb"}
    groups, facts = pool["dxb-mi300x-01"]
    plan = plan_host(spec, "inference", "dxb-mi300x-01", groups, facts)
    assert {g.desired for g in plan.gpus} == {"CPX/NPS4"}
    groups, facts = pool["dxb-l40s-01"]
    assert plan_host(spec, "inference", "dxb-l40s-01", groups, facts).gpus == []


def test_playbook_mixed_pins_the_3g_and_keeps_the_kept(pool: dict[str, Any]) -> None:
    spec = load_spec(ROOT / "playbooks" / "layouts.yaml")
    groups, facts = pool["sg-dgx02"]
    plan = plan_host(spec, "mixed", "sg-dgx02", groups, facts)
    gpu7 = next(g for g in plan.gpus if g.index == 7)  # now 2x3g.40gb at 0 and 4
    assert ("3g.40gb", 4) in gpu7.placements
    # The 3g.40gb at slot 4 stays; only the one at slot 0 goes.
    destroyed = [op["gi"] for op in gpu7.ops if op["op"] == "destroy_gi"]
    gi_at_0 = next(
        gi["gi_id"] for gi in facts["gpus"][7]["mig"]["instances"] if gi["placement_start"] == 0
    )
    assert destroyed == [gi_at_0]
    assert all(g.unchanged for g in plan.gpus if g.index < 4)  # MIG already off there


def test_training_on_a_fresh_pool_changes_only_the_mig_cards(pool: dict[str, Any]) -> None:
    spec = load_spec(ROOT / "playbooks" / "layouts.yaml")
    changed = {}
    for host, (groups, facts) in pool.items():
        plan = plan_host(spec, "training", host, groups, facts)
        changed[host] = sorted(g.index for g in plan.gpus if not g.unchanged)
    assert changed == {
        "sg-dgx01": [],
        "sg-dgx02": [6, 7],
        "sg-a100-01": [3],
        "dxb-a100-01": [3],
        "dxb-mi300x-01": [],
        "dxb-l40s-01": [],
    }


def test_export_round_trips_through_parse_and_assert(pool: dict[str, Any]) -> None:
    facts_by_host = {host: facts for host, (_, facts) in pool.items()}
    config = export_config(facts_by_host)
    assert config["version"] == "v1" and list(config["mig-configs"]) == ["current"]
    text = yaml.safe_dump(config, sort_keys=False)
    spec = parse_spec(text, "export.yaml")
    for host, (groups, facts) in pool.items():
        assert assert_host(spec, "current", host, groups, facts) == [], host
        assert not plan_host(spec, "current", host, groups, facts).changed, host
    # Hosts differ, so entries name their hosts; identical hosts share entries.
    entries = config["mig-configs"]["current"]
    assert all("hosts" in e for e in entries)
    assert any(e["hosts"] == ["dxb-a100-01", "sg-a100-01"] for e in entries)


def test_export_of_identical_hosts_has_no_host_selection(pool: dict[str, Any]) -> None:
    _, facts = pool["sg-a100-01"]
    config = export_config({"a": facts, "b": facts}, label="snap")
    entries = config["mig-configs"]["snap"]
    assert not any("hosts" in e for e in entries)
    assert entries[-1] == {
        "device-filter": "0x20F110DE",
        "devices": [3],
        "mig-enabled": True,
        "mig-devices": {"2g.10gb": 2, "3g.20gb": 1},
    }


def test_assert_holds_only_where_the_state_matches(pool: dict[str, Any]) -> None:
    spec = load_spec(FIXTURES / "deployments" / "systemd" / "config-default.yaml")
    groups, facts = pool["sg-dgx01"]
    assert assert_host(spec, "all-disabled", "sg-dgx01", groups, facts) == []
    mismatches = assert_host(spec, "all-1g.10gb", "sg-dgx01", groups, facts)
    assert len(mismatches) == 8 and "MIG is disabled, wanted enabled" in mismatches[0]
    groups, facts = pool["sg-dgx02"]
    problems = assert_host(spec, "all-disabled", "sg-dgx02", groups, facts)
    assert [p.split(":")[0] for p in problems] == [
        "sg-dgx02 GPU 6 (NVIDIA H100 80GB HBM3)",
        "sg-dgx02 GPU 7 (NVIDIA H100 80GB HBM3)",
    ]


def test_mig_parted_default_config_on_the_pool(pool: dict[str, Any]) -> None:
    spec = load_spec(FIXTURES / "deployments" / "systemd" / "config-default.yaml")
    groups, facts = pool["sg-dgx02"]
    plan = plan_host(spec, "all-1g.10gb", "sg-dgx02", groups, facts)
    assert plan.errors == []
    by_index = {g.index: g for g in plan.gpus}
    assert by_index[6].unchanged  # already 7x1g.10gb: no ops
    assert by_index[7].desired == "MIG 7x1g.10gb" and not by_index[7].unchanged
    # 1g.10gb on A100-40GB is the two-slot profile: four of them (mig-parted's own entry).
    groups, facts = pool["sg-a100-01"]
    plan = plan_host(spec, "all-1g.10gb", "sg-a100-01", groups, facts)
    assert {g.desired for g in plan.gpus} == {"MIG 4x1g.10gb"}
    # A profile the model lacks is an error naming file:line, GPU, model and valid choices.
    groups, facts = pool["sg-dgx01"]
    plan = plan_host(spec, "all-1g.5gb", "sg-dgx01", groups, facts)
    assert plan.gpus == [] and len(plan.errors) == 8
    assert plan.errors[0].startswith(f"{FIXTURES / 'deployments/systemd/config-default.yaml'}:17: ")
    assert "sg-dgx01 GPU 0 (NVIDIA H100 80GB HBM3)" in plan.errors[0]
    assert "valid: 1g.10gb, 1g.10gb+me, 1g.20gb" in plan.errors[0]


def test_reset_plan_returns_every_card_to_whole(pool: dict[str, Any]) -> None:
    for host, (_, facts) in pool.items():
        plan = reset_plan(host, facts)
        assert plan.errors == []
        for gpu in plan.gpus:
            assert gpu.desired in ("MIG off", "SPX/NPS1")
    plan = reset_plan("sg-dgx02", pool["sg-dgx02"][1])
    args = plan.agent_args(force=True)
    # GPUs 6 and 7 change; the whole ones go along with no ops, to be checked unchanged.
    changing = [g["index"] for g in args["gpus"] if g["ops"]]
    assert changing == [6, 7] and args["force"] is True
    assert [g["index"] for g in args["gpus"]] == list(range(8))
    assert args["gpus"][7]["ops"][-1] == {"op": "set_mig_mode", "enabled": False}


def test_plans_applied_by_the_agent_hold_and_export_round_trips(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The planner's ops, run by the agent's partition verb on the sim, give what was asked."""
    monkeypatch.setenv("GPUPOOL_SIM_DIR", str(tmp_path))
    hosts = list(load_inventory(ROOT / "inventories" / "sim.yaml").hosts.values())
    targets = {h.name: target_from_vars(h.name, h.vars) for h in hosts}

    def read() -> dict[str, Any]:
        results = run_agent(list(targets.values()), {"verb": "facts", "args": {}})
        assert all(r.ok for r in results), [r.error for r in results]
        return {r.name: r.data for r in results}

    def apply(plans: list[Any]) -> None:
        for plan in plans:
            if plan.changed:
                result = run_agent(
                    [targets[plan.host]], {"verb": "partition", "args": plan.agent_args(False)}
                )[0]
                assert result.ok, result.error
                assert all(g["ok"] for g in result.data["gpus"]), result.data

    spec = load_spec(ROOT / "playbooks" / "layouts.yaml")
    for label in ("mixed", "inference", "mixed"):
        facts = read()
        apply([plan_host(spec, label, h.name, h.groups, facts[h.name]) for h in hosts])
        facts = read()
        for h in hosts:
            assert assert_host(spec, label, h.name, h.groups, facts[h.name]) == [], (label, h.name)
            assert not plan_host(spec, label, h.name, h.groups, facts[h.name]).changed
    exported = parse_spec(yaml.safe_dump(export_config(facts), sort_keys=False), "export.yaml")
    for h in hosts:
        assert assert_host(exported, "current", h.name, h.groups, facts[h.name]) == []
    apply([reset_plan(h.name, facts[h.name]) for h in hosts])
    facts = read()
    for h in hosts:
        assert assert_host(spec, "training", h.name, h.groups, facts[h.name]) == []
        assert not reset_plan(h.name, facts[h.name]).changed
