"""The `partition` verb refuses to remove SR-IOV VFs that a VM or a host driver holds.

A VF handed to a guest has no process on the GPU; the agent reads the VFs from PCI sysfs,
which the simulator writes out from its state (gpupoolctl.sim.amdsmi.gpupool_sim_pci_root).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.sim import amdsmi as fake_amd
from tests.unit.test_agent_partition import Node, amd_ops
from tests.unit.test_agent_partition import node as node  # the fixture

OFF = {"op": "set_sriov_vfs", "count": 0}
HELD = "VF 0000:05:02.0 (virtfn0) is open through vfio-pci (a VM or another vfio user, "
HELD += "IOMMU group 100)"


def with_vfs(n: Node, cards: int = 2) -> None:
    """One VF on each of the first `cards` cards, enabled the way the agent does it."""
    for index in range(cards):
        done = n.partition([(index, [{"op": "set_sriov_vfs", "count": 1}])])["gpus"][0]
        assert done["ok"], done
    fake_amd.bind(n.state)


def vfs(n: Node, index: int) -> dict[str, Any]:
    return n.reload().data["amd"]["gpus"][index]["sriov"]


@pytest.fixture
def sriov_node(node: Callable[[str], Node]) -> Node:
    n = node("mi300x-8-sriov")
    with_vfs(n)
    return n


def test_vf_open_by_a_vm_refuses_its_card_and_force_proceeds(sriov_node: Node) -> None:
    n = sriov_node
    fake_amd.sim_bind_vf(0, 0, "vfio-pci", in_use=True)
    result = n.partition([(0, [OFF]), (1, [OFF])])["gpus"]
    assert result[0]["error"] == f"busy: {HELD} (use --force to act anyway)"
    assert result[0]["applied"] == 0 and not result[0]["ok"]
    assert vfs(n, 0)["num_vfs"] == 1 and vfs(n, 0)["vfs"]["0"]["open"] is True
    # The other card's VF is idle: it goes.
    assert result[1]["ok"] and vfs(n, 1)["num_vfs"] == 0
    forced = n.partition([(0, [OFF])], force=True)["gpus"][0]
    assert forced["ok"], forced
    assert vfs(n, 0)["num_vfs"] == 0 and "vfs" not in vfs(n, 0)


def test_vf_bound_to_a_host_driver_is_refused(sriov_node: Node) -> None:
    fake_amd.sim_bind_vf(1, 0, "amdgpu")
    refused = sriov_node.partition([(1, [OFF])])["gpus"][0]
    assert refused["error"] == (
        "busy: VF 0000:26:02.0 (virtfn0) is bound to amdgpu on the host (use --force to act anyway)"
    )
    assert vfs(sriov_node, 1)["num_vfs"] == 1


def test_vf_bound_to_vfio_that_no_vm_has_open_is_free(sriov_node: Node) -> None:
    fake_amd.sim_bind_vf(0, 0, "vfio-pci", in_use=False)
    done = sriov_node.partition([(0, [OFF])])["gpus"][0]
    assert done["ok"], done
    assert vfs(sriov_node, 0)["num_vfs"] == 0


def test_refused_card_keeps_its_modes_too(sriov_node: Node) -> None:
    # What a plan for 8 VFs sends: the VFs go first, then the modes; nothing may run.
    fake_amd.sim_bind_vf(0, 0, "vfio-pci", in_use=True)
    ops = [OFF, *amd_ops("NPS4", "CPX"), {"op": "set_sriov_vfs", "count": 8}]
    refused = sriov_node.partition([(0, ops)])["gpus"][0]
    assert refused["error"].startswith(f"busy: {HELD}") and refused["applied"] == 0
    gpu = sriov_node.gpu(0)
    assert (gpu["partition"]["compute"], gpu["partition"]["memory"]) == ("SPX", "NPS1")
    assert gpu["sriov"]["num_vfs"] == 1


def test_ops_that_keep_the_vf_count_do_not_look_at_vfs(sriov_node: Node) -> None:
    fake_amd.sim_bind_vf(0, 0, "vfio-pci", in_use=True)
    same = sriov_node.partition([(0, [{"op": "set_sriov_vfs", "count": 1}])])["gpus"][0]
    assert same["ok"], same


def test_vfs_that_cannot_be_read_fail_closed(
    sriov_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sysfs without the card's folder: nothing says the VF is idle, so it is not.
    empty = tmp_path / "empty-sysfs"
    empty.mkdir()
    monkeypatch.setattr(fake_amd, "gpupool_sim_pci_root", lambda: str(empty))
    refused = sriov_node.partition([(0, [OFF])])["gpus"][0]
    devices = empty / "sys" / "bus" / "pci" / "devices"
    assert refused["error"] == (
        "busy: cannot tell whether its VFs are in use: cannot list "
        f"{devices / '0000:05:00.0'}: No such file or directory (use --force to act anyway)"
    )
    assert vfs(sriov_node, 0)["num_vfs"] == 1


def test_enabling_or_removing_vfs_drops_their_bindings(sriov_node: Node) -> None:
    fake_amd.sim_bind_vf(0, 0, "vfio-pci", in_use=False)
    assert vfs(sriov_node, 0)["vfs"] == {"0": {"driver": "vfio-pci", "open": False}}
    sriov_node.partition([(0, [OFF, {"op": "set_sriov_vfs", "count": 1}])])
    assert vfs(sriov_node, 0) == {"total_vfs": 8, "num_vfs": 1, "pf_driver": "gim"}
    with pytest.raises(ValueError, match="card 2 has no VF 0"):
        fake_amd.sim_bind_vf(2, 0)
