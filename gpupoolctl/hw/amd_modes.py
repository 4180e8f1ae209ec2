"""AMD Instinct partition modes (SPX/DPX/QPX/CPX, NPS1/NPS2/NPS4) and their rules, as data.

The rules live in data/amd_partitions.json (read with pkgutil.get_data, so it also works when
the agent runs from a zip payload). Both the simulated amdsmi and the partition planner use this
module, so the fake can never allow what the planner would refuse, or the other way round.

Sources (the project's partition research, section 4): the amdgpu-docs compatibility matrix,
the MI300X overview ("NPS4 only with CPX"; "memory partitions <= compute partitions"; setting NPS4
alone moves SPX to CPX) and the GIM release notes for MxGPU VF counts.
"""

from __future__ import annotations

import functools
import json
import pkgutil
from dataclasses import dataclass
from typing import Any

_DATA_FILE = "data/amd_partitions.json"

# Every mode name the amdsmi enums know, in their C enum order.
COMPUTE_MODE_NAMES: tuple[str, ...] = ("SPX", "DPX", "TPX", "QPX", "CPX")
MEMORY_MODE_NAMES: tuple[str, ...] = ("NPS1", "NPS2", "NPS4", "NPS8")


class AmdModesError(Exception):
    """The partition data is missing or malformed."""


@dataclass(frozen=True)
class VfOption:
    vfs: int
    compute: str | None = None  # None: offered in every mode
    memory: str | None = None


@dataclass(frozen=True)
class AmdProduct:
    key: str  # "mi300x"
    name: str  # "AMD Instinct MI300X"
    market_names: tuple[str, ...]
    device_ids: tuple[int, ...]
    vf_device_ids: tuple[int, ...]
    gfx_target: str
    xcds: int
    cus_per_xcd: int
    vram_mib: int
    vram_type: str
    bandwidth_gbps: float
    compute_modes: dict[str, int]  # mode -> logical GPUs per card
    memory_modes: dict[str, int]  # mode -> memory partitions per card
    default: tuple[str, str]
    allowed: dict[tuple[str, str], str]  # (compute, memory) -> basis
    vf_options: tuple[VfOption, ...]

    @property
    def compute_units(self) -> int:
        return self.xcds * self.cus_per_xcd

    def is_allowed(self, compute: str, memory: str) -> bool:
        return (compute, memory) in self.allowed

    def partitions(self, compute: str) -> int:
        """Logical GPUs the card shows in this compute mode."""
        if compute not in self.compute_modes:
            raise KeyError(f"{self.name} has no compute mode {compute!r}")
        return self.compute_modes[compute]

    def memory_caps(self) -> list[str]:
        """Memory modes the card supports, in NPS order (amdsmi's partition_caps)."""
        return [m for m in MEMORY_MODE_NAMES if m in self.memory_modes]

    def memory_modes_for(self, compute: str) -> list[str]:
        """Memory modes allowed together with this compute mode."""
        return [m for m in self.memory_caps() if (compute, m) in self.allowed]

    def compute_for_memory(self, current: str, memory: str) -> str | None:
        """The compute mode a memory-mode change leaves the card in.

        The current one when compatible; otherwise the driver moves the card itself (AMD docs:
        setting NPS4 alone moves SPX to CPX). We pick the compatible mode with the fewest
        logical GPUs that is not fewer than now, preferring validated pairs; None if none fits.
        """
        if (current, memory) in self.allowed:
            return current
        candidates = [c for c in self.compute_modes if (c, memory) in self.allowed]
        if not candidates:
            return None
        now = self.compute_modes.get(current, 1)

        def rank(mode: str) -> tuple[int, int, int]:
            count = self.compute_modes[mode]
            validated = self.allowed[(mode, memory)] == "validated"
            return (0 if count >= now else 1, 0 if validated else 1, abs(count - now))

        return min(candidates, key=rank)

    def vf_counts(self, compute: str, memory: str) -> list[int]:
        """SR-IOV VF counts (besides 0) GIM offers in this partition mode."""
        counts = {
            o.vfs
            for o in self.vf_options
            if (o.compute in (None, compute)) and (o.memory in (None, memory))
        }
        return sorted(counts)


def _hex_ids(values: Any, key: str, where: str) -> tuple[int, ...]:
    if not isinstance(values, list):
        raise AmdModesError(f"{_DATA_FILE}: {where}.{key} must be a list of hex strings")
    try:
        return tuple(int(str(v), 16) for v in values)
    except ValueError as exc:
        raise AmdModesError(f"{_DATA_FILE}: {where}.{key}: {exc}") from exc


def _product(key: str, raw: dict[str, Any]) -> AmdProduct:
    where = f"products.{key}"
    try:
        compute = {str(k): int(v) for k, v in raw["compute_modes"].items()}
        memory = {str(k): int(v) for k, v in raw["memory_modes"].items()}
        allowed = {(a["compute"], a["memory"]): str(a["basis"]) for a in raw["allowed"]}
        default = (str(raw["default"][0]), str(raw["default"][1]))
        product = AmdProduct(
            key=key,
            name=str(raw["name"]),
            market_names=tuple(str(n) for n in raw["market_names"]),
            device_ids=_hex_ids(raw["device_ids"], "device_ids", where),
            vf_device_ids=_hex_ids(raw.get("vf_device_ids", []), "vf_device_ids", where),
            gfx_target=str(raw["gfx_target"]),
            xcds=int(raw["xcds"]),
            cus_per_xcd=int(raw["cus_per_xcd"]),
            vram_mib=int(raw["vram_mib"]),
            vram_type=str(raw["vram_type"]),
            bandwidth_gbps=float(raw["bandwidth_gbps"]),
            compute_modes=compute,
            memory_modes=memory,
            default=default,
            allowed=allowed,
            vf_options=tuple(
                VfOption(int(o["vfs"]), o.get("compute"), o.get("memory"))
                for o in raw.get("vf_options", [])
            ),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise AmdModesError(f"{_DATA_FILE}: {where} is malformed: {exc!r}") from exc
    _check(product, where)
    return product


def _check(product: AmdProduct, where: str) -> None:
    """Refuse data that contradicts itself, so a typo cannot become a simulated rule."""
    for compute, memory in product.allowed:
        if compute not in product.compute_modes or memory not in product.memory_modes:
            raise AmdModesError(
                f"{_DATA_FILE}: {where}: allowed pair {compute}+{memory} "
                "names a mode the product does not list"
            )
        if product.memory_modes[memory] > product.compute_modes[compute]:
            raise AmdModesError(
                f"{_DATA_FILE}: {where}: {compute}+{memory} has more memory "
                "partitions than compute partitions"
            )
    if product.default not in product.allowed:
        raise AmdModesError(f"{_DATA_FILE}: {where}: default {product.default} is not allowed")
    unknown = set(product.compute_modes) - set(COMPUTE_MODE_NAMES)
    unknown |= set(product.memory_modes) - set(MEMORY_MODE_NAMES)
    if unknown:
        raise AmdModesError(f"{_DATA_FILE}: {where}: unknown modes {sorted(unknown)}")


@functools.lru_cache(maxsize=None)  # noqa: UP033 - the agent also runs on python 3.8
def products() -> dict[str, AmdProduct]:
    """All products in the data file, by key."""
    raw = pkgutil.get_data("gpupoolctl.hw", _DATA_FILE)
    if raw is None:
        raise AmdModesError(f"{_DATA_FILE}: not found in the gpupoolctl.hw package")
    try:
        document = json.loads(raw.decode("utf-8"))
        entries = document["products"]
    except (ValueError, KeyError, TypeError) as exc:
        raise AmdModesError(f"{_DATA_FILE}: expected an object with 'products': {exc}") from exc
    return {str(key): _product(str(key), value) for key, value in entries.items()}


def product(key: str) -> AmdProduct:
    try:
        return products()[key]
    except KeyError:
        known = ", ".join(sorted(products()))
        raise KeyError(f"unknown AMD product {key!r}; known: {known}") from None


def find_product(
    market_name: str | None = None, device_id: int | str | None = None
) -> AmdProduct | None:
    """The product a card is, by PCI device id (best) or market name; None if unknown."""
    if isinstance(device_id, str):
        try:
            device_id = int(device_id, 16)
        except ValueError:
            device_id = None
    for candidate in products().values():
        if device_id is not None and (
            device_id in candidate.device_ids or device_id in candidate.vf_device_ids
        ):
            return candidate
    if market_name:
        wanted = market_name.strip().lower()
        for candidate in products().values():
            if wanted in (n.lower() for n in candidate.market_names):
                return candidate
    return None
