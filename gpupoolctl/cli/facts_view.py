"""Turn per-host agent results into the inventory document and per-GPU rows."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from gpupoolctl.cli.render import Column

if TYPE_CHECKING:
    from gpupoolctl.remote.results import HostResult

GPU_COLUMNS: tuple[Column, ...] = (
    Column("host", "HOST"),
    Column("gpu", "GPU", "right"),
    Column("vendor", "VENDOR"),
    Column("model", "MODEL"),
    Column("memory", "MEMORY GiB", "right"),
    Column("bandwidth", "BANDWIDTH"),
    Column("compute_units", "SM/CU", "right"),
    Column("partition", "PARTITION"),
    Column("processes", "PROCS", "right"),
    Column("uuid", "UUID"),  # keep last: shown with -v only, it doubles the width
)

GPU_CSV_COLUMNS: tuple[Column, ...] = tuple(
    Column(key, key)
    for key in (
        "host",
        "gpu",
        "vendor",
        "model",
        "uuid",
        "pci_bus_id",
        "pci_device_id",
        "numa_node",
        "memory_total_mib",
        "memory_used_mib",
        "bandwidth_gbps",
        "bandwidth_class",
        "compute_units",
        "compute_capability",
        "gfx_target",
        "partition",
        "processes",
    )
)


def summary(results: list[HostResult]) -> dict[str, int]:
    """How many hosts ended in each outcome, every outcome named."""
    from gpupoolctl.remote.results import OUTCOMES  # not at start-up: it loads the bootstrap

    counts = Counter(result.outcome for result in results)
    return {outcome: counts.get(outcome, 0) for outcome in OUTCOMES}


def document(source: str, results: list[HostResult]) -> dict[str, Any]:
    """The machine-readable inventory: every host with its outcome, and facts when ok."""
    return {
        "inventory": source,
        "summary": summary(results),
        "hosts": [
            {
                "name": result.name,
                "outcome": result.outcome,
                "elapsed_s": round(result.elapsed, 3),
                "error": result.error,
                "facts": result.data if result.ok else None,
            }
            for result in results
        ],
    }


def gpu_rows(results: list[HostResult]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for result in results:
        if not result.ok:
            continue
        for gpu in result.data.get("gpus", []):
            rows.append(
                {
                    "host": result.name,
                    "gpu": gpu["index"],
                    "vendor": gpu["vendor"],
                    "model": gpu["model"],
                    "memory": memory_text(gpu),
                    "bandwidth": bandwidth_text(gpu),
                    "compute_units": gpu.get("compute_units"),
                    "partition": partition_text(gpu),
                    "processes": len(gpu.get("processes") or []),
                    "uuid": gpu["uuid"],
                    **{
                        key: gpu.get(key)
                        for key in (
                            "pci_bus_id",
                            "pci_device_id",
                            "numa_node",
                            "memory_total_mib",
                            "memory_used_mib",
                            "bandwidth_gbps",
                            "bandwidth_class",
                            "compute_capability",
                            "gfx_target",
                        )
                    },
                }
            )
    return rows


def node_warnings(results: list[HostResult]) -> list[tuple[str, str]]:
    return [
        (result.name, message)
        for result in results
        if result.ok
        for message in result.data.get("warnings", [])
    ]


def memory_text(gpu: dict[str, Any]) -> str | None:
    total = gpu.get("memory_total_mib")
    used = gpu.get("memory_used_mib")
    if total is None:
        return None
    from gpupoolctl.hw.units import gib_text

    used_text = "?" if used is None else gib_text(used)
    return f"{used_text}/{gib_text(total)}"


def bandwidth_text(gpu: dict[str, Any]) -> str | None:
    gbps = gpu.get("bandwidth_gbps")
    if gbps is None:
        return gpu.get("bandwidth_class")
    return f"{gpu.get('bandwidth_class')} ({gbps:.0f} GB/s)"


def partition_text(gpu: dict[str, Any]) -> str:
    """The card's slicing in the words `partition show` and `partition plan` use: "MIG off",
    "MIG 1x3g.20gb + 2x2g.10gb", "CPX/NPS4, 8 VFs", "whole card" (one function renders
    a layout: gpupoolctl.partition.layout)."""
    from gpupoolctl.partition.layout import current_summary

    return current_summary(gpu)


# -- inventory --network ----------------------------------------------------------------------

NIC_COLUMNS: tuple[Column, ...] = (
    Column("nic", "NIC"),
    Column("kind", "KIND"),
    Column("speed", "SPEED", "right"),
    Column("state", "STATE"),
    Column("numa_node", "NUMA", "right"),
)

NIC_CSV_COLUMNS: tuple[Column, ...] = tuple(
    Column(key, key) for key in ("host", "site", "nic", "kind", "speed_gbps", "state", "numa_node")
)

SITE_LINK_COLUMNS: tuple[Column, ...] = (
    Column("sites", "SITES"),
    Column("gbps", "BANDWIDTH Gb/s", "right"),
    Column("rtt_ms", "RTT ms", "right"),
)


def network_document(
    source: str, results: list[HostResult], links: list[dict[str, Any]]
) -> dict[str, Any]:
    """The machine-readable network view: each host's site and NICs, and the site links."""
    return {
        "inventory": source,
        "summary": summary(results),
        "hosts": [
            {
                "name": result.name,
                "outcome": result.outcome,
                "error": result.error,
                "site": result.data.get("site") if result.ok else None,
                # None: the node's agent reported no network (an older agent).
                "nics": nics_of(result.data) if result.ok else None,
            }
            for result in results
        ],
        "site_links": links,
    }


def nics_of(facts: dict[str, Any]) -> list[dict[str, Any]] | None:
    network = facts.get("network")
    if not isinstance(network, dict):
        return None
    return [nic for nic in network.get("nics") or [] if isinstance(nic, dict)]


def nic_rows(name: str, facts: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "host": name,
            "site": facts.get("site"),
            "nic": nic.get("name"),
            "kind": nic.get("kind"),
            "speed": speed_text(nic.get("speed_gbps")),
            "speed_gbps": nic.get("speed_gbps"),
            "state": nic.get("state"),
            "numa_node": nic.get("numa_node"),
        }
        for nic in nics_of(facts) or []
    ]


def speed_text(gbps: Any) -> str | None:
    if not isinstance(gbps, int | float) or isinstance(gbps, bool):
        return None
    return f"{gbps:g} Gb/s"


def site_link_rows(links: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "sites": " <-> ".join(link["sites"]),
            "gbps": f"{link['gbps']:g}",
            "rtt_ms": link["rtt_ms"],
        }
        for link in links
    ]
