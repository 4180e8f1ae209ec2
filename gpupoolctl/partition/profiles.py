"""MIG profile names as mig-parted (go-nvlib) writes them, and the profile table for people.

A name is `[<c>c.]<g>g.<gb>gb[+attr[,attr]|-attr[,attr]]`: "1g.10gb", "1c.3g.40gb" (a compute
instance of 1 slice inside a 3g.40gb GPU instance), "1g.5gb+me", "1g.24gb+me.all",
"1g.24gb-me". The parse rules follow go-nvlib's parseMigProfile, which mig-parted uses: both
'+' and '-' attributes together are refused; attributes are alphanumeric (dots inside allowed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.hw import amd_modes, catalog


@dataclass(frozen=True)
class ProfileName:
    ci_slices: int  # compute slices of the compute instance (== g for a full-GI CI)
    g: int
    gb: int
    attrs: tuple[str, ...] = ()
    neg_attrs: tuple[str, ...] = ()

    @property
    def gi_name(self) -> str:
        """The GPU-instance profile this names, in catalog spelling ("3g.40gb", "1g.5gb+me")."""
        suffix = ""
        if self.attrs:
            suffix = "+" + ",".join(self.attrs)
        elif self.neg_attrs:
            suffix = "-" + ",".join(self.neg_attrs)
        return f"{self.g}g.{self.gb}gb{suffix}"

    @property
    def is_ci_form(self) -> bool:
        return self.ci_slices != self.g

    def __str__(self) -> str:
        if self.is_ci_form:
            return f"{self.ci_slices}c.{self.gi_name}"
        return self.gi_name


def _field(text: str, unit: str) -> int:
    if text.strip() != text:
        raise ValueError(f"spaces around '%d{unit}'")
    if not text.endswith(unit):
        raise ValueError(f"missing '{unit}' in '%d{unit}'")
    number = text[: -len(unit)]
    if not number.isdigit() or int(number) < 1:
        raise ValueError(f"malformed number in '%d{unit}'")
    return int(number)


def _attributes(text: str) -> tuple[str, ...]:
    attrs = text.split(",")
    if len(set(attrs)) != len(attrs):
        raise ValueError("an attribute is repeated")
    for attr in attrs:
        if not attr:
            raise ValueError("empty attribute")
        if attr[0].isdigit():
            raise ValueError("attribute begins with a digit")
        if attr[0] == "." or attr[-1] == ".":
            raise ValueError("attribute begins or ends with a dot")
        if not all(ch.isascii() and (ch.isalnum() or ch == ".") for ch in attr):
            raise ValueError("attribute is not alphanumeric")
    return tuple(sorted(attrs))


def parse_profile_name(text: str) -> ProfileName:
    """Parse a MIG profile string; ValueError says what is wrong."""
    if not text:
        raise ValueError("empty profile name")
    plus = text.split("+", 1)
    minus = text.split("-", 1)
    if len(plus) == 2 and len(minus) == 2:
        raise ValueError("has both '+' and '-' attributes")
    parts = plus if len(plus) == 2 else minus
    fields = parts[0].split(".", 2)
    if len(fields) == 3:
        c, g, gb = _field(fields[0], "c"), _field(fields[1], "g"), _field(fields[2], "gb")
    elif len(fields) == 2:
        g, gb = _field(fields[0], "g"), _field(fields[1], "gb")
        c = g
    else:
        raise ValueError("expected '<g>g.<gb>gb' or '<c>c.<g>g.<gb>gb'")
    if c > g:
        raise ValueError(f"a compute instance of {c} slices cannot fit a {g}g GPU instance")
    attrs: tuple[str, ...] = ()
    neg: tuple[str, ...] = ()
    if len(parts) == 2:
        if len(plus) == 2:
            attrs = _attributes(parts[1])
        else:
            neg = _attributes(parts[1])
    return ProfileName(c, g, gb, attrs, neg)


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


def resolve_model(model: str) -> list[tuple[str, Any]]:
    """Catalog entries (NVIDIA models or AMD products) a user's model string names."""
    wanted = model.strip().lower()
    found: list[tuple[str, Any]] = []
    for key, nv in catalog.nvidia_models().items():
        names = [key, *nv.names, *nv.pci_device_ids]
        if wanted in (n.lower() for n in names):
            found.append(("nvidia", nv))
    for key, amd in amd_modes.products().items():
        names = [key, amd.name, *amd.market_names]
        if wanted in (n.lower() for n in names):
            found.append(("amd", amd))
    return found


def profile_rows(model: str | None = None) -> list[dict[str, Any]]:
    """Rows for `partition profiles`: every MIG profile (and AMD mode pair) per model."""
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
    return rows


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
