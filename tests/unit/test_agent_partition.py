"""The agent's `partition` verb on simulated nodes: every op, refusals, rollback, hooks."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl import sim as simulation
from gpupoolctl.agent.main import handle
from gpupoolctl.sim import amdsmi as fake_amd
from gpupoolctl.sim import pynvml as fake_nvml
from gpupoolctl.sim.state import SimState

Agent = Callable[..., dict[str, Any]]


class Node:
    """One simulated node, driven through the agent's own request handling."""

    def __init__(self, tmp_path: Path, template: str, host: str = "n1") -> None:
        self.host = host
        self.sim = {"template": template, "state_dir": str(tmp_path)}
        self.state = SimState.reset(host, template, tmp_path)

    def ask(self, verb: str, args: Any = None) -> dict[str, Any]:
        return handle({"v": 1, "verb": verb, "host": self.host, "sim": self.sim, "args": args})

    def facts(self) -> dict[str, Any]:
        answer = self.ask("facts")
        assert answer["ok"], answer["error"]
        return answer["data"]

    def gpu(self, index: int) -> dict[str, Any]:
        return self.facts()["gpus"][index]

    def partition(
        self,
        plans: list[tuple[int, list[dict[str, Any]]]],
        force: bool = False,
        hooks: dict[str, list[list[str]]] | None = None,
        uuids: dict[int, str] | None = None,
    ) -> dict[str, Any]:
        gpus = {g["index"]: g for g in self.facts()["gpus"]}
        args: dict[str, Any] = {
            "gpus": [
                {
                    "index": index,
                    "uuid": (uuids or {}).get(index, gpus[index]["uuid"]),
                    "vendor": gpus[index]["vendor"],
                    "ops": ops,
                }
                for index, ops in plans
            ],
            "force": force,
        }
        if hooks is not None:
            args["hooks"] = hooks
        answer = self.ask("partition", args)
        assert answer["ok"], answer["error"]
        return answer["data"]

    def reload(self) -> SimState:
        return SimState.load(self.state.path)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[[str], Node]]:
    yield lambda template: Node(tmp_path, template)
    simulation.deactivate()
    fake_nvml.bind(None)
    fake_amd.bind(None)


def layout(gpu: dict[str, Any]) -> tuple[Any, ...]:
    """What a partition layout is, without what no driver can keep (MIG device UUIDs)."""
    mig = gpu.get("mig") or {}
    instances = tuple(
        (
            i["profile"],
            i["placement_start"],
            i["placement_size"],
            tuple(c["profile"] for c in i["compute_instances"]),
        )
        for i in mig.get("instances", [])
    )
    amd = gpu.get("partition") or {}
    return (
        mig.get("mode"),
        mig.get("pending"),
        instances,
        amd.get("compute"),
        amd.get("memory"),
        (gpu.get("sriov") or {}).get("num_vfs"),
    )


def node_layout(facts: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(g["uuid"], *layout(g)) for g in facts["gpus"]]


def teardown_ops(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    instances = gpu["mig"]["instances"]
    return [
        {"op": "destroy_ci", "gi": gi["gi_id"], "ci": ci["ci_id"]}
        for gi in instances
        for ci in gi["compute_instances"]
    ] + [{"op": "destroy_gi", "gi": gi["gi_id"]} for gi in instances]


def create(profile: str, profile_id: int, start: int, size: int, **extra: Any) -> dict[str, Any]:
    return {
        "op": "create_gi",
        "profile": profile,
        "profile_id": profile_id,
        "start": start,
        "size": size,
        **extra,
    }


ENABLE = {"op": "set_mig_mode", "enabled": True}
DISABLE = {"op": "set_mig_mode", "enabled": False}


# -- NVIDIA ops --------------------------------------------------------------------------------


def test_every_nvidia_op(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100-mig")
    before = n.facts()
    ops0 = [
        ENABLE,
        create("3g.40gb", 9, 0, 4, compute_instances=["1c.3g.40gb"] * 3),
        create("2g.20gb", 14, 4, 2),
        create("1g.10gb", 19, 6, 1),
    ]
    ops7 = [*teardown_ops(before["gpus"][7]), DISABLE]
    result = n.partition([(0, ops0), (7, ops7)])
    assert [g["ok"] for g in result["gpus"]] == [True, True], result
    assert [g["applied"] for g in result["gpus"]] == [4, 5]
    assert result["hooks"] == [] and result["warnings"] == [] and result["stopped_by"] is None
    after = n.facts()["gpus"]
    assert layout(after[0])[:3] == (
        "enabled",
        "enabled",
        (
            ("3g.40gb", 0, 4, ("1c.3g.40gb",) * 3),
            ("2g.20gb", 4, 2, ("2g.20gb",)),
            ("1g.10gb", 6, 1, ("1g.10gb",)),
        ),
    )
    assert layout(after[7])[:3] == ("disabled", "disabled", ())
    # GPUs not in the request are untouched.
    assert node_layout({"gpus": after[1:7]}) == node_layout({"gpus": before["gpus"][1:7]})


def test_profile_is_looked_up_by_id_and_its_name_checked(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100")
    # Id 9 is 3g.40gb on H100; a plan that thinks it is A100's 3g.20gb is refused, not run.
    result = n.partition([(0, [ENABLE, create("3g.20gb", 9, 0, 4)])])
    outcome = result["gpus"][0]
    assert not outcome["ok"] and outcome["rolled_back"]
    assert "3g.40gb" in outcome["error"] and "not 3g.20gb" in outcome["error"]
    assert layout(n.gpu(0))[:3] == ("disabled", "disabled", ())
    unknown = n.partition([(0, [ENABLE, create("9g.99gb", 77, 0, 8)])])["gpus"][0]
    assert "no GPU instance profile id 77" in unknown["error"] and unknown["rolled_back"]


# -- rollback ----------------------------------------------------------------------------------


def test_fault_at_nth_gi_create_restores_exact_layout(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100-mig")
    before = n.facts()
    fake_nvml.sim_add_fault(n.state, "create_gpu_instance", gpu=7, nth=3)
    ops = [*teardown_ops(before["gpus"][7]), *(create("1g.10gb", 19, s, 1) for s in range(7))]
    outcome = n.partition([(7, ops)])["gpus"][0]
    assert outcome["ok"] is False
    assert outcome["applied"] == 4 + 2  # the teardown and two creates ran, the third failed
    assert "create_gi 1g.10gb@2:1 (step 7 of 11)" in outcome["error"]
    assert "Insufficient resources" in outcome["error"]
    assert outcome["rolled_back"] is True and outcome["rollback_error"] is None
    after = n.facts()
    assert node_layout(after) == node_layout(before)
    # Same GPU instance ids too, here: the sim, like the driver, reuses the lowest free id.
    ids = [[gi["gi_id"] for gi in f["gpus"][7]["mig"]["instances"]] for f in (before, after)]
    assert ids[0] == ids[1]


def test_rollback_restores_mig_mode(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100")
    before = n.facts()
    fake_nvml.sim_add_fault(n.state, "create_gpu_instance", gpu=2, nth=2)
    ops = [ENABLE, create("3g.40gb", 9, 0, 4), create("3g.40gb", 9, 4, 4)]
    outcome = n.partition([(2, ops)])["gpus"][0]
    assert outcome["rolled_back"] and outcome["applied"] == 2
    assert node_layout(n.facts()) == node_layout(before)


def test_failure_inside_compute_instance_creation_rolls_back(
    node: Callable[[str], Node],
) -> None:
    n = node("a100-pcie-4")
    before = n.facts()
    fake_nvml.sim_add_fault(n.state, "create_compute_instance", gpu=3, nth=1)
    ops = [*teardown_ops(before["gpus"][3]), create("7g.40gb", 0, 0, 8)]
    outcome = n.partition([(3, ops)])["gpus"][0]
    assert outcome["rolled_back"], outcome
    assert node_layout(n.facts()) == node_layout(before)


def test_unknown_compute_instance_profile_rolls_back(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100")
    outcome = n.partition(
        [(1, [ENABLE, create("2g.20gb", 14, 0, 2, compute_instances=["5c.2g.20gb"])])]
    )["gpus"][0]
    assert outcome["rolled_back"] and "no compute instance profile '5c.2g.20gb'" in outcome["error"]
    assert layout(n.gpu(1))[0] == "disabled"


def test_rollback_that_cannot_restore_says_so(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100-mig")
    before = n.facts()
    # Every create fails from the first on, so the destroyed instances cannot come back.
    fake_nvml.sim_add_fault(n.state, "create_gpu_instance", gpu=7, nth=1, times=-1)
    ops = [*teardown_ops(before["gpus"][7]), create("7g.80gb", 0, 0, 8)]
    outcome = n.partition([(7, ops)])["gpus"][0]
    assert outcome["ok"] is False and outcome["rolled_back"] is False
    assert "3g.40gb@0:4" in outcome["rollback_error"]
    assert "is missing" in outcome["rollback_error"]


def test_gpus_are_independent(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100")
    fake_nvml.sim_add_fault(n.state, "create_gpu_instance", gpu=1, nth=1)
    ops = [ENABLE, create("7g.80gb", 0, 0, 8)]
    result = n.partition([(0, ops), (1, ops), (2, ops)])
    assert [g["ok"] for g in result["gpus"]] == [True, False, True]
    assert result["gpus"][1]["rolled_back"]
    modes = [layout(g)[0] for g in n.facts()["gpus"][:3]]
    assert modes == ["enabled", "disabled", "enabled"]


# -- refusals ----------------------------------------------------------------------------------


def test_uuid_mismatch_is_refused(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100")
    before = n.facts()
    other = before["gpus"][1]["uuid"]
    outcome = n.partition([(0, [ENABLE])], uuids={0: other})["gpus"][0]
    assert outcome["ok"] is False and outcome["applied"] == 0 and not outcome["rolled_back"]
    assert f"plan was made for {other}" in outcome["error"]
    assert node_layout(n.facts()) == node_layout(before)


def test_missing_gpu_is_refused(node: Callable[[str], Node]) -> None:
    n = node("l40s-4")
    answer = n.ask(
        "partition",
        {"gpus": [{"index": 9, "uuid": "GPU-x", "vendor": "nvidia", "ops": [ENABLE]}]},
    )
    assert answer["ok"]
    assert "GPU 9 does not exist" in answer["data"]["gpus"][0]["error"]


def test_busy_instance_refused_unless_forced(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100-mig")
    before = n.facts()
    gpu7 = before["gpus"][7]
    gi_ids = [gi["gi_id"] for gi in gpu7["mig"]["instances"]]
    # A job the driver does not attribute to an instance: it could be on the one going away.
    fake_nvml.sim_add_process(n.state, 7, pid=4242, name="train.py")
    ops = [*teardown_ops(gpu7), create("7g.80gb", 0, 0, 8)]
    refused = n.partition([(7, ops)])["gpus"][0]
    assert refused["ok"] is False and refused["applied"] == 0
    assert "busy: pid 4242 (train.py)" in refused["error"] and "--force" in refused["error"]
    assert node_layout(n.facts()) == node_layout(before)
    forced = n.partition([(7, ops)], force=True)["gpus"][0]
    assert forced["ok"] is True, forced
    assert layout(n.gpu(7))[2] == (("7g.80gb", 0, 8, ("7g.80gb",)),)
    assert gi_ids  # the teardown really destroyed instances


def test_jobs_on_other_instances_do_not_block(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100-mig")
    gpu6 = n.gpu(6)
    keep, drop = gpu6["mig"]["instances"][0], gpu6["mig"]["instances"][1]
    fake_nvml.sim_add_process(n.state, 6, pid=77, gpu_instance_id=keep["gi_id"])
    ops = [
        {"op": "destroy_ci", "gi": drop["gi_id"], "ci": 0},
        {"op": "destroy_gi", "gi": drop["gi_id"]},
    ]
    assert n.partition([(6, ops)])["gpus"][0]["ok"] is True
    fake_nvml.sim_add_process(
        n.state, 6, pid=78, gpu_instance_id=gpu6["mig"]["instances"][2]["gi_id"]
    )
    third = gpu6["mig"]["instances"][2]
    busy = n.partition([(6, [{"op": "destroy_ci", "gi": third["gi_id"], "ci": 0}])])["gpus"][0]
    assert f"pid 78 (python3) on GPU instance {third['gi_id']}" in busy["error"]


def test_forced_mode_change_the_driver_refuses_is_rolled_back(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100")
    fake_nvml.sim_add_process(n.state, 0, pid=99)
    before = n.facts()
    assert "busy: pid 99" in n.partition([(0, [ENABLE])])["gpus"][0]["error"]
    outcome = n.partition([(0, [ENABLE])], force=True)["gpus"][0]
    # --force passes our check; NVML still answers IN_USE, and the pending mode is undone.
    assert outcome["ok"] is False and "in use" in outcome["error"]
    assert outcome["rolled_back"] is True
    assert node_layout(n.facts()) == node_layout(before)


def test_ampere_mode_change_waits_for_a_reset(node: Callable[[str], Node]) -> None:
    n = node("a100-pcie-4")
    with n.state.mutate() as data:
        data["nvidia"]["gpus"][0]["mig"]["reset_required"] = True
    only_mode = n.partition([(0, [ENABLE])])["gpus"][0]
    assert only_mode == {**only_mode, "ok": True, "applied": 1, "reset_required": True}
    assert layout(n.gpu(0))[:2] == ("disabled", "enabled")
    with n.state.mutate() as data:
        data["nvidia"]["gpus"][1]["mig"]["reset_required"] = True
    more = n.partition([(1, [ENABLE, create("7g.40gb", 0, 0, 8)])])["gpus"][0]
    assert more["ok"] is False and more["reset_required"] and not more["rolled_back"]
    assert more["applied"] == 1 and "nvidia-smi -r -i 0000:31:00.0" in more["error"]
    assert "1 operation(s) wait for it" in more["error"]


def test_cancelling_a_pending_mode_does_not_wait_for_running_work(
    node: Callable[[str], Node],
) -> None:
    n = node("a100-pcie-4")
    with n.state.mutate() as data:
        data["nvidia"]["gpus"][0]["mig"]["reset_required"] = True
    assert n.partition([(0, [ENABLE])])["gpus"][0]["reset_required"]
    fake_nvml.sim_add_process(n.state, 0, pid=31337, name="train")
    # Disabling a card whose MIG is off only withdraws the pending enable: the job is not
    # touched, so it is no reason to refuse.
    cancel = n.partition([(0, [DISABLE])])["gpus"][0]
    assert cancel == {**cancel, "ok": True, "applied": 1, "reset_required": False}, cancel
    assert layout(n.gpu(0))[:2] == ("disabled", "disabled")
    # Enabling it for real is a whole-card change, and the job is in the way.
    assert "busy: pid 31337 (train)" in n.partition([(0, [ENABLE])])["gpus"][0]["error"]


# -- AMD ---------------------------------------------------------------------------------------


def amd_ops(memory: str, compute: str) -> list[dict[str, Any]]:
    return [
        {"op": "set_memory_partition", "mode": memory},
        {"op": "set_compute_partition", "mode": compute},
    ]


def test_amd_nps4_cpx_and_back(node: Callable[[str], Node]) -> None:
    n = node("mi300x-8")
    before = n.facts()
    result = n.partition([(i, amd_ops("NPS4", "CPX")) for i in range(8)])
    assert all(g["ok"] for g in result["gpus"]), result
    assert result["warnings"] == []
    gpus = n.facts()["gpus"]
    assert len(gpus) == 64  # eight logical GPUs per card
    assert {(g["partition"]["compute"], g["partition"]["memory"]) for g in gpus} == {
        ("CPX", "NPS4")
    }
    # Back to SPX/NPS1, addressed by the new numbering (each card's first logical GPU).
    back = n.partition([(i * 8, amd_ops("NPS1", "SPX")) for i in range(8)])
    assert all(g["ok"] for g in back["gpus"]), back
    assert node_layout(n.facts()) == node_layout(before)


def test_amd_refused_combination_rolls_back(node: Callable[[str], Node]) -> None:
    n = node("mi300x-8")
    before = n.facts()
    outcome = n.partition([(0, amd_ops("NPS4", "SPX"))])["gpus"][0]
    assert outcome["ok"] is False and "SETTING_UNAVAILABLE" in outcome["error"]
    assert outcome["rolled_back"] is True
    assert node_layout(n.facts()) == node_layout(before)


def test_amd_fault_rolls_back_the_hive(node: Callable[[str], Node]) -> None:
    n = node("mi300x-8")
    before = n.facts()
    fake_amd.bind(n.state)
    fake_amd.sim_inject_fault(
        "amdsmi_set_gpu_compute_partition", "AMDSMI_STATUS_AMDGPU_RESTART_ERR", gpu=0, times=1
    )
    # DPX with NPS2 is valid; the driver restart fails half way (memory mode already moved).
    outcome = n.partition([(0, amd_ops("NPS2", "DPX"))])["gpus"][0]
    assert outcome["ok"] is False and outcome["applied"] == 1
    assert "AMDGPU_RESTART_ERR" in outcome["error"] and outcome["rolled_back"], outcome
    assert node_layout(n.facts()) == node_layout(before)


def test_amd_hive_wide_change_of_an_earlier_card_is_reported(node: Callable[[str], Node]) -> None:
    n = node("mi300x-8")
    # Card 1 sets NPS1 after card 0 set NPS4: the hive has one memory mode, card 0 moves.
    result = n.partition([(0, amd_ops("NPS4", "CPX")), (1, amd_ops("NPS1", "SPX"))])
    assert [g["ok"] for g in result["gpus"]] == [True, True]
    assert result["warnings"] == [
        "GPU 0 changed after its own ops: memory partition is NPS1, was NPS4"
    ]


def test_amd_busy_card_refused_and_forced(node: Callable[[str], Node]) -> None:
    n = node("mi300x-8")
    fake_amd.bind(n.state)
    fake_amd.sim_add_process(3, pid=555, name="llama")
    refused = n.partition([(3, amd_ops("NPS1", "CPX"))])["gpus"][0]
    assert "busy: pid 555 (llama)" in refused["error"] and refused["applied"] == 0
    forced = n.partition([(3, amd_ops("NPS1", "CPX"))], force=True)["gpus"][0]
    # The driver refuses a partition change under a running job even when we do not.
    assert forced["ok"] is False and "BUSY" in forced["error"] and forced["rolled_back"]


def test_sriov_zero_then_n_and_refusal_of_n_to_m(node: Callable[[str], Node]) -> None:
    n = node("mi300x-8-sriov")
    vfs = lambda: n.gpu(0)["sriov"]["num_vfs"]  # noqa: E731
    one = n.partition([(0, [{"op": "set_sriov_vfs", "count": 1}])])["gpus"][0]
    assert one["ok"] and vfs() == 1
    # 1 -> 8 without 0 between: refused, the card keeps its one VF.
    jump = n.partition([(0, [{"op": "set_sriov_vfs", "count": 8}])])["gpus"][0]
    assert jump["ok"] is False and "set 0 first" in jump["error"] and jump["rolled_back"]
    assert vfs() == 1
    # 8 VFs need CPX+NPS4, and partition changes need the VFs gone first.
    ops = [
        {"op": "set_sriov_vfs", "count": 0},
        *amd_ops("NPS4", "CPX"),
        {"op": "set_sriov_vfs", "count": 8},
    ]
    # The memory mode moves the whole hive, and the other cards have no VFs: all good.
    done = n.partition([(0, ops)])["gpus"][0]
    assert done["ok"], done
    assert vfs() == 8 and n.gpu(0)["partition"]["compute"] == "CPX"


def test_sriov_failure_restores_vfs_and_modes(node: Callable[[str], Node]) -> None:
    n = node("mi300x-8-sriov")
    n.partition([(0, [{"op": "set_sriov_vfs", "count": 1}])])
    before = n.facts()
    # GIM offers 8 VFs only in CPX+NPS4: in DPX+NPS2 the last write fails (EINVAL), after
    # the VFs were removed and the modes changed. Everything comes back, the VF included.
    ops = [
        {"op": "set_sriov_vfs", "count": 0},
        *amd_ops("NPS2", "DPX"),
        {"op": "set_sriov_vfs", "count": 8},
    ]
    outcome = n.partition([(0, ops)])["gpus"][0]
    assert outcome["applied"] == 3 and "EINVAL" in outcome["error"], outcome
    assert outcome["rolled_back"], outcome
    assert node_layout(n.facts()) == node_layout(before)
    # A kernel error on the very first write: nothing changed, nothing to undo.
    fake_amd.bind(n.state)
    fake_amd.sim_inject_fault("sysfs:sriov_numvfs", gpu=0, errno_name="EIO", times=1)
    first = n.partition([(0, ops)])["gpus"][0]
    assert first["applied"] == 0 and "EIO" in first["error"] and first["rolled_back"]
    assert node_layout(n.facts()) == node_layout(before)


def test_sriov_on_a_card_without_it(node: Callable[[str], Node]) -> None:
    n = node("mi300x-8")
    outcome = n.partition([(0, [{"op": "set_sriov_vfs", "count": 1}])])["gpus"][0]
    assert "has no SR-IOV" in outcome["error"]


# -- hooks -------------------------------------------------------------------------------------


def recorder(log: Path, word: str, status: int = 0) -> list[str]:
    code = f"open({str(log)!r}, 'a').write({word!r} + '\\n'); raise SystemExit({status})"
    return [sys.executable, "-c", code]


def test_hooks_run_in_mig_parted_order(node: Callable[[str], Node], tmp_path: Path) -> None:
    n = node("dgx-h100")
    log = tmp_path / "hooks.log"
    hooks = {
        name: [recorder(log, name)]
        for name in ("apply-exit", "pre-apply-config", "pre-apply-mode", "apply-start")
    }
    result = n.partition([(0, [ENABLE])], hooks=hooks)
    assert result["gpus"][0]["ok"]
    order = ["apply-start", "pre-apply-mode", "pre-apply-config", "apply-exit"]
    assert log.read_text().split() == order
    assert [h["hook"] for h in result["hooks"]] == order
    assert all(h["ok"] and h["rc"] == 0 for h in result["hooks"])
    # No mode change: pre-apply-mode does not run.
    log.unlink()
    n.partition([(0, [create("7g.80gb", 0, 0, 8)])], hooks=hooks)
    assert log.read_text().split() == ["apply-start", "pre-apply-config", "apply-exit"]


def test_failing_pre_hook_stops_the_host_and_exit_hook_still_runs(
    node: Callable[[str], Node], tmp_path: Path
) -> None:
    n = node("dgx-h100")
    before = n.facts()
    log = tmp_path / "hooks.log"
    hooks = {
        "pre-apply-config": [recorder(log, "stop-kubelet", 3), recorder(log, "never")],
        "apply-exit": [recorder(log, "restart-kubelet")],
    }
    result = n.partition([(0, [ENABLE]), (1, [ENABLE])], hooks=hooks)
    assert result["stopped_by"] == "pre-apply-config"
    assert log.read_text().split() == ["stop-kubelet", "restart-kubelet"]
    for outcome in result["gpus"]:
        assert outcome["ok"] is False and outcome["applied"] == 0
        assert "hook pre-apply-config" in outcome["error"] and "status 3" in outcome["error"]
    assert node_layout(n.facts()) == node_layout(before)


def test_hook_that_cannot_start_or_hangs(tmp_path: Path) -> None:
    from gpupoolctl.agent.partition.hooks import run_command

    missing = run_command("apply-start", [str(tmp_path / "no-such-tool")])
    assert missing["ok"] is False and "cannot run" in missing["error"]
    slow = run_command("apply-start", [sys.executable, "-c", "import time; time.sleep(5)"], 0.3)
    assert slow["ok"] is False and "timed out" in slow["error"] and slow["elapsed_s"] < 3


# -- malformed requests ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (None, "must be an object"),
        (
            {"gpus": [{"index": 0, "uuid": "u", "vendor": "nvidia", "ops": [{"op": "zap"}]}]},
            "unknown operation 'zap'",
        ),
        (
            {"gpus": [{"index": 0, "uuid": "u", "vendor": "amd", "ops": [ENABLE]}]},
            "not an operation for amd",
        ),
        (
            {
                "gpus": [
                    {
                        "index": 0,
                        "uuid": "u",
                        "vendor": "nvidia",
                        "ops": [{"op": "destroy_gi", "gi": True}],
                    }
                ]
            },
            "needs 'gi'",
        ),
        ({"gpus": [{"index": 0, "uuid": "", "vendor": "nvidia", "ops": []}]}, "'uuid'"),
        ({"gpus": [], "hooks": {"post-apply": [["true"]]}}, "unknown hook"),
        ({"gpus": [], "hooks": {"apply-start": ["true"]}}, "non-empty list of strings"),
        ({"gpus": [{"index": 0, "uuid": "u", "vendor": "nvidia", "ops": []}] * 2}, "twice"),
    ],
)
def test_malformed_requests_are_refused_whole(
    node: Callable[[str], Node], args: Any, message: str
) -> None:
    n = node("l40s-4")
    answer = n.ask("partition", args)
    assert answer["ok"] is False and answer["error"]["type"] == "BadRequest"
    assert message in answer["error"]["message"]


def test_runs_as_a_subprocess_with_one_json_answer(tmp_path: Path) -> None:
    import json
    import subprocess

    n = Node(tmp_path, "dgx-h100")
    uuid = n.facts()["gpus"][0]["uuid"]
    simulation.deactivate()
    request = {
        "v": 1,
        "verb": "partition",
        "host": n.host,
        "sim": n.sim,
        "args": {
            "gpus": [{"index": 0, "uuid": uuid, "vendor": "nvidia", "ops": [ENABLE]}],
            "force": False,
            "hooks": {"apply-start": [["echo", "noise on stdout"]]},
        },
    }
    done = subprocess.run(
        [sys.executable, "-m", "gpupoolctl.agent.main"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )
    answer = json.loads(done.stdout)  # the hook's output did not leak into it
    assert answer["ok"] and answer["data"]["gpus"][0]["ok"]
    assert answer["data"]["hooks"][0]["output"] == "noise on stdout\n"
