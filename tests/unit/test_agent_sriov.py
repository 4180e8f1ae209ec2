"""The SR-IOV VF reader (gpupoolctl.agent.sriov) on PCI sysfs trees built like the kernel's."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from gpupoolctl.agent import sriov

PF = "0000:05:00.0"


class Tree:
    """A PCI sysfs under tmp_path: one PF, its VFs as virtfnN links to sibling folders."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.devices = root / "sys" / "bus" / "pci" / "devices"
        (self.devices / PF).mkdir(parents=True)

    def vf(
        self,
        n: int,
        driver: str | None = None,
        enable: int | None = 0,
        group: int | None = None,
    ) -> Path:
        bdf = f"0000:05:02.{n}"
        folder = self.devices / bdf
        folder.mkdir()
        os.symlink(f"../{bdf}", self.devices / PF / f"virtfn{n}")
        os.symlink(f"../{PF}", folder / "physfn")
        if driver is not None:
            (self.root / "sys" / "bus" / "pci" / "drivers" / driver).mkdir(
                parents=True, exist_ok=True
            )
            os.symlink(f"../../drivers/{driver}", folder / "driver")
        if enable is not None:
            (folder / "enable").write_text(f"{enable}\n")
        if group is not None:
            os.symlink(f"../../../../kernel/iommu_groups/{group}", folder / "iommu_group")
        return folder

    def blockers(self, num_vfs: int) -> list[str]:
        return sriov.blockers(PF, num_vfs, str(self.root))


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


def test_unbound_vfs_are_free(tree: Tree) -> None:
    tree.vf(0)
    tree.vf(1)
    vfs = sriov.read_vfs(PF, str(tree.root))
    assert [(v.index, v.bdf, v.driver, v.problem) for v in vfs] == [
        (0, "0000:05:02.0", None, None),
        (1, "0000:05:02.1", None, None),
    ]
    assert tree.blockers(2) == []


def test_vfio_bound_vf_is_in_use_only_while_open(tree: Tree) -> None:
    tree.vf(0, driver="vfio-pci", enable=0)  # bound for a VM that is not running
    tree.vf(1, driver="vfio-pci", enable=1, group=87)  # qemu has it open
    assert tree.blockers(2) == [
        "VF 0000:05:02.1 (virtfn1) is open through vfio-pci (a VM or another vfio user, "
        "IOMMU group 87)"
    ]


def test_vendor_vfio_variant_counts_as_vfio(tree: Tree) -> None:
    tree.vf(0, driver="mlx5_vfio_pci", enable=0)
    assert tree.blockers(1) == []
    (tree.devices / "0000:05:02.0" / "enable").write_text("1\n")
    assert tree.blockers(1) == [
        "VF 0000:05:02.0 (virtfn0) is open through mlx5_vfio_pci (a VM or another vfio user)"
    ]


def test_vf_bound_to_a_host_driver_is_in_use(tree: Tree) -> None:
    tree.vf(0, driver="amdgpu", enable=1)
    tree.vf(1, driver="pci-stub", enable=None)  # the enable count is not even looked at
    assert tree.blockers(2) == [
        "VF 0000:05:02.0 (virtfn0) is bound to amdgpu on the host",
        "VF 0000:05:02.1 (virtfn1) is bound to pci-stub on the host",
    ]


def test_pf_that_cannot_be_listed_fails_closed(tree: Tree, monkeypatch) -> None:
    missing = sriov.blockers("0000:99:00.0", 1, str(tree.root))
    assert missing == [
        "cannot tell whether its VFs are in use: cannot list "
        f"{tree.devices / '0000:99:00.0'}: No such file or directory"
    ]

    def denied(path: str) -> list[str]:
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(sriov.os, "listdir", denied)
    assert tree.blockers(1) == [
        f"cannot tell whether its VFs are in use: cannot list {tree.devices / PF}: "
        "Permission denied"
    ]


@pytest.mark.parametrize("bdf", ["", "05:00.0", "unknown"])
def test_no_pci_address_fails_closed(tree: Tree, bdf: str) -> None:
    assert sriov.blockers(bdf, 1, str(tree.root)) == [
        f"cannot tell whether its VFs are in use: no PCI address to look its VFs up by "
        f"(got {bdf!r})"
    ]


def test_unreadable_driver_link_is_not_read_as_unbound(tree: Tree, monkeypatch) -> None:
    folder = tree.vf(0)
    real = os.readlink

    def readlink(path: str | os.PathLike[str]) -> str:
        if str(path).endswith("/driver"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(sriov.os, "readlink", readlink)
    assert tree.blockers(1) == [
        "VF 0000:05:02.0 (virtfn0): cannot tell whether it is in use "
        "(cannot read its driver link: Permission denied)"
    ]
    monkeypatch.undo()
    (folder / "driver").mkdir()  # not a link at all: readlink answers EINVAL
    assert tree.blockers(1) == [
        "VF 0000:05:02.0 (virtfn0): cannot tell whether it is in use "
        "(cannot read its driver link: Invalid argument)"
    ]


def test_vfio_vf_whose_enable_count_cannot_be_read_fails_closed(tree: Tree) -> None:
    tree.vf(0, driver="vfio-pci", enable=None)
    tree.vf(1, driver="vfio-pci", enable=0)
    (tree.devices / "0000:05:02.1" / "enable").write_text("busy\n")
    assert tree.blockers(2) == [
        "VF 0000:05:02.0 (virtfn0): cannot tell whether it is in use "
        "(enable: No such file or directory)",
        "VF 0000:05:02.1 (virtfn1): cannot tell whether it is in use (enable: not a number)",
    ]


def test_dangling_virtfn_link_is_not_read_as_unbound(tree: Tree) -> None:
    os.symlink("../0000:05:02.0", tree.devices / PF / "virtfn0")  # no such VF folder
    assert tree.blockers(1) == [
        "VF 0000:05:02.0 (virtfn0): cannot tell whether it is in use "
        "(its sysfs folder: No such file or directory)"
    ]


def test_fewer_virtfn_links_than_sriov_numvfs_fails_closed(tree: Tree) -> None:
    tree.vf(0)
    assert tree.blockers(1) == []
    assert tree.blockers(2) == ["sriov_numvfs is 2 but only 1 virtfn links are in sysfs"]
