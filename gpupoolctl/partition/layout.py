"""The desired per-GPU layout: which spec entry governs which GPU, and what it asks for.

Selection follows mig-parted (entries in order, later ones win; `devices: all` skips GPUs an
aspect does not apply to, explicitly listed indexes are an error there), aspect by aspect:
the MIG layout, the AMD compute/memory modes, the SR-IOV VF count. Model-dependent checks
(profile names, CI sizes, AMD mode pairs, VF counts) happen here, against the GPU's facts and
the hw catalog, and every error names the spec's file:line, the host, GPU index and model,
what was asked and the valid choices.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.errors import SourceError
from gpupoolctl.hw import amd_modes, catalog
from gpupoolctl.partition.profiles import canonical, ci_name
from gpupoolctl.partition.spec import MigDevice, SpecEntry


class PlanError(SourceError):
    """A spec entry asks something a selected GPU cannot do."""


@dataclass(frozen=True)
class GiWant:
    """One desired GPU instance: its profile, its compute instances, maybe a pinned start."""

    profile: catalog.GpuInstanceProfile
    cis: tuple[str, ...]  # CI profile names, sorted ("3g.40gb" for the default full CI)
    start: int | None = None


@dataclass(frozen=True)
class CurrentGi:
    gi_id: int
    profile: str
    start: int
    size: int
    cis: tuple[tuple[int, str], ...]  # (ci_id, canonical CI profile name)

    @property
    def ci_names(self) -> tuple[str, ...]:
        return tuple(sorted(name for _, name in self.cis))


@dataclass
class GpuTarget:
    """What the spec says about one GPU (None: that aspect is left as it is)."""

    gpu: Mapping[str, Any]
    mig: SpecEntry | None = None
    amd: SpecEntry | None = None
    sriov: SpecEntry | None = None

    @property
    def index(self) -> int:
        return int(self.gpu["index"])


@dataclass
class Selection:
    targets: list[GpuTarget] = field(default_factory=list)
    errors: list[PlanError] = field(default_factory=list)
    # Not errors (mig-parted skips them too, and one file may serve hosts of different
    # sizes), but worth saying: `devices:` indexes this host does not have.
    warnings: list[str] = field(default_factory=list)


def gpu_label(host: str, gpu: Mapping[str, Any]) -> str:
    return f"{host} GPU {gpu.get('index')} ({gpu.get('model') or 'unknown model'})"


def mig_capable(gpu: Mapping[str, Any]) -> bool:
    mig = gpu.get("mig")
    return gpu.get("vendor") == "nvidia" and bool(mig and mig.get("capable"))


def amd_product(gpu: Mapping[str, Any]) -> amd_modes.AmdProduct | None:
    if gpu.get("vendor") != "amd" or not gpu.get("partition"):
        return None
    pci = str(gpu.get("pci_device_id") or "")
    device_id = int(pci[2:6], 16) if pci.lower().startswith("0x") and len(pci) >= 6 else None
    return amd_modes.find_product(gpu.get("model"), device_id)


def nvidia_model(gpu: Mapping[str, Any]) -> catalog.NvidiaModel | None:
    return catalog.find_nvidia_model(gpu.get("pci_device_id") or None, gpu.get("model"))


def select(
    entries: Sequence[SpecEntry], host: str, groups: Sequence[str], facts: Mapping[str, Any]
) -> Selection:
    """Which entry governs each aspect of each GPU of this host."""
    out = Selection()
    by_index: dict[int, GpuTarget] = {}
    gpus = list(facts.get("gpus") or [])
    present = {int(gpu["index"]) for gpu in gpus}
    for entry in entries:
        if not entry.matches_host(host, groups):
            continue
        missing = [] if entry.all_devices else sorted(set(entry.devices) - present)
        if missing and gpus:
            where = f"{entry.source}:{entry.lines.get('devices', entry.line)}"
            out.warnings.append(
                f"{where}: devices {', '.join(map(str, missing))} match no GPU on {host} "
                f"(it has GPUs {min(present)}-{max(present)}); nothing is done for them"
            )
        for gpu in gpus:
            if not entry.matches_device(int(gpu["index"]), gpu.get("pci_device_id")):
                continue
            target = by_index.setdefault(int(gpu["index"]), GpuTarget(gpu))
            _apply_entry(out, target, entry, host)
    out.targets = [by_index[i] for i in sorted(by_index)]
    out.targets = [t for t in out.targets if t.mig or t.amd or t.sriov]
    return out


def takes(entry: SpecEntry, gpu: Mapping[str, Any]) -> dict[str, bool]:
    """The aspects `entry` sets ("mig", "amd", "sriov"), each with whether this GPU has
    what that aspect acts on (MIG, AMD partition modes, an SR-IOV PF). An aspect the GPU
    lacks is skipped under `devices: all` (as mig-parted does) and an error for an index."""
    out: dict[str, bool] = {}
    if entry.mig_enabled is not None:
        out["mig"] = mig_capable(gpu)
    if entry.sets_amd:
        out["amd"] = amd_product(gpu) is not None
    if entry.sriov_vfs is not None:
        out["sriov"] = bool(gpu.get("sriov"))
    return out


def asks_something(entry: SpecEntry, aspect: str) -> bool:
    """Whether the aspect asks for something a GPU without it lacks: MIG enabled, AMD
    modes, VFs. MIG disabled and 0 VFs hold on such a GPU as they are."""
    if aspect == "mig":
        return bool(entry.mig_enabled)
    if aspect == "sriov":
        return bool(entry.sriov_vfs)
    return aspect == "amd"


def _apply_entry(out: Selection, target: GpuTarget, entry: SpecEntry, host: str) -> None:
    gpu = target.gpu
    name = gpu_label(host, gpu)
    aspects = takes(entry, gpu)
    if "mig" in aspects:
        if aspects["mig"]:
            target.mig = entry
        elif entry.mig_enabled and not entry.all_devices:
            out.errors.append(
                PlanError(
                    entry.source,
                    entry.lines.get("devices", entry.line),
                    f"{name} is not MIG-capable; it cannot take mig-enabled: true",
                )
            )
    if "amd" in aspects:
        if aspects["amd"]:
            target.amd = entry
        elif not entry.all_devices:
            out.errors.append(
                PlanError(
                    entry.source,
                    entry.lines.get("devices", entry.line),
                    f"{name} has no AMD compute/memory partition modes "
                    "(an AMD Instinct card this catalog knows is needed)",
                )
            )
    if "sriov" in aspects:
        if aspects["sriov"]:
            target.sriov = entry
        elif not entry.all_devices:
            out.errors.append(
                PlanError(
                    entry.source,
                    entry.lines.get("sriov-vfs", entry.line),
                    f"{name} has no SR-IOV physical function (sriov_totalvfs absent)",
                )
            )


# --- MIG ----------------------------------------------------------------------------------


def current_gis(gpu: Mapping[str, Any]) -> list[CurrentGi]:
    mig = gpu.get("mig") or {}
    out = []
    for gi in mig.get("instances") or []:
        cis = tuple(
            (int(ci["ci_id"]), canonical(str(ci["profile"])))
            for ci in gi.get("compute_instances") or []
        )
        out.append(
            CurrentGi(
                gi_id=int(gi["gi_id"]),
                profile=canonical(str(gi["profile"])),
                start=int(gi["placement_start"]),
                size=int(gi["placement_size"]),
                cis=cis,
            )
        )
    return sorted(out, key=lambda g: (g.start, g.gi_id))


def mig_enabled_now(gpu: Mapping[str, Any]) -> bool:
    return (gpu.get("mig") or {}).get("mode") == "enabled"


def mig_pending(gpu: Mapping[str, Any]) -> bool | None:
    """The MIG mode the next GPU reset brings (True: enabled); None when not reported."""
    pending = (gpu.get("mig") or {}).get("pending")
    return None if pending not in ("enabled", "disabled") else pending == "enabled"


def mode_word(enabled: bool) -> str:
    return "enabled" if enabled else "disabled"


def geometry_for(
    entry: SpecEntry, host: str, gpu: Mapping[str, Any]
) -> tuple[catalog.MigGeometry, list[str]]:
    """The GPU's MIG geometry and notes. The profiles the driver reported (facts' mig.profiles)
    win over the catalog; a difference between the two is reported in the notes."""
    model = nvidia_model(gpu)
    base = model.mig if model is not None else None
    runtime = runtime_geometry(gpu, base)
    if runtime is not None:
        if base is None:
            return runtime, ["no catalog entry for this model: using the driver's MIG profiles"]
        differences = geometry_differences(base, runtime)
        if differences:
            return runtime, [
                "the driver's MIG profiles differ from the catalog (the driver wins): "
                + "; ".join(differences)
            ]
        return runtime, []
    if base is None:
        raise PlanError(
            entry.source,
            entry.line,
            f"{gpu_label(host, gpu)}: no MIG geometry for PCI id {gpu.get('pci_device_id')} "
            "in the catalog, and the facts carry no MIG profiles from the driver",
        )
    return base, []


def runtime_geometry(
    gpu: Mapping[str, Any], base: catalog.MigGeometry | None
) -> catalog.MigGeometry | None:
    """A geometry from the driver's profile table in the facts; None when absent/incomplete."""
    raw = (gpu.get("mig") or {}).get("profiles")
    if not raw:
        return None
    profiles = []
    try:
        for item in raw:
            if not item.get("name") or item.get("size") is None or not item.get("placements"):
                return None  # unnamed or unplaceable: the catalog is the better guess
            name = canonical(str(item["name"]))
            known = base.by_name(name) if base is not None else None
            profiles.append(
                catalog.GpuInstanceProfile(
                    name=name,
                    id=int(item["id"]),
                    index=known.index if known is not None else -1,
                    compute_slices=int(item["slices"]),
                    memory_mib=int(item.get("memory_mib") or 0),
                    sm_count=int(item.get("sm_count") or 0),
                    max_instances=int(item["max_instances"]),
                    placement_starts=tuple(sorted(int(s) for s in item["placements"])),
                    placement_size=int(item["size"]),
                )
            )
    except (KeyError, TypeError, ValueError):
        return None
    if base is not None:
        slots, compute = base.memory_slots, base.compute_slices
    else:
        slots = max(p.placement_starts[-1] + p.placement_size for p in profiles)
        compute = max(p.compute_slices for p in profiles)
    profiles.sort(key=lambda p: (p.compute_slices, p.placement_size, p.name))  # catalog order
    return catalog.MigGeometry(slots, compute, tuple(profiles), source="driver")


def geometry_differences(base: catalog.MigGeometry, runtime: catalog.MigGeometry) -> list[str]:
    def shape(p: catalog.GpuInstanceProfile) -> tuple[Any, ...]:
        return (p.id, p.compute_slices, p.max_instances, p.placement_starts, p.placement_size)

    def text(p: catalog.GpuInstanceProfile) -> str:
        starts = ",".join(str(s) for s in p.placement_starts)
        return f"id {p.id}, {p.max_instances} max, {{{starts}}}:{p.placement_size}"

    ours = {p.name: p for p in base.profiles}
    theirs = {p.name: p for p in runtime.profiles}
    out = []
    for name in sorted(set(ours) | set(theirs)):
        a, b = ours.get(name), theirs.get(name)
        if a is None and b is not None:
            out.append(f"{name} only in the driver ({text(b)})")
        elif b is None and a is not None:
            out.append(f"{name} only in the catalog")
        elif a is not None and b is not None and shape(a) != shape(b):
            out.append(f"{name}: catalog {text(a)}, driver {text(b)}")
    return out


def _profile_for(
    device: MigDevice,
    entry: SpecEntry,
    host: str,
    gpu: Mapping[str, Any],
    geometry: catalog.MigGeometry,
) -> catalog.GpuInstanceProfile:
    gi = geometry.by_name(device.profile.gi_name)
    if gi is None:
        valid = ", ".join(p.name for p in geometry.profiles)
        raise PlanError(
            entry.source,
            device.line,
            f"{gpu_label(host, gpu)}: {device.key} is not a MIG profile of "
            f"{gpu.get('model')}; valid: {valid}",
        )
    sizes = [c.compute_slices for c in catalog.compute_instance_profiles(gi)]
    if device.profile.ci_slices not in sizes:
        valid = ", ".join(ci_name(gi, c) for c in sizes)
        raise PlanError(
            entry.source,
            device.line,
            f"{gpu_label(host, gpu)}: {device.key} is not a compute-instance profile of "
            f"{gi.name}; valid: {valid}",
        )
    if device.start is not None and device.start not in gi.placement_starts:
        starts = ", ".join(str(s) for s in gi.placement_starts)
        raise PlanError(
            entry.source,
            device.line,
            f"{gpu_label(host, gpu)}: {gi.name} cannot start at slot {device.start}; "
            f"valid starts: {starts}",
        )
    return gi


def mig_wants(
    entry: SpecEntry, host: str, gpu: Mapping[str, Any], geometry: catalog.MigGeometry
) -> list[GiWant]:
    """The GPU instances an enabled entry asks for on this GPU, CIs packed into GIs."""
    loose: dict[str, list[int]] = {}  # GI profile -> CI sizes to pack (CI forms)
    whole: Counter[str] = Counter()  # GI profile -> count of full-CI instances
    pinned: dict[tuple[str, int], list[tuple[int, MigDevice]]] = {}
    profiles: dict[str, catalog.GpuInstanceProfile] = {}
    for device in entry.mig_devices:
        if device.count == 0:
            continue
        gi = _profile_for(device, entry, host, gpu, geometry)
        profiles[gi.name] = gi
        if device.start is not None:
            pinned.setdefault((gi.name, device.start), []).extend(
                (device.profile.ci_slices, device) for _ in range(device.count)
            )
        elif device.profile.is_ci_form:
            loose.setdefault(gi.name, []).extend([device.profile.ci_slices] * device.count)
        else:
            whole[gi.name] += device.count
    wants: list[GiWant] = []
    for name, n in whole.items():
        gi = profiles[name]
        wants.extend(GiWant(gi, (gi.name,)) for _ in range(n))
    for name, sizes in loose.items():
        gi = profiles[name]
        for group in _pack_cis(gi, sizes):
            wants.append(GiWant(gi, tuple(sorted(ci_name(gi, c) for c in group))))
    for (name, start), items in pinned.items():
        gi = profiles[name]
        groups = _pack_cis(gi, [c for c, _ in items])
        if len(groups) != 1:
            device = items[0][1]
            raise PlanError(
                entry.source,
                device.line,
                f"{gpu_label(host, gpu)}: the compute instances asked for {gi.name}@{start} "
                f"do not fit one {gi.name} ({gi.compute_slices} compute slices)",
            )
        wants.append(GiWant(gi, tuple(sorted(ci_name(gi, c) for c in groups[0])), start))
    return wants


def _pack_cis(gi: catalog.GpuInstanceProfile, sizes: list[int]) -> list[list[int]]:
    """First-fit decreasing: CIs into as few GIs as their placements allow."""
    options = {c.compute_slices: c for c in catalog.compute_instance_profiles(gi)}
    bins: list[tuple[int, list[int]]] = []  # (occupied compute-slice mask, sizes)
    for size in sorted(sizes, reverse=True):
        ci = options[size]
        for i, (mask, group) in enumerate(bins):
            if group.count(size) >= ci.max_instances:
                continue
            start = next(
                (s for s in ci.placement_starts if not mask & (((1 << size) - 1) << s)), None
            )
            if start is not None:
                bins[i] = (mask | ((1 << size) - 1) << start, [*group, size])
                break
        else:
            bins.append((((1 << size) - 1) << ci.placement_starts[0], [size]))
    return [group for _, group in bins]


def needs_reset(gpu: Mapping[str, Any]) -> bool:
    """MIG mode changes need a GPU reset on Ampere (A100/A30, compute capability 8.0)."""
    model = nvidia_model(gpu)
    if model is not None:
        return model.architecture == "ampere"
    return str(gpu.get("compute_capability") or "").startswith("8.0")


# --- AMD and SR-IOV -------------------------------------------------------------------------


def amd_want(
    entry: SpecEntry, host: str, gpu: Mapping[str, Any], hive_memory: str | None = None
) -> tuple[str, str]:
    """The (compute, memory) pair an entry asks for, completed from the memory mode its
    hive must end in (`hive_memory`, see partition.reach), else from the current modes."""
    product = amd_product(gpu)
    assert product is not None  # select() only targets known AMD products
    part = gpu.get("partition") or {}
    cur_c = str(part.get("compute") or product.default[0])
    cur_m = str(part.get("memory") or product.default[1])
    compute, memory = entry.compute_partition, entry.memory_partition
    name = gpu_label(host, gpu)
    pairs = ", ".join(f"{c}/{m}" for c, m in product.allowed)
    if compute is not None and compute not in product.compute_modes:
        raise PlanError(
            entry.source,
            entry.lines.get("compute-partition", entry.line),
            f"{name}: compute-partition {compute} is not a mode of {product.name}; "
            f"valid: {', '.join(product.compute_modes)}",
        )
    if memory is not None and memory not in product.memory_modes:
        raise PlanError(
            entry.source,
            entry.lines.get("memory-partition", entry.line),
            f"{name}: memory-partition {memory} is not a mode of {product.name}; "
            f"valid: {', '.join(product.memory_caps())}",
        )
    if compute is not None and memory is not None:
        if not product.is_allowed(compute, memory):
            raise PlanError(
                entry.source,
                entry.lines.get("memory-partition", entry.line),
                f"{name}: {compute} with {memory} is not allowed on {product.name}; "
                f"valid pairs: {pairs}",
            )
        return compute, memory
    if compute is not None:
        if hive_memory is not None and product.is_allowed(compute, hive_memory):
            return compute, hive_memory
        if product.is_allowed(compute, cur_m):
            return compute, cur_m
        modes = product.memory_modes_for(compute)
        modes.sort(key=lambda m: product.allowed[(compute, m)] != "validated")
        return compute, modes[0]  # every listed compute mode has an allowed pair
    assert memory is not None
    moved = product.compute_for_memory(cur_c, memory)
    if moved is None:
        raise PlanError(
            entry.source,
            entry.lines.get("memory-partition", entry.line),
            f"{name}: no compute mode goes with {memory} on {product.name}; valid pairs: {pairs}",
        )
    return moved, memory


def sriov_check(
    entry: SpecEntry | None,
    host: str,
    gpu: Mapping[str, Any],
    count: int,
    amd_modes_after: tuple[str, str] | None,
) -> None:
    """Refuse a VF count the PF (sriov_totalvfs) or, on AMD, the partition mode cannot take."""
    if count == 0:
        return
    sriov = gpu.get("sriov") or {}
    total = int(sriov.get("total_vfs") or 0)
    choices = list(range(0, total + 1))
    product = amd_product(gpu)
    if product is not None and amd_modes_after is not None:
        offered = product.vf_counts(*amd_modes_after)
        choices = [0] + [n for n in offered if n <= total]
    if count in choices:
        return
    source = entry.source if entry else "<reset>"
    line = entry.lines.get("sriov-vfs", entry.line) if entry else None
    mode = f" in {amd_modes_after[0]}/{amd_modes_after[1]}" if product and amd_modes_after else ""
    raise PlanError(
        source,
        line,
        f"{gpu_label(host, gpu)}: {count} SR-IOV VFs are not possible{mode}; "
        f"valid: {', '.join(str(c) for c in choices)}",
    )


# --- summaries --------------------------------------------------------------------------


def mig_layout_text(counts: Mapping[str, int]) -> str:
    """The one spelling of a MIG layout for people: "MIG 1x3g.40gb + 2x1g.10gb".

    Every place that shows a layout (inventory, partition show/plan/apply/assert, the
    planner's refusals) writes it with this function. Largest profile first: GPU instance
    slices, then memory, then compute-instance slices (`1c.3g.40gb` is a 3g profile), then
    the name, so the same layout always reads the same. Zero counts are left out; a layout
    without instances is "MIG on (no instances)".
    """
    shown = {name: n for name, n in counts.items() if n > 0}
    if not shown:
        return MIG_NO_INSTANCES
    order = sorted(shown, key=_profile_order)
    return "MIG " + " + ".join(f"{shown[name]}x{name}" for name in order)


MIG_OFF = "MIG off"
MIG_NO_INSTANCES = "MIG on (no instances)"
WHOLE_CARD = "whole card"  # a GPU without MIG, AMD partitions or VFs (an L40S), everywhere
_PROFILE_SIZE = re.compile(r"(?:(\d+)c\.)?(\d+)g\.(\d+)gb")


def _profile_order(label: str) -> tuple[int, int, int, int, str]:
    match = _PROFILE_SIZE.match(label)
    if match is None:
        return (1, 0, 0, 0, label)  # a name the driver made up: after the known shapes
    gi = int(match[2])
    ci = int(match[1]) if match[1] else gi
    return (0, -gi, -int(match[3]), -ci, label)


def mig_summary(gis: Sequence[tuple[str, tuple[str, ...]]], enabled: bool) -> str:
    """ "MIG 1x3g.40gb + 2x1g.10gb"; CI detail in brackets when not one full CI per GI."""
    if not enabled:
        return MIG_OFF
    counts: Counter[str] = Counter()
    for profile, cis in gis:
        label = profile
        if cis != (profile,):
            label = f"{profile}[{'+'.join(_short_cis(cis)) or 'no CI'}]"
        counts[label] += 1
    return mig_layout_text(counts)


def _short_cis(cis: Sequence[str]) -> list[str]:
    counts = Counter(c.split(".", 1)[0] if c.count(".") >= 2 else "full" for c in cis)
    return [f"{n}x{k}" for k, n in sorted(counts.items())]


def state_summary(
    gpu: Mapping[str, Any],
    mig: tuple[bool, Sequence[tuple[str, tuple[str, ...]]]] | None,
    amd: tuple[str, str] | None,
    vfs: int | None,
) -> str:
    parts = []
    if mig is not None:
        parts.append(mig_summary(mig[1], mig[0]))
    if amd is not None:
        parts.append(f"{amd[0]}/{amd[1]}")
    if not parts:
        parts.append(WHOLE_CARD)
    if vfs:
        parts.append(f"{vfs} VFs")
    return ", ".join(parts)


def current_summary(gpu: Mapping[str, Any]) -> str:
    mig = None
    if mig_capable(gpu):
        gis = [(g.profile, g.ci_names) for g in current_gis(gpu)]
        mig = (mig_enabled_now(gpu), gis)
    amd = None
    part = gpu.get("partition")
    if part and part.get("compute"):
        amd = (str(part.get("compute")), str(part.get("memory")))
    vfs = int((gpu.get("sriov") or {}).get("num_vfs") or 0)
    text = state_summary(gpu, mig, amd, vfs)
    pending = mig_pending(gpu)
    if mig is not None and pending is not None and pending != mig[0]:
        text += f" (MIG {'enable' if pending else 'disable'} pending a reset)"
    return text
