"""Slices from node facts: what can be handed to one holder.

- a whole GPU (MIG off or not capable, AMD SPX, no SR-IOV VFs):  host/gpu3
- a MIG GPU instance (the unit of memory isolation):             host/gpu6/mig-1g.10gb@0
- an AMD compute partition (each is a logical GPU in facts):      host/gpu12/cpx-nps4
- an SR-IOV virtual function:                                     host/gpu0/vf2

Every slice also names its `island` (`host/island0`): the GPUs joined by NVLink or xGMI,
from the node's link matrix, so placement can keep a chatty multi-GPU job inside one; and,
when the inventory gives the host a `site` (facts["site"], added by the workstation), its
`site`, so that a job too big for one node can stay on one site.

Ids are stable: they name the GPU, the profile and the placement, so the same physical slice
gets the same id at every refresh and a re-partitioned GPU gets new ids (old holds then show
up in `ledger verify`). `uuid` is the identity of the instance behind the id: a GI destroyed
and re-created at the same place has a new MIG uuid, and that too ends a hold.
"""

from __future__ import annotations

from typing import Any

from gpupoolctl.hw.topology import islands

KINDS = ("gpu", "mig", "partition", "vf")


def slices_from_facts(host: str, facts: dict[str, Any]) -> list[dict[str, Any]]:
    gpus = facts.get("gpus", [])
    # The link matrix rows follow the facts' GPU order; a slice inherits its GPU's island.
    matrix = (facts.get("topology") or {}).get("matrix") or []
    numbers = islands(matrix) if len(matrix) == len(gpus) else list(range(len(gpus)))
    site = facts.get("site")
    found: list[dict[str, Any]] = []
    for gpu, number in zip(gpus, numbers, strict=True):
        found.extend(_gpu_slices(host, gpu, f"{host}/island{number}", site))
    return found


def _gpu_slices(
    host: str, gpu: dict[str, Any], island: str, site: Any = None
) -> list[dict[str, Any]]:
    base = f"{host}/gpu{gpu['index']}"
    common = {
        "island": island,
        # Only when known: slices of hosts without a site stay as they were recorded.
        **({"site": str(site)} if site else {}),
        "host": host,
        "gpu": gpu["index"],
        "gpu_uuid": gpu.get("uuid"),
        "vendor": gpu.get("vendor"),
        "model": gpu.get("model"),
        "bandwidth_class": gpu.get("bandwidth_class"),
    }
    total = gpu.get("memory_total_mib") or 0
    mig = gpu.get("mig") or {}
    if mig.get("mode") == "enabled":
        # MIG on: only the GPU instances can be handed out, never the GPU itself.
        slices = []
        for gi in sorted(mig.get("instances", []), key=lambda g: g["placement_start"]):
            devices = [ci["uuid"] for ci in gi.get("compute_instances", []) if ci.get("uuid")]
            slices.append(
                {
                    "id": f"{base}/mig-{gi['profile']}@{gi['placement_start']}",
                    "kind": "mig",
                    "profile": gi["profile"],
                    "memory_mib": gi.get("memory_mib") or 0,
                    # The card's own memory: what it is whole (elastic re-cuts merge to it).
                    "gpu_memory_mib": total,
                    "uuid": devices[0] if devices else f"{gpu.get('uuid')}/gi{gi['gi_id']}",
                    "devices": devices,
                    **common,
                }
            )
        return slices
    sriov = gpu.get("sriov") or {}
    vfs = int(sriov.get("num_vfs") or 0)
    if vfs > 0:
        return [
            {
                "id": f"{base}/vf{k}",
                "kind": "vf",
                "profile": f"vf/{vfs}",
                "memory_mib": total // vfs,
                "gpu_memory_mib": total,  # the card's: a VF is 1/vfs of it (usage)
                "uuid": f"{gpu.get('uuid')}/vf{k}",
                "devices": [],
                **common,
            }
            for k in range(vfs)
        ]
    partition = gpu.get("partition") or {}
    compute = partition.get("compute")
    split = compute not in (None, "SPX")
    # A partition's id names its modes: partition 0 of a card cut to CPX is the card's
    # logical GPU 0, as the whole card was, and a hold on the whole card must not quietly
    # become a hold on an eighth of it.
    mode = f"/{str(compute).lower()}-{str(partition.get('memory')).lower()}" if split else ""
    return [
        {
            "id": base + mode,
            "kind": "partition" if split else "gpu",
            "profile": f"{compute}/{partition.get('memory')}" if split else None,
            "memory_mib": total,
            "uuid": gpu.get("uuid"),
            "devices": [gpu["uuid"]] if gpu.get("uuid") else [],
            **common,
        }
    ]
