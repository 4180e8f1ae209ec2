"""NVIDIA GPU models and MIG profile geometry, loaded from data/nvidia_gpus.json.

The geometry (slot count, placements, sizes) is data, never a hard-coded 8: the RTX PRO 6000
uses 12 memory slots and the A30 4. Stdlib only; the data file is read with pkgutil.get_data,
which also works when the agent runs from a zip payload (zipimport).
"""

from __future__ import annotations

import functools
import json
import pkgutil
from dataclasses import dataclass
from typing import Any

_DATA_FILE = "data/nvidia_gpus.json"

# NVML_COMPUTE_INSTANCE_PROFILE_* index for a compute instance of n compute slices.
CI_PROFILE_INDEX: dict[int, int] = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}


class CatalogError(Exception):
    """The catalog data is missing or malformed, or a lookup names nothing known."""


@dataclass(frozen=True)
class GpuInstanceProfile:
    name: str  # "3g.40gb"
    id: int  # nvidia-smi / NVML info.id
    index: int  # NVML_GPU_INSTANCE_PROFILE_* value
    compute_slices: int
    memory_mib: int
    sm_count: int
    max_instances: int
    placement_starts: tuple[int, ...]
    placement_size: int
    inferred: tuple[str, ...] = ()

    def placements(self) -> list[tuple[int, int]]:
        return [(start, self.placement_size) for start in self.placement_starts]


@dataclass(frozen=True)
class ComputeInstanceProfile:
    """A CI profile inside one GI profile. Derived by rule from the GI profile (see
    compute_instance_profiles); every field but the name and id is inferred."""

    name: str  # "1c.3g.40gb", or the GI name for the CI that spans the whole GI
    id: int
    index: int  # NVML_COMPUTE_INSTANCE_PROFILE_* value
    compute_slices: int
    sm_count: int
    max_instances: int
    placement_starts: tuple[int, ...]

    @property
    def placement_size(self) -> int:
        return self.compute_slices


@dataclass(frozen=True)
class MigGeometry:
    memory_slots: int
    compute_slices: int
    profiles: tuple[GpuInstanceProfile, ...]
    source: str

    def by_id(self, profile_id: int) -> GpuInstanceProfile | None:
        return next((p for p in self.profiles if p.id == profile_id), None)

    def by_index(self, index: int) -> GpuInstanceProfile | None:
        return next((p for p in self.profiles if p.index == index), None)

    def by_name(self, name: str) -> GpuInstanceProfile | None:
        wanted = name.removeprefix("MIG ")
        return next((p for p in self.profiles if p.name == wanted), None)


@dataclass(frozen=True)
class NvidiaModel:
    key: str
    names: tuple[str, ...]
    pci_device_ids: tuple[str, ...]
    architecture: str
    compute_capability: str
    memory_bus_width_bits: int
    sm_count: int
    mig: MigGeometry | None


@functools.lru_cache(maxsize=None)  # noqa: UP033 - the agent also runs on python 3.8
def _raw() -> dict[str, Any]:
    blob = pkgutil.get_data("gpupoolctl.hw", _DATA_FILE)
    if blob is None:
        raise CatalogError(f"gpupoolctl.hw/{_DATA_FILE} not found")
    data = json.loads(blob.decode("utf-8"))
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise CatalogError(f"gpupoolctl.hw/{_DATA_FILE}: expected schema 1")
    return data


def _gi_profile(raw: dict[str, Any]) -> GpuInstanceProfile:
    return GpuInstanceProfile(
        name=str(raw["name"]),
        id=int(raw["id"]),
        index=int(raw["index"]),
        compute_slices=int(raw["compute_slices"]),
        memory_mib=int(raw["memory_mib"]),
        sm_count=int(raw["sm_count"]),
        max_instances=int(raw["max_instances"]),
        placement_starts=tuple(int(s) for s in raw["placement_starts"]),
        placement_size=int(raw["placement_size"]),
        inferred=tuple(raw.get("inferred") or ()),
    )


def _model(key: str, raw: dict[str, Any]) -> NvidiaModel:
    mig_raw = raw.get("mig")
    mig = None
    if mig_raw:
        mig = MigGeometry(
            memory_slots=int(mig_raw["memory_slots"]),
            compute_slices=int(mig_raw["compute_slices"]),
            profiles=tuple(_gi_profile(p) for p in mig_raw["gpu_instance_profiles"]),
            source=str(mig_raw.get("source", "")),
        )
    return NvidiaModel(
        key=key,
        names=tuple(raw["names"]),
        pci_device_ids=tuple(d.upper().replace("0X", "0x") for d in raw["pci_device_ids"]),
        architecture=str(raw["architecture"]),
        compute_capability=str(raw["compute_capability"]),
        memory_bus_width_bits=int(raw["memory_bus_width_bits"]),
        sm_count=int(raw["sm_count"]),
        mig=mig,
    )


@functools.lru_cache(maxsize=None)  # noqa: UP033 - the agent also runs on python 3.8
def nvidia_models() -> dict[str, NvidiaModel]:
    """All known NVIDIA models by catalog key ("H100-SXM5-80GB", ...)."""
    try:
        return {key: _model(key, raw) for key, raw in _raw()["models"].items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogError(f"gpupoolctl.hw/{_DATA_FILE}: malformed entry: {exc!r}") from exc


def nvidia_model(key: str) -> NvidiaModel:
    models = nvidia_models()
    if key not in models:
        raise CatalogError(f"unknown NVIDIA model {key!r}; known: {', '.join(sorted(models))}")
    return models[key]


def find_nvidia_model(
    pci_device_id: str | int | None = None, name: str | None = None
) -> NvidiaModel | None:
    """The model with this PCI device id ("0x233010DE") or, failing that, this marketing name."""
    if isinstance(pci_device_id, int):
        pci_device_id = f"0x{pci_device_id:08X}"
    wanted = pci_device_id.upper().replace("0X", "0x") if pci_device_id else None
    for model in nvidia_models().values():
        if wanted and wanted in model.pci_device_ids:
            return model
    for model in nvidia_models().values():
        if name and name in model.names:
            return model
    return None


def compute_instance_profiles(
    gi: GpuInstanceProfile,
) -> list[ComputeInstanceProfile]:
    """CI profiles available inside a GI of this profile.

    Rule (matches the A100 -lcip listing: 1c/2c/3c/4c and the full CI): one profile per
    c in {1, 2, 3, 4, gi slices} with c <= gi slices, floor(gi/c) instances at starts
    0, c, 2c, ...; SMs proportional to c. Instance counts and SMs beyond A100 are inferred.
    """
    total = gi.compute_slices
    sizes = sorted({c for c in (1, 2, 3, 4) if c <= total} | {total})
    out = []
    for c in sizes:
        index = CI_PROFILE_INDEX[c]
        full = c == total
        out.append(
            ComputeInstanceProfile(
                name=gi.name if full else f"{c}c.{gi.name}",
                id=index,
                index=index,
                compute_slices=c,
                sm_count=gi.sm_count if full else gi.sm_count * c // total,
                max_instances=total // c,
                placement_starts=tuple(range(0, total - c + 1, c)),
            )
        )
    return out
