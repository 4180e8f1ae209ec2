"""Plans that reach past one GPU (an AMD card's partitions, its xGMI hive) or past the next
reset (a pending MIG mode), and the ledger guard that must see all of it."""

from __future__ import annotations

from typing import Any

from gpupoolctl.partition import assert_host, reset_plan
from gpupoolctl.partition.guard import keep_held_gpus
from gpupoolctl.partition.reach import also_changed, hives
from tests.unit.test_partition_plan import facts, mi300x_gpu, nvidia_gpu, one, spec

CPX_NPS4 = "x:\n  - devices: [{index}]\n    compute-partition: CPX\n    memory-partition: NPS4\n"


def cpx_card(card: int, first: int) -> list[dict[str, Any]]:
    """One MI300X card in CPX/NPS4: eight logical GPUs on PCI functions 0-7."""
    out = []
    for function in range(8):
        gpu = mi300x_gpu(first + function, "CPX", "NPS4")
        gpu["pci_bus_id"] = f"0000:{5 + card:02x}:00.{function}"
        out.append(gpu)
    return out


def with_matrix(gpus: list[dict[str, Any]], islands: list[int]) -> dict[str, Any]:
    doc = facts(*gpus)
    doc["topology"] = {
        "matrix": [
            ["X" if i == j else "XGMI" if a == b else "PCIE" for j, b in enumerate(islands)]
            for i, a in enumerate(islands)
        ]
    }
    return doc


# -- what one GPU's ops reach ------------------------------------------------------------------


def test_compute_partition_reaches_the_cards_other_logical_gpus_only() -> None:
    node = with_matrix(cpx_card(0, 0) + cpx_card(1, 8), [0] * 16)
    compute = [{"op": "set_compute_partition", "mode": "SPX"}]
    assert also_changed(node, 9, compute) == [8, 10, 11, 12, 13, 14, 15]
    memory = [{"op": "set_memory_partition", "mode": "NPS1"}, *compute]
    assert also_changed(node, 9, memory) == [i for i in range(16) if i != 9]
    assert also_changed(node, 9, [{"op": "set_sriov_vfs", "count": 0}]) == [
        8,
        10,
        11,
        12,
        13,
        14,
        15,
    ]


def test_memory_partition_reaches_its_hive_not_another() -> None:
    node = with_matrix([mi300x_gpu(i) for i in range(4)], [0, 0, 1, 1])
    for i, gpu in enumerate(node["gpus"]):
        gpu["pci_bus_id"] = f"0000:{i + 5:02x}:00.0"
    assert hives(node) == {0: 0, 1: 0, 2: 1, 3: 1}
    assert also_changed(node, 2, [{"op": "set_memory_partition", "mode": "NPS4"}]) == [3]


def test_without_a_link_matrix_every_amd_gpu_counts_as_one_hive() -> None:
    node = facts(mi300x_gpu(0), mi300x_gpu(1), nvidia_gpu(2))
    assert also_changed(node, 0, [{"op": "set_memory_partition", "mode": "NPS4"}]) == [1]


def test_nvidia_ops_stay_on_their_gpu() -> None:
    node = facts(nvidia_gpu(0), nvidia_gpu(1))
    assert also_changed(node, 0, [{"op": "set_mig_mode", "enabled": True}]) == []


# -- a hive has one memory partition -----------------------------------------------------------


def test_two_memory_partitions_for_one_hive_are_an_error() -> None:
    body = CPX_NPS4.format(index=0) + (
        "  - devices: [1]\n    compute-partition: SPX\n    memory-partition: NPS1\n"
    )
    plan = one(body, mi300x_gpu(0), mi300x_gpu(1))
    assert plan.errors == [
        "layouts.yaml:6: n1: the cards of one xGMI hive share one memory partition, and none "
        "suits all this label asks: NPS4 for GPU(s) 0 (layouts.yaml:6); NPS1 for GPU(s) 1 "
        "(layouts.yaml:9)"
    ]
    # A GPU the label does not name just moves along with its hive: no error.
    assert one(CPX_NPS4.format(index=0), mi300x_gpu(0), mi300x_gpu(1)).errors == []
    # Two hives may differ.
    split = plan_of(body, with_matrix([mi300x_gpu(0), mi300x_gpu(1)], [0, 1]))
    assert split.errors == []


def test_a_compute_partition_alone_suits_the_memory_modes_it_pairs_with() -> None:
    cpx = "  - devices: [1]\n    compute-partition: CPX\n"
    # CPX pairs with NPS4 (and NPS1): card 1 is fine in the NPS4 that card 0 brings.
    assert one(CPX_NPS4.format(index=0) + cpx, mi300x_gpu(0), mi300x_gpu(1)).errors == []
    spx = one(CPX_NPS4.format(index=0) + cpx.replace("CPX", "SPX"), mi300x_gpu(0), mi300x_gpu(1))
    assert spx.errors == [
        "layouts.yaml:6: n1: the cards of one xGMI hive share one memory partition, and none "
        "suits all this label asks: NPS4 for GPU(s) 0 (layouts.yaml:6); SPX (needs NPS1) for "
        "GPU(s) 1 (layouts.yaml:8)"
    ]


def plan_of(body: str, node: dict[str, Any]) -> Any:
    from gpupoolctl.partition import plan_host

    return plan_host(spec(body), "x", "n1", [], node)


# -- the ledger guard --------------------------------------------------------------------------


def test_a_gpu_whose_change_reaches_a_held_one_is_left_alone() -> None:
    node = with_matrix([mi300x_gpu(i) for i in range(3)], [0, 0, 1])
    for i, gpu in enumerate(node["gpus"]):
        gpu["pci_bus_id"] = f"0000:{i + 5:02x}:00.0"
    body = CPX_NPS4.format(index=1) + CPX_NPS4.format(index=2).replace("x:\n", "")
    plan = plan_of(body, node)
    assert [g.also_changes for g in plan.gpus] == [[0], []]
    messages = keep_held_gpus([plan], {("n1", 0): ["a-7"]})
    assert messages == [
        "n1 GPU 1: left as it is, its change would also change GPUs whose slices are held "
        "(GPU 0 by a-7; release them first, or use --force)"
    ]
    assert plan.gpus[0].ops == [] and plan.gpus[1].ops != []  # GPU 2 is another hive


def test_reset_plan_knows_what_it_reaches() -> None:
    node = with_matrix([mi300x_gpu(0, "CPX", "NPS4"), mi300x_gpu(1, "CPX", "NPS4")], [0, 0])
    plan = reset_plan("n1", node)
    assert [g.also_changes for g in plan.gpus] == [[1], [0]]


# -- a MIG mode pending a reset ----------------------------------------------------------------


def pending(gpu: dict[str, Any], mode: str) -> dict[str, Any]:
    gpu["mig"]["pending"] = mode
    return gpu


def test_a_pending_mode_the_label_does_not_want_is_cancelled() -> None:
    gpu = pending(nvidia_gpu(0, key="A100-SXM4-40GB"), "enabled")
    plan = one("x:\n  - devices: all\n    mig-enabled: false\n", gpu)
    diff = plan.gpus[0]
    assert diff.ops == [{"op": "set_mig_mode", "enabled": False}]
    assert diff.current == "MIG off (MIG enable pending a reset)" and diff.desired == "MIG off"
    assert diff.notes == [
        "cancels the pending MIG enable, which the next GPU reset would carry out"
    ]
    on = nvidia_gpu(0, key="A100-SXM4-40GB", instances=[("7g.40gb", 0, None)])
    body = 'x:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {"7g.40gb": 1}\n'
    assert one(body, on).gpus[0].ops == []
    keep = one(body, pending(on, "disabled")).gpus[0]
    assert keep.ops == [{"op": "set_mig_mode", "enabled": True}]


def test_a_pending_mode_the_label_wants_is_left_to_the_reset() -> None:
    gpu = pending(nvidia_gpu(0, key="A100-SXM4-40GB"), "enabled")
    body = 'x:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {"7g.40gb": 1}\n'
    diff = one(body, gpu).gpus[0]
    assert diff.ops[0] == {"op": "set_mig_mode", "enabled": True}  # asked again, as before
    assert "MIG mode change to enabled is pending a GPU reset" in diff.notes


def test_assert_does_not_hold_while_the_other_mode_is_pending() -> None:
    gpu = pending(nvidia_gpu(0, key="A100-SXM4-40GB"), "enabled")
    off = spec("x:\n  - devices: all\n    mig-enabled: false\n")
    assert assert_host(off, "x", "n1", [], facts(gpu)) == [
        "n1 GPU 0 (NVIDIA A100-SXM4-40GB): MIG enable is pending a GPU reset, wanted disabled"
    ]
    gpu["mig"]["pending"] = "disabled"
    assert assert_host(off, "x", "n1", [], facts(gpu)) == []
