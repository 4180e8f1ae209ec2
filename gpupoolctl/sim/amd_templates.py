"""AMD node templates for the simulated pool: the "amd" section of a sim state file.

Section layout (read and written only by gpupoolctl.sim.amdsmi):

    {"driver_version": "6.10.5",          # amdgpu, as amdsmi_get_gpu_driver_info reports it
     "lib_version": [26, 0, 2],           # amdsmi_get_lib_version
     "gpus": [<physical GPU>, ...],       # one per card (PCI physical function), index order
     "faults": [<fault>, ...]}            # see gpupoolctl.sim.amdsmi (fault injection)

A physical GPU holds card-wide facts; the fake derives each logical GPU (one per compute
partition) from it: CUs, VRAM and the BDF function number are split per partition.

    {"index": 0, "product": "mi300x",     # key into hw/data/amd_partitions.json (the rules)
     "market_name", "vendor_id", "device_id", "subvendor_id", "subsystem_id", "rev_id",
     "asic_serial", "oam_id", "unique_id",  # unique_id: 12 hex digits, seeds the UUIDs
     "bdf": "0000:05:00.0", "numa_node": 0, "hive": "0x...",   # same hive = xGMI peers
     "gfx_target": "gfx942", "xcds": 8, "num_compute_units": 304,
     "vram": {"type", "vendor", "size_mb", "bit_width", "max_bandwidth_gbps", "used_mb"},
     "compute_partition": "SPX", "memory_partition": "NPS1",
     "virtualization": "BAREMETAL" | "HOST" | "GUEST" | "PASSTHROUGH",
     "sriov": null | {"total_vfs": 8, "num_vfs": 0, "pf_driver": "gim",
                      "vfs": {"0": {"driver": "vfio-pci", "open": true}}},   # optional
     "activity": {"gfx": 0, "umc": 0, "mm": 0},
     "processes": [{"pid", "name", "vram_mb", "partition", "gfx"}]}

SR-IOV: the bare-metal template has no SR-IOV ("sriov": null). Its PF driver is amdgpu, which
has no sriov_configure hook, so no VF could be enabled there; and we do not know what TotalVFs
MI300X's SR-IOV capability advertises on such a host, so we do not invent a number. The
"-sriov" template models an MxGPU host (GIM as PF driver): 8 VFs at most, per the GIM release
notes (1 VF in any mode, 8 only in CPX+NPS4).

VF bindings ("vfs", by VF index; absent: unbound): the driver bound to the VF, and "open" when
a user (a VM's qemu) has it open through vfio. Changing num_vfs drops them all, as the kernel
removes the VF devices. gpupoolctl.sim.amdsmi writes them out as PCI sysfs for the agent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from gpupoolctl.hw import amd_modes

# PCI buses of the eight OAM slots on a typical MI300X UBB platform, four per CPU socket.
_MI300X_BUSES: tuple[int, ...] = (0x05, 0x26, 0x46, 0x65, 0x85, 0xA6, 0xC6, 0xE5)
_AMD_VENDOR_ID = 0x1002


# MI300X node NICs (name, kind, Gb/s, NUMA node), as the agent would read them from sysfs.
# The ROCm documentation's multi-node MI300X/MI325X set-up (vLLM distributed inference with
# MoRI) gives each node eight ConnectX-7 NICs, one per GPU; the MI355X guides use AMD
# Pensando Pollara 400 NICs the same way. The sim takes eight 400 GbE ports on an Ethernet
# RDMA fabric (RoCE in sysfs), four per socket beside their GPUs: 400 Gb/s is the ConnectX-7
# and Pollara 400 single-port rate. Front-end: one 10 GbE port, as AMD's MLPerf Inference
# v4.1 description of its 8x MI300X system lists (a Broadcom BCM57416 10G controller).
_MI300X_NICS: tuple[tuple[str, str, float, int], ...] = (
    *((f"mlx5_{i}", "roce", 400.0, i // 4) for i in range(8)),
    ("eno1", "ethernet", 10.0, 0),
)


def _network() -> dict[str, Any]:
    return {
        "nics": [
            {"name": name, "kind": kind, "speed_gbps": gbps, "state": "up", "numa_node": numa}
            for name, kind, gbps, numa in _MI300X_NICS
        ]
    }


def _digest(*parts: object) -> str:
    text = "|".join(str(p) for p in parts)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _mi300x_gpu(host: str, index: int, hive: str, sriov: dict[str, Any] | None) -> dict[str, Any]:
    product = amd_modes.product("mi300x")
    digest = _digest("amd", host, index)
    compute, memory = product.default
    return {
        "index": index,
        "product": product.key,
        "market_name": product.name,
        "vendor_id": _AMD_VENDOR_ID,
        "device_id": product.device_ids[0],
        "subvendor_id": _AMD_VENDOR_ID,
        "subsystem_id": product.device_ids[0],
        "rev_id": 0,
        "asic_serial": "0x" + digest[:16].upper(),
        "oam_id": index,
        "unique_id": digest[16:28],
        "bdf": f"0000:{_MI300X_BUSES[index]:02x}:00.0",
        "numa_node": 0 if index < 4 else 1,
        "hive": hive,
        "gfx_target": product.gfx_target,
        "xcds": product.xcds,
        "num_compute_units": product.compute_units,
        "vram": {
            "type": product.vram_type,
            "vendor": "HYNIX",
            "size_mb": product.vram_mib,
            "bit_width": 8192,
            "max_bandwidth_gbps": int(product.bandwidth_gbps),
            "used_mb": 283,  # what an idle MI300X reports: firmware and driver reservations
        },
        "compute_partition": compute,
        "memory_partition": memory,
        "virtualization": "HOST" if sriov else "BAREMETAL",
        "sriov": dict(sriov) if sriov else None,
        "activity": {"gfx": 0, "umc": 0, "mm": 0},
        "processes": [],
    }


def _mi300x_node(host: str, sriov: dict[str, Any] | None) -> dict[str, Any]:
    # All eight OAMs of a UBB form one xGMI hive, fully connected (one hop between any pair).
    hive = "0x" + _digest("hive", host)[:16]
    return {
        "network": _network(),
        "amd": {
            "driver_version": "6.10.5",
            "lib_version": [26, 0, 2],
            "gpus": [_mi300x_gpu(host, i, hive, sriov) for i in range(8)],
            "faults": [],
        },
    }


def mi300x_8(host: str) -> dict[str, Any]:
    """8x MI300X bare-metal node (amdgpu driver, no SR-IOV), SPX/NPS1 as after boot."""
    return _mi300x_node(host, None)


def mi300x_8_sriov(host: str) -> dict[str, Any]:
    """8x MI300X MxGPU host: GIM is the PF driver, up to 8 VFs per card, none enabled yet."""
    return _mi300x_node(host, {"total_vfs": 8, "num_vfs": 0, "pf_driver": "gim"})


TEMPLATES: dict[str, Callable[[str], dict[str, Any]]] = {
    "mi300x-8": mi300x_8,
    "mi300x-8-sriov": mi300x_8_sriov,
}
