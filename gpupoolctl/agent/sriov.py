"""Who holds a card's SR-IOV virtual functions, read from Linux PCI sysfs.

Changing a card's VF count goes through 0, and the kernel then removes every VF device, from
under whoever uses it. A VF given to a virtual machine has no process on the GPU, so the
process check cannot see it; this looks at the VFs themselves.

Where (the kernel's Documentation/ABI/testing/sysfs-bus-pci and drivers/pci/pci-sysfs.c):
`<PF>/virtfnN` links to VF N's device folder; a VF's `driver` link names the driver bound to
it (absent: unbound); its `enable` file is the device's enable count (mode 0644: any user).

The rule, one VF at a time:
- unbound: free;
- bound to vfio-pci (or a vendor variant, "*_vfio_pci"): in use when its `enable` count is
  above 0. vfio-pci enables the device when a user (qemu) opens it (vfio_pci_core_enable
  calls pci_enable_device) and disables it at the last close, and binding alone does not
  enable it; so a VF held by a running VM reads 1 and an idle one 0, without root and
  without opening /dev/vfio ourselves (which would race a VM starting);
- bound to any other driver: in use (a host driver holds it), named;
- anything that cannot be read: a blocker too, with the reason. Not knowing is not idle.

`root` is "/" on a node; tests and the simulator point it at a tree of their own. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

from gpupoolctl.hw.pci import is_vfio

_BDF = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_VIRTFN = re.compile(r"virtfn(\d+)")


class Unreadable(Exception):
    """The card's VFs cannot be listed; the message says why."""


@dataclass(frozen=True)
class VirtualFunction:
    index: int  # N of the PF's virtfnN
    bdf: str | None
    driver: str | None = None  # None: no driver bound
    enabled: int | None = None  # the `enable` count; read only for vfio drivers
    iommu_group: str | None = None
    problem: str | None = None  # why it could not be read (then the rest is unknown)

    @property
    def name(self) -> str:
        return f"VF {self.bdf} (virtfn{self.index})" if self.bdf else f"VF virtfn{self.index}"


def _devices(root: str) -> str:
    return os.path.join(root, "sys", "bus", "pci", "devices")


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _link_name(path: str) -> str:
    return os.path.basename(os.readlink(path).rstrip("/"))


def read_vfs(pf_bdf: str, root: str = "/") -> list[VirtualFunction]:
    """The PF's VFs now, in virtfn order; Unreadable when they cannot be listed."""
    if not _BDF.fullmatch(pf_bdf or ""):
        raise Unreadable(f"no PCI address to look its VFs up by (got {pf_bdf!r})")
    folder = os.path.join(_devices(root), pf_bdf)
    try:
        names = os.listdir(folder)
    except OSError as exc:
        raise Unreadable(f"cannot list {folder}: {_why(exc)}") from None
    indexes = sorted(int(m.group(1)) for m in map(_VIRTFN.fullmatch, names) if m)
    return [_read_vf(folder, index) for index in indexes]


def _read_vf(pf_folder: str, index: int) -> VirtualFunction:
    link = os.path.join(pf_folder, f"virtfn{index}")
    try:
        bdf = _link_name(link)
    except OSError as exc:
        return VirtualFunction(index, None, problem=f"cannot read virtfn{index}: {_why(exc)}")
    if not _BDF.fullmatch(bdf):
        return VirtualFunction(index, None, problem=f"virtfn{index} points at {bdf!r}")
    try:
        os.stat(link)  # the VF's own folder: a dangling link must not read as "no driver"
    except OSError as exc:
        return VirtualFunction(index, bdf, problem=f"its sysfs folder: {_why(exc)}")
    try:
        driver: str | None = _link_name(os.path.join(link, "driver"))
    except FileNotFoundError:
        driver = None
    except OSError as exc:
        return VirtualFunction(index, bdf, problem=f"cannot read its driver link: {_why(exc)}")
    group = None
    with contextlib.suppress(OSError):  # only named in messages, never decides
        group = _link_name(os.path.join(link, "iommu_group"))
    if driver is None or not is_vfio(driver):
        return VirtualFunction(index, bdf, driver, iommu_group=group)
    try:
        with open(os.path.join(link, "enable"), encoding="ascii") as handle:
            enabled = int(handle.read().strip())
    except (OSError, ValueError) as exc:
        why = _why(exc) if isinstance(exc, OSError) else "not a number"
        return VirtualFunction(index, bdf, driver, iommu_group=group, problem=f"enable: {why}")
    return VirtualFunction(index, bdf, driver, enabled, group)


def in_use(vf: VirtualFunction) -> str | None:
    """Why `vf` must not be removed (one phrase), or None when it is free."""
    if vf.problem is not None:
        return f"{vf.name}: cannot tell whether it is in use ({vf.problem})"
    if vf.driver is None:
        return None
    if not is_vfio(vf.driver):
        return f"{vf.name} is bound to {vf.driver} on the host"
    if not vf.enabled:
        return None  # bound for a VM, but none has it open
    group = f", IOMMU group {vf.iommu_group}" if vf.iommu_group else ""
    return f"{vf.name} is open through {vf.driver} (a VM or another vfio user{group})"


def blockers(pf_bdf: str, num_vfs: int, root: str = "/") -> list[str]:
    """What removing the PF's `num_vfs` VFs would pull from under someone (empty: nothing)."""
    try:
        vfs = read_vfs(pf_bdf, root)
    except Unreadable as exc:
        return [f"cannot tell whether its VFs are in use: {exc}"]
    out = [phrase for phrase in map(in_use, vfs) if phrase]
    if len(vfs) < num_vfs:  # a VF we cannot see may be one a VM holds
        out.append(f"sriov_numvfs is {num_vfs} but only {len(vfs)} virtfn links are in sysfs")
    return out
