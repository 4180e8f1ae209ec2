"""Slices from node facts: what can be handed to a holder (gpupoolctl.hw.slice: the type,
its ids and its capacity). A whole GPU, a MIG GPU instance (the unit of memory isolation), an
AMD compute partition (each is a logical GPU in facts), an SR-IOV virtual function.

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

from collections.abc import Callable
from typing import Any

from gpupoolctl.hw.slice import Slice, card_key, island_id, mig_id, partition_id, vf_id
from gpupoolctl.hw.topology import islands
from gpupoolctl.ledger.state import State


def slices_from_facts(host: str, facts: dict[str, Any]) -> list[Slice]:
    return [entry for entry, _ in _host_slices(host, facts)]


def pids_from_facts(host: str, facts: dict[str, Any]) -> dict[str, list[int]]:
    """Slice id -> the pids the node shows running there (only slices with some): a MIG
    instance's own processes (one the driver did not attribute to an instance counts on
    every instance of its card), a whole card's or an AMD partition's all of them; none for
    an SR-IOV function (its processes run in a guest the node does not see)."""
    return slices_and_pids(host, facts)[1]


def slices_and_pids(host: str, facts: dict[str, Any]) -> tuple[list[Slice], dict[str, list[int]]]:
    """slices_from_facts and pids_from_facts of one host, from one reading of its facts."""
    pairs = _host_slices(host, facts)
    return [entry for entry, _ in pairs], {entry["id"]: pids for entry, pids in pairs if pids}


def _host_slices(host: str, facts: dict[str, Any]) -> list[tuple[Slice, list[int]]]:
    gpus = facts.get("gpus", [])
    # The link matrix rows follow the facts' GPU order; a slice inherits its GPU's island.
    matrix = (facts.get("topology") or {}).get("matrix") or []
    numbers = islands(matrix) if len(matrix) == len(gpus) else list(range(len(gpus)))
    site = facts.get("site")
    found: list[tuple[Slice, list[int]]] = []
    for gpu, number in zip(gpus, numbers, strict=True):
        found.extend(_gpu_slices(host, gpu, island_id(host, number), site))
    return found


def _pids(processes: list[dict[str, Any]], gi_id: Any = None) -> list[int]:
    """The pids of `processes` (on `gi_id`'s instance, and those of no known instance)."""
    return sorted(
        {
            int(p["pid"])
            for p in processes
            if p.get("pid") is not None
            and (gi_id is None or p.get("gpu_instance_id") in (None, gi_id))
        }
    )


def _gpu_slices(
    host: str, gpu: dict[str, Any], island: str, site: Any = None
) -> list[tuple[Slice, list[int]]]:
    index = gpu["index"]
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
    if (gpu.get("health") or {}).get("lost") is True:
        common["lost"] = True  # the driver reports the card lost: nothing is placed on it
    processes = list(gpu.get("processes") or [])
    total = gpu.get("memory_total_mib") or 0
    mig = gpu.get("mig") or {}
    if mig.get("mode") == "enabled":
        # MIG on: only the GPU instances can be handed out, never the GPU itself.
        slices = []
        for gi in sorted(mig.get("instances", []), key=lambda g: g["placement_start"]):
            devices = [ci["uuid"] for ci in gi.get("compute_instances", []) if ci.get("uuid")]
            entry = {
                "id": mig_id(host, index, gi["profile"], gi["placement_start"]),
                "kind": "mig",
                "profile": gi["profile"],
                "memory_mib": gi.get("memory_mib") or 0,
                # The card's own memory: what it is whole (elastic re-cuts merge to it).
                "gpu_memory_mib": total,
                "uuid": devices[0] if devices else f"{gpu.get('uuid')}/gi{gi['gi_id']}",
                "devices": devices,
                **common,
            }
            slices.append((entry, _pids(processes, gi.get("gi_id"))))
        return slices
    sriov = gpu.get("sriov") or {}
    vfs = int(sriov.get("num_vfs") or 0)
    if vfs > 0:
        return [
            (
                {
                    "id": vf_id(host, index, k),
                    "kind": "vf",
                    "profile": f"vf/{vfs}",
                    "memory_mib": total // vfs,
                    "gpu_memory_mib": total,  # the card's: a VF is 1/vfs of it (usage)
                    "uuid": f"{gpu.get('uuid')}/vf{k}",
                    "devices": [],
                    **common,
                },
                [],
            )
            for k in range(vfs)
        ]
    partition = gpu.get("partition") or {}
    compute = partition.get("compute")
    split = compute not in (None, "SPX")
    entry = {
        "id": partition_id(host, index, compute, partition.get("memory")),
        "kind": "partition" if split else "gpu",
        "profile": f"{compute}/{partition.get('memory')}" if split else None,
        "memory_mib": total,
        "uuid": gpu.get("uuid"),
        "devices": [gpu["uuid"]] if gpu.get("uuid") else [],
        **common,
    }
    return [(entry, _pids(processes))]


def keep_lost_cards(
    slices: list[dict[str, Any]], known: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`slices` as a refresh read them, with each card the driver reports lost (`"lost":
    true`, and nothing else readable: no uuid, no memory, no MIG instances) given back the
    slices the ledger knew of it, marked lost: a hold on it stays a hold on the same slice,
    not an orphan, and `pool` shows what the card was. A card never seen before stays as
    read."""
    lost = {card_key(e) for e in slices if e.get("lost")}
    if not lost:
        return slices
    before: dict[str | None, list[dict[str, Any]]] = {}
    for entry in known:
        if card_key(entry) in lost:
            before.setdefault(card_key(entry), []).append({**entry, "lost": True})
    out = [e for e in slices if card_key(e) not in before]
    for entries in before.values():
        out.extend(entries)
    return out


def mark_strays(
    slices: list[dict[str, Any]],
    pids: dict[str, list[int]],
    accounted: Callable[[str, int], bool],
) -> list[dict[str, Any]]:
    """`slices` with `"stray_pids"` on each slice where the node showed processes that
    `accounted(slice id, pid)` does not account for (sched.unavailable keeps such a slice out
    of placement); without it elsewhere."""
    out = []
    for entry in slices:
        strays = [p for p in pids.get(entry["id"], ()) if not accounted(entry["id"], p)]
        entry = {k: v for k, v in entry.items() if k != "stray_pids"}
        if strays:
            entry["stray_pids"] = strays
        out.append(entry)
    return out


def accounted_by(state: State, now: str) -> Callable[[str, int], bool]:
    """(slice id, pid) -> whether the ledger accounts for that process there: the slice is
    held (what a holder runs on it is the holder's), or the pid is a run the ledger knows on
    that host (a live job's, or one that ended since the node was read: its process may not
    be gone yet; a forgotten or lost run is fenced, and kept out of placement as such)."""
    held = {s for alloc in state.active(now).values() for s in alloc.slices}
    runs: set[tuple[str, int]] = set()
    for job in [*state.jobs.values(), *state.finished.values()]:
        for node in job.get("nodes") or ():
            if node.get("pid"):
                runs.add((str(node["host"]), int(node["pid"])))

    def accounted(slice_id: str, pid: int) -> bool:
        if slice_id in held:
            return True
        entry = state.slices.get(slice_id)
        host = str(entry["host"]) if entry else slice_id.split("/", 1)[0]
        return (host, pid) in runs

    return accounted
