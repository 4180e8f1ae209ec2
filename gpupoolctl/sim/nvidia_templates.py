"""NVIDIA node templates for the simulated pool: name -> builder(host) -> {"nvidia": section}.

The section layout is documented in gpupoolctl.sim.pynvml. UUIDs and serials derive from the
host name and GPU index, so every node is distinct and a reset rebuilds the same node. MIG
layouts are built through the fake's own rules (sim_create_gpu_instance), so a template can
never hold a layout the rules would refuse.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

import gpupoolctl.sim.pynvml as fake

DRIVER_VERSION = "570.133.20"

# Per-model hardware facts. Bandwidth = bus_width/8 * max mem clock * 2 / 1000 (GB/s):
# H100 SXM5 5120 bit @ 2619 MHz -> 3352; A100 PCIe 40GB 5120 @ 1215 -> 1555; L40S 384 @ 9001 -> 864.
_H100_SXM5 = {
    "name": "NVIDIA H100 80GB HBM3",
    "catalog": "H100-SXM5-80GB",
    "device_id": 0x233010DE,
    "subsystem_id": 0x16C110DE,
    "memory_total_mib": 81559,
    "compute_capability": [9, 0],
    "cuda_cores": 16896,  # 132 SMs x 128
    "memory_bus_width": 5120,
    "max_clocks": {"graphics": 1980, "sm": 1980, "mem": 2619, "video": 1545},
    "nvlink_version": 4,
    "mig": True,
}
_A100_PCIE_40GB = {
    "name": "NVIDIA A100-PCIE-40GB",
    "catalog": "A100-SXM4-40GB",
    "device_id": 0x20F110DE,
    "subsystem_id": 0x145F10DE,
    "memory_total_mib": 40960,
    "compute_capability": [8, 0],
    "cuda_cores": 6912,  # 108 SMs x 64
    "memory_bus_width": 5120,
    "max_clocks": {"graphics": 1410, "sm": 1410, "mem": 1215, "video": 1290},
    "nvlink_version": 3,
    "mig": True,
}
_L40S = {
    "name": "NVIDIA L40S",
    "catalog": "L40S",
    "device_id": 0x26B910DE,
    "subsystem_id": 0x185110DE,
    "memory_total_mib": 46068,
    "compute_capability": [8, 9],
    "cuda_cores": 18176,  # 142 SMs x 128
    "memory_bus_width": 384,
    "max_clocks": {"graphics": 2520, "sm": 2520, "mem": 9001, "video": 1965},
    "nvlink_version": None,
    "mig": False,
}


# NICs per machine class: (name, kind, Gb/s, NUMA node), as the agent would read them from
# sysfs (gpupoolctl.agent.network). Every port is up at its rated speed after a reset.
#
# DGX H100, after the NVIDIA DGX H100 user guide and datasheet (networking section): the
# compute fabric is eight single-port ConnectX-7 adapters, NDR InfiniBand at 400 Gb/s each
# (one per GPU, four per CPU socket, reached through four twin-port OSFP cages); storage and
# in-band management are two dual-port ConnectX-7 cards (QSFP112, up to 400 Gb/s a port,
# InfiniBand or Ethernet), one per socket; out-of-band there is a 10 Gb/s onboard RJ45 NIC
# (the BMC's own port is not a host interface). The sim runs the storage cards as Ethernet
# (so RoCE in sysfs) at 200 Gb/s: the guide allows up to 400, the choice is ours.
_DGX_H100_NICS: tuple[tuple[str, str, float, int], ...] = (
    *((f"mlx5_{i}", "infiniband", 400.0, i // 4) for i in range(8)),
    ("mlx5_8", "roce", 200.0, 0),
    ("mlx5_9", "roce", 200.0, 0),
    ("mlx5_10", "roce", 200.0, 1),
    ("mlx5_11", "roce", 200.0, 1),
    ("eno3", "ethernet", 10.0, 0),
)
# A100 PCIe server (a generic 2-socket, 4-GPU PCIe box; no vendor sells "the" one): one
# dual-port ConnectX-6 Dx, 100 GbE a port per its datasheet (RoCE in sysfs), on socket 0,
# and a 10 GbE onboard port for management. An assumption about a typical build, not a spec.
_A100_PCIE_NICS: tuple[tuple[str, str, float, int], ...] = (
    ("mlx5_0", "roce", 100.0, 0),
    ("mlx5_1", "roce", 100.0, 0),
    ("eno1", "ethernet", 10.0, 0),
)
# L40S server: NVIDIA's Enterprise Reference Architecture for PCIe servers names its
# configurations sockets-GPUs-NICs, and the four-GPU one is "2-4-3": three network adapters
# for four GPUs. The sim takes two ConnectX-7 at 200 GbE for east-west (one per PCIe switch,
# next to each GPU pair) and a BlueField-3 at 200 GbE for north-south (all RoCE in sysfs; the
# L40S template has every GPU on socket 0), plus a 10 GbE onboard management port. The
# 200 Gb/s speed is the RA's class of adapter, our reading; the exact cards vary by vendor.
_L40S_NICS: tuple[tuple[str, str, float, int], ...] = (
    ("mlx5_0", "roce", 200.0, 0),
    ("mlx5_1", "roce", 200.0, 0),
    ("mlx5_2", "roce", 200.0, 0),
    ("eno1", "ethernet", 10.0, 0),
)


def network(nics: tuple[tuple[str, str, float, int], ...]) -> dict[str, Any]:
    """A template's NICs as the state file's `network` section (and the facts' shape)."""
    return {
        "nics": [
            {"name": name, "kind": kind, "speed_gbps": gbps, "state": "up", "numa_node": numa}
            for name, kind, gbps, numa in nics
        ]
    }


def _digest(host: str, index: int) -> str:
    return hashlib.sha1(f"{host}/nvidia/{index}".encode()).hexdigest()


def gpu_uuid(host: str, index: int) -> str:
    d = _digest(host, index)
    return f"GPU-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


def _bus_id(bus: int) -> str:
    return f"00000000:{bus:02X}:00.0"


def _gpu(
    host: str,
    index: int,
    spec: dict[str, Any],
    bus: int,
    numa_node: int,
    pcie: dict[str, Any],
    nvlinks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "index": index,
        "name": spec["name"],
        "catalog": spec["catalog"],
        "uuid": gpu_uuid(host, index),
        "serial": str(1650000000000 + int(_digest(host, index)[:8], 16) % 10**9),
        "pci": {
            "bus_id": _bus_id(bus),
            "device_id": spec["device_id"],
            "subsystem_id": spec["subsystem_id"],
        },
        "pcie": pcie,
        "numa_node": numa_node,
        "memory_total_mib": spec["memory_total_mib"],
        "memory_reserved_mib": 0,
        "utilization": {"gpu": 0, "memory": 0},
        "compute_capability": list(spec["compute_capability"]),
        "cuda_cores": spec["cuda_cores"],
        "memory_bus_width": spec["memory_bus_width"],
        "max_clocks": dict(spec["max_clocks"]),
        "nvlinks": nvlinks or [],
        "nvlink_version": spec["nvlink_version"],
        "mig": (
            {"current": 0, "pending": 0, "gpu_instances": [], "next_uuid": 0}
            if spec["mig"]
            else None
        ),
        "processes": [],
    }


def _section(
    gpus: list[dict[str, Any]], nics: tuple[tuple[str, str, float, int], ...]
) -> dict[str, Any]:
    return {
        "network": network(nics),
        "nvidia": {
            "driver_version": DRIVER_VERSION,
            "nvml_version": f"12.{DRIVER_VERSION}",
            "cuda_driver_version": 12080,
            "gpus": gpus,
            "faults": [],
        },
    }


def _enable_mig(gpu: dict[str, Any], layout: list[tuple[int, int, int]]) -> None:
    """Turn MIG on and create (gi profile id, placement start, ci profile id) instances."""
    gpu["mig"]["current"] = gpu["mig"]["pending"] = fake.NVML_DEVICE_MIG_ENABLE
    for profile_id, start, ci_profile_id in layout:
        gi = fake.sim_create_gpu_instance(gpu, profile_id, start)
        fake.sim_create_compute_instance(gpu, gi["id"], ci_profile_id)


# DGX H100: every GPU has 18 NVLink4 links spread over 4 NVSwitches (5+4+4+5), so nvidia-smi
# shows NV18 between every pair. PCIe: one switch per GPU, a host bridge per pair, two sockets.
_DGX_H100_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_NVSWITCH_LINKS = (5, 4, 4, 5)


def _nvswitch_links() -> list[dict[str, Any]]:
    links = []
    for switch, count in enumerate(_NVSWITCH_LINKS):
        links += [
            {"remote_bus_id": _bus_id(0xC5 + switch), "remote_type": "switch", "active": True}
        ] * count
    return copy.deepcopy(links)


def dgx_h100(host: str) -> dict[str, Any]:
    gpus = [
        _gpu(
            host,
            i,
            _H100_SXM5,
            bus,
            numa_node=i // 4,
            pcie={"host_bridge": f"hb{i // 2}", "switches": [f"sw{i // 2}", f"sw{i // 2}.{i % 2}"]},
            nvlinks=_nvswitch_links(),
        )
        for i, bus in enumerate(_DGX_H100_BUSES)
    ]
    return _section(gpus, _DGX_H100_NICS)


def dgx_h100_mig(host: str) -> dict[str, Any]:
    """dgx-h100 with GPU 6 as 7x 1g.10gb and GPU 7 as 2x 3g.40gb, each GI with its full CI."""
    section = dgx_h100(host)
    gpus = section["nvidia"]["gpus"]
    _enable_mig(gpus[6], [(19, start, 0) for start in range(7)])
    _enable_mig(gpus[7], [(9, 0, 2), (9, 4, 2)])
    return section


def a100_pcie_4(host: str) -> dict[str, Any]:
    """4x A100 PCIe 40GB, no NVLink bridges. GPUs 0-1 and 2-3 sit under two-level PCIe switches
    (PXB), one pair per socket (SYS across). GPU 3 runs MIG: 3g.20gb at 4:4 plus 2g.10gb at 0:2
    and 2:2 (2g.10gb may only start at 0, 2 or 4, so the 3g must take the upper half)."""
    buses = (0x17, 0x31, 0xB1, 0xCA)
    gpus = [
        _gpu(
            host,
            i,
            _A100_PCIE_40GB,
            bus,
            numa_node=i // 2,
            pcie={
                "host_bridge": f"hb{i // 2}",
                "switches": [f"sw{i // 2}", f"sw{i // 2}{'ab'[i % 2]}"],
            },
        )
        for i, bus in enumerate(buses)
    ]
    _enable_mig(gpus[3], [(9, 4, 2), (14, 0, 1), (14, 2, 1)])
    return _section(gpus, _A100_PCIE_NICS)


def l40s_4(host: str) -> dict[str, Any]:
    """4x L40S 48GB (GDDR6, no MIG, no NVLink): pairs behind one PCIe switch each (PIX), the two
    switches on different host bridges of the same socket (NODE)."""
    buses = (0x4F, 0x52, 0xCE, 0xD1)
    gpus = [
        _gpu(
            host,
            i,
            _L40S,
            bus,
            numa_node=0,
            pcie={"host_bridge": f"hb{i // 2}", "switches": [f"sw{i // 2}"]},
        )
        for i, bus in enumerate(buses)
    ]
    return _section(gpus, _L40S_NICS)


TEMPLATES: dict[str, Callable[[str], dict[str, Any]]] = {
    "dgx-h100": dgx_h100,
    "dgx-h100-mig": dgx_h100_mig,
    "a100-pcie-4": a100_pcie_4,
    "l40s-4": l40s_4,
}
