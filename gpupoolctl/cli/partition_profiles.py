"""`partition profiles -l HOSTS`: the MIG profiles each node's driver offers, against the catalog.

On real hardware the driver's table (facts: gpus[].mig.profiles) is the truth: profile ids,
sizes and placements vary by device and driver version. Every difference from the catalog is
reported, one line each, so the catalog can be corrected and plans made from it trusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpupoolctl.cli.partition_fanout import HostFacts
from gpupoolctl.hw import catalog

# facts field -> (catalog attribute, label)
_FIELDS = (
    ("name", "name", "name"),
    ("slices", "compute_slices", "compute slices"),
    ("memory_mib", "memory_mib", "memory MiB"),
    ("sm_count", "sm_count", "SMs"),
    ("max_instances", "max_instances", "max instances"),
    ("placements", "placement_starts", "placement starts"),
    ("size", "placement_size", "placement size"),
)


def _placements(starts: Sequence[int], size: int | None) -> str:
    return f"{{{','.join(str(s) for s in starts)}}}:{size if size is not None else '?'}"


def _groups(host: HostFacts) -> dict[str, list[dict[str, Any]]]:
    """MIG-capable GPUs with a driver table, by PCI device id (same model, same table)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for gpu in host.facts.get("gpus") or []:
        if (gpu.get("mig") or {}).get("profiles"):
            out.setdefault(str(gpu.get("pci_device_id") or gpu.get("model")), []).append(gpu)
    return out


def _matches(model: catalog.NvidiaModel | None, gpu: dict[str, Any], wanted: str | None) -> bool:
    if wanted is None:
        return True
    names = [str(gpu.get("model") or ""), str(gpu.get("pci_device_id") or "")]
    if model is not None:
        names += [model.key, *model.names, *model.pci_device_ids]
    return wanted.strip().lower() in (n.lower() for n in names)


def compare(
    hosts: Sequence[HostFacts], wanted_model: str | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of every node's driver table, and the differences from the catalog."""
    rows: list[dict[str, Any]] = []
    differences: list[str] = []
    for host in hosts:
        if not host.ok:
            continue
        for gpus in _groups(host).values():
            first = gpus[0]
            model = catalog.find_nvidia_model(
                first.get("pci_device_id") or None, first.get("model")
            )
            if not _matches(model, first, wanted_model):
                continue
            label = model.key if model is not None else str(first.get("model"))
            indexes = ",".join(str(g["index"]) for g in gpus)
            where = f"{host.name} GPU {indexes} ({label})"
            profiles = first["mig"]["profiles"]
            total = max((p["slices"] for p in profiles), default=0)
            slots = max(
                (max(p["placements"], default=0) + (p["size"] or 0) for p in profiles), default=0
            )
            for p in profiles:
                rows.append(
                    {
                        "host": host.name,
                        "gpus": indexes,
                        "model": label,
                        "profile": p["name"],
                        "id": p["id"],
                        "slices": f"{p['slices']}/{total}",
                        "memory_slots": f"{p['size']}/{slots}" if p["size"] else None,
                        "memory_mib": p["memory_mib"],
                        "sms": p["sm_count"],
                        "max_instances": p["max_instances"],
                        "placements": _placements(p["placements"], p["size"]),
                        "name_source": p.get("name_source"),
                    }
                )
            differences += _differences(where, model, profiles)
    return rows, differences


def _differences(
    where: str, model: catalog.NvidiaModel | None, profiles: list[dict[str, Any]]
) -> list[str]:
    if model is None or model.mig is None:
        return [f"{where}: not in the catalog as a MIG GPU; the driver's table is all there is"]
    out = []
    seen: set[int] = set()
    for p in profiles:
        known = model.mig.by_id(int(p["id"]))
        label = f"{p['name'] or '?'} (id {p['id']})"
        if known is None:
            out.append(f"{where}: driver offers {label}, which the catalog does not list")
            continue
        seen.add(known.id)
        for field, attribute, text in _FIELDS:
            if field == "name" and p.get("name_source") != "driver":
                continue  # a name filled in from the catalog cannot differ from it
            driver_value = p[field]
            catalog_value = getattr(known, attribute)
            if field == "placements":
                catalog_value = list(catalog_value)
            if driver_value != catalog_value:
                out.append(
                    f"{where}: {label}: {text} is {driver_value} on the driver, "
                    f"{catalog_value} in the catalog"
                )
    for known in model.mig.profiles:
        if known.id not in seen:
            out.append(
                f"{where}: catalog lists {known.name} (id {known.id}), the driver does not offer it"
            )
    return out
