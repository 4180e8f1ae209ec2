"""The MIG and AMD profile table for people, and the drivers' tables against the catalog.
(A profile name's parts: hw.mig_names.)

compare_with_catalog() sets the MIG profile tables the nodes' drivers report (facts:
gpus[].mig.profiles) against the catalog. On real hardware the driver's table is the truth:
profile ids, sizes and placements vary by device and driver version, so every difference is
returned, one line each, for the catalog to be corrected and plans made from it trusted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from gpupoolctl.errors import UsageError
from gpupoolctl.hw import amd_modes, catalog
from gpupoolctl.hw.mig_names import parse_profile_name


def ci_name(gi: catalog.GpuInstanceProfile, slices: int) -> str:
    """The compute-instance profile name as the agent reports it ("1c.3g.40gb" / "3g.40gb")."""
    return gi.name if slices == gi.compute_slices else f"{slices}c.{gi.name}"


def canonical(text: str) -> str:
    """Canonical spelling of a profile name (attribute order, 'Nc.' dropped when full)."""
    try:
        return str(parse_profile_name(text))
    except ValueError:
        return text


def placements_text(profile: catalog.GpuInstanceProfile) -> str:
    starts = ",".join(str(s) for s in profile.placement_starts)
    return f"{{{starts}}}:{profile.placement_size}"


def names_model(wanted: str, names: Sequence[str]) -> bool:
    """Whether a user's model string names a card known by `names`: case-insensitive, the
    whole name ("H100-SXM5-80GB", "0x233010DE") or a part of one that starts a word, as
    people say it ("H100", "a100", "mi300"; "H200" is not GH200)."""
    text = wanted.strip().lower()
    if not text:
        return False
    start = re.compile(r"(?<![a-z0-9])" + re.escape(text))
    return any(name.lower() == text or start.search(name.lower()) for name in names)


def resolve_model(model: str) -> list[tuple[str, Any]]:
    """Catalog entries (NVIDIA models or AMD products) a user's model string names: every
    entry it names exactly, else every one a part of whose name it is (names_model)."""
    entries: list[tuple[str, Any, list[str]]] = [
        ("nvidia", nv, [key, *nv.names, *nv.pci_device_ids])
        for key, nv in catalog.nvidia_models().items()
    ]
    entries += [
        ("amd", amd, [key, amd.name, *amd.market_names])
        for key, amd in amd_modes.products().items()
    ]
    wanted = model.strip().lower()
    exact = [(v, e) for v, e, names in entries if wanted in (n.lower() for n in names)]
    return exact or [(v, e) for v, e, names in entries if names_model(model, names)]


def profile_rows(model: str | None = None) -> list[dict[str, Any]]:
    """Rows for `partition profiles`: every MIG profile (and AMD mode pair) per model."""
    return profile_table(model)[1]


def profile_table(model: str | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """The catalog keys of the models `model` names (all without it), and their rows:
    every MIG profile and AMD mode pair. A model without either (an L40S) has no rows."""
    if model is None:
        entries: list[tuple[str, Any]] = [("nvidia", m) for m in catalog.nvidia_models().values()]
        entries += [("amd", p) for p in amd_modes.products().values()]
    else:
        entries = resolve_model(model)
        if not entries:
            known = sorted(catalog.nvidia_models()) + sorted(amd_modes.products())
            raise UsageError(f"unknown GPU model {model!r}; known: {', '.join(known)}")
    rows: list[dict[str, Any]] = []
    for vendor, entry in entries:
        if vendor == "nvidia":
            rows.extend(_nvidia_rows(entry))
        else:
            rows.extend(_amd_rows(entry))
    return [entry.key for _, entry in entries], rows


def _nvidia_rows(model: catalog.NvidiaModel) -> list[dict[str, Any]]:
    geometry = model.mig
    if geometry is None:
        return []
    rows = []
    for gi in geometry.profiles:
        rows.append(
            {
                "model": model.key,
                "kind": "mig",
                "profile": gi.name,
                "id": gi.id,
                "slices": f"{gi.compute_slices}/{geometry.compute_slices}",
                "memory_slots": f"{gi.placement_size}/{geometry.memory_slots}",
                "memory_mib": gi.memory_mib,
                "sms": gi.sm_count,
                "max_instances": gi.max_instances,
                "placements": placements_text(gi),
                "compute_instances": [ci.name for ci in catalog.compute_instance_profiles(gi)],
                "inferred": list(gi.inferred),
            }
        )
    return rows


def _amd_rows(product: amd_modes.AmdProduct) -> list[dict[str, Any]]:
    rows = []
    for (compute, memory), basis in product.allowed.items():
        parts = product.partitions(compute)
        rows.append(
            {
                "model": product.key,
                "kind": "amd",
                "profile": f"{compute}/{memory}",
                "id": None,
                "slices": f"{parts} x {product.compute_units // parts} CUs",
                "memory_slots": f"{product.memory_modes[memory]} NUMA",
                "memory_mib": product.vram_mib // parts,
                "sms": product.compute_units // parts,
                "max_instances": parts,
                "placements": "",
                "compute_instances": [],
                "inferred": [] if basis == "validated" else [basis],
                "sriov_vfs": product.vf_counts(compute, memory),
            }
        )
    return rows


# --- the drivers' tables against the catalog ------------------------------------------------


class HostTables(Protocol):
    """What compare_with_catalog reads of a host: its name, whether its facts came back, and
    the facts."""

    @property
    def name(self) -> str: ...

    @property
    def ok(self) -> bool: ...

    @property
    def facts(self) -> dict[str, Any]: ...


# facts field -> (catalog attribute, label)
_DRIVER_FIELDS = (
    ("name", "name", "name"),
    ("slices", "compute_slices", "compute slices"),
    ("memory_mib", "memory_mib", "memory MiB"),
    ("sm_count", "sm_count", "SMs"),
    ("max_instances", "max_instances", "max instances"),
    ("placements", "placement_starts", "placement starts"),
    ("size", "placement_size", "placement size"),
)


def _driver_placements(starts: Sequence[int], size: int | None) -> str:
    return f"{{{','.join(str(s) for s in starts)}}}:{size if size is not None else '?'}"


def _driver_groups(host: HostTables) -> dict[str, list[dict[str, Any]]]:
    """MIG-capable GPUs with a driver table, by PCI device id (same model, same table)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for gpu in host.facts.get("gpus") or []:
        if (gpu.get("mig") or {}).get("profiles"):
            out.setdefault(str(gpu.get("pci_device_id") or gpu.get("model")), []).append(gpu)
    return out


def _model_matches(
    model: catalog.NvidiaModel | None, gpu: dict[str, Any], wanted: str | None
) -> bool:
    if wanted is None:
        return True
    names = [str(gpu.get("model") or ""), str(gpu.get("pci_device_id") or "")]
    if model is not None:
        names += [model.key, *model.names, *model.pci_device_ids]
    return names_model(wanted, names)


def compare_with_catalog(
    hosts: Sequence[HostTables], wanted_model: str | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of every node's driver table, and the differences from the catalog (one line
    each). Hosts whose facts did not come back are skipped."""
    rows: list[dict[str, Any]] = []
    differences: list[str] = []
    for host in hosts:
        if not host.ok:
            continue
        for gpus in _driver_groups(host).values():
            first = gpus[0]
            model = catalog.find_nvidia_model(
                first.get("pci_device_id") or None, first.get("model")
            )
            if not _model_matches(model, first, wanted_model):
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
                        "placements": _driver_placements(p["placements"], p["size"]),
                        "name_source": p.get("name_source"),
                    }
                )
            differences += catalog_differences(where, model, profiles)
    return rows, differences


def catalog_differences(
    where: str, model: catalog.NvidiaModel | None, profiles: list[dict[str, Any]]
) -> list[str]:
    """How one driver table (facts: gpus[].mig.profiles) differs from `model`'s catalog
    entry, each line starting with `where`."""
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
        for field, attribute, text in _DRIVER_FIELDS:
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
