"""The shape of node facts, shared by the agent (which produces them) and the workstation.

Facts travel as JSON, so the shapes are TypedDicts over plain dicts rather than classes.
Memory is always MiB, bandwidth GB/s (10^9 bytes per second).
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

Vendor = Literal["nvidia", "amd"]


class ComputeInstance(TypedDict):
    ci_id: int
    profile: str  # e.g. "1c.3g.40gb" or "3g.40gb" for a full-GI CI
    uuid: str | None  # "MIG-..." when the driver exposes it


class GpuInstance(TypedDict):
    gi_id: int
    profile: str  # e.g. "3g.40gb"
    profile_id: int  # the nvidia-smi profile id (info.id), not the NVML index
    placement_start: int
    placement_size: int
    memory_mib: int
    sm_count: int
    compute_instances: list[ComputeInstance]


class MigProfile(TypedDict):
    """A GPU-instance profile as the node's driver reports it (wins over the catalog)."""

    name: str | None
    name_source: str  # "driver", "peer" (another GPU of the model) or "catalog"
    id: int
    slices: int
    memory_mib: int
    sm_count: int
    max_instances: int
    placements: list[int]  # start slots
    size: int


class MigState(TypedDict):
    capable: bool
    mode: Literal["enabled", "disabled", "n/a"]
    pending: NotRequired[Literal["enabled", "disabled"] | None]
    instances: list[GpuInstance]
    profiles: NotRequired[list[MigProfile]]


class AmdPartition(TypedDict):
    compute: str | None  # "SPX", "DPX", "QPX", "CPX"
    memory: str | None  # "NPS1", "NPS2", "NPS4"
    memory_caps: list[str]


class SriovState(TypedDict):
    total_vfs: int
    num_vfs: int


class Process(TypedDict):
    pid: int
    name: str | None
    used_memory_mib: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None


class XidEvent(TypedDict):
    xid: int
    at: NotRequired[float | None]  # seconds since the epoch, on the node's clock
    source: NotRequired[str]  # "nvml-event" or "kernel-log"


class RemappedRows(TypedDict):
    correctable: int
    uncorrectable: int
    pending: bool
    failed: bool


class GpuHealth(TypedDict):
    """Raw health signals of one GPU, as the driver read them (hw.health judges them).

    A signal the card or driver does not support, or that could not be read, is None and
    its name is listed in `unknown`: not knowing is never the same as healthy.
    """

    unknown: list[str]
    lost: bool | None  # the driver says the GPU is gone (NVML GPU_IS_LOST)
    ecc_uncorrected_volatile: NotRequired[int | None]  # since the last driver load (NVIDIA)
    ecc_uncorrectable: NotRequired[int | None]  # AMD: accumulated uncorrectable
    ecc_deferred: NotRequired[int | None]  # AMD: deferred (poisoned, not yet consumed)
    remapped_rows: NotRequired[RemappedRows | None]  # NVIDIA Ampere and later
    retired_pages_pending: NotRequired[bool | None]  # NVIDIA before Ampere
    bad_pages: NotRequired[int | None]  # AMD: retired (bad) pages
    bad_pages_pending: NotRequired[int | None]  # AMD: pages waiting to be retired
    xids: NotRequired[list[XidEvent] | None]  # NVIDIA critical XID events seen
    events: NotRequired[list[str] | None]  # AMD: "GPU_PRE_RESET", "RING_HANG", ...
    throttle_reasons: NotRequired[list[str] | None]  # active clock slowdowns, by name
    temperature_c: NotRequired[int | None]
    notes: NotRequired[list[str]]  # why a signal is unknown, in a few words


class Gpu(TypedDict):
    index: int
    vendor: Vendor
    model: str | None  # None when the driver could not read it
    uuid: str
    # As sysfs and lspci write it, for every vendor: "0000:18:00.0" (hw.pci.bus_id; NVML's
    # "00000000:18:00.0" is not kept, nothing needs it). "" or None when it could not be read.
    pci_bus_id: str
    pci_device_id: str  # "0x233010DE" (device << 16 | vendor), as mig-parted's device-filter
    numa_node: int | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    bandwidth_gbps: float | None
    bandwidth_class: str | None  # see bandwidth_class()
    compute_units: int | None  # SMs (NVIDIA) or CUs (AMD)
    compute_capability: str | None  # "9.0" (NVIDIA)
    gfx_target: str | None  # "gfx942" (AMD)
    utilization_pct: int | None
    mig: MigState | None
    partition: AmdPartition | None
    sriov: SriovState | None
    processes: list[Process]
    driver: str  # which agent driver produced this entry
    health: NotRequired[GpuHealth]  # read with the rest of the facts (hw.health judges it)


class Topology(TypedDict):
    gpus: list[str]  # uuids, the order of the matrix rows
    matrix: list[list[str]]


NicKind = Literal["ethernet", "infiniband", "roce"]


class Nic(TypedDict):
    """One network port of a node, as sysfs describes it (gpupoolctl.agent.network).

    `speed_gbps` is the negotiated line rate in Gb/s (10^9 bits per second, the unit NICs
    are sold in; memory bandwidth elsewhere in facts is GB/s): None when the port is down or
    the rate could not be read. `kind` "roce" is an RDMA device whose link layer is
    Ethernet; "infiniband" an RDMA device on an InfiniBand fabric; "ethernet" a plain
    network interface."""

    name: str  # "ens1f0" (netdev) or "mlx5_0" (RDMA device; "mlx5_0/2" for its port 2)
    kind: NicKind
    speed_gbps: float | None
    state: Literal["up", "down"] | None  # None: the kernel does not say
    numa_node: int | None


class Network(TypedDict):
    nics: list[Nic]


class NodeFacts(TypedDict):
    host: str
    hostname: str
    agent_version: str
    python: str
    sim: bool
    drivers: dict[str, str]  # vendor -> driver name
    driver_versions: dict[str, str | None]
    gpus: list[Gpu]
    topology: Topology
    warnings: list[str]
    network: NotRequired[Network]  # absent from agents older than the network facts
    # The inventory's `site` var for this host. The agent does not know it: the workstation
    # adds it to the facts that come back (gpupoolctl.remote.fanout), None when unset.
    site: NotRequired[str | None]
    # A `partition` run holds the node at this moment (absent from older agents).
    partition_running: NotRequired[bool]


# Bandwidth classes, by peak memory bandwidth. GDDR cards (L40S: 864 GB/s) are "standard",
# HBM2e cards (A100 PCIe 40GB: 1555 GB/s) "high", HBM3/3e cards (H100 SXM: 3350, MI300X: 5300)
# "ultra". A scheduler asks for a class, not a number.
BANDWIDTH_CLASSES: tuple[tuple[str, float], ...] = (
    ("standard", 0.0),
    ("high", 1200.0),
    ("ultra", 2500.0),
)


def bandwidth_class(gbps: float | None) -> str | None:
    """Map peak memory bandwidth in GB/s to its class name."""
    if gbps is None:
        return None
    name = BANDWIDTH_CLASSES[0][0]
    for candidate, floor in BANDWIDTH_CLASSES:
        if gbps >= floor:
            name = candidate
    return name


# Link levels, best first, in nvidia-smi topo -m vocabulary. NV<n> and XGMI are direct links.
LINK_LEVELS: tuple[str, ...] = ("X", "NV", "XGMI", "PIX", "PXB", "PHB", "NODE", "SYS")


def is_direct_link(level: str) -> bool:
    """True for a GPU-to-GPU fabric link (NVLink or xGMI), the basis of an island."""
    return level.startswith("NV") or level == "XGMI"
