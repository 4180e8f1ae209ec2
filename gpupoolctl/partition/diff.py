"""Current state vs desired layout -> ordered operations per GPU (hw.ops, the agent's contract).

Order for one GPU (hw/ops.py): destroy_ci*, destroy_gi*, set_sriov_vfs(0)?, set_mig_mode?,
set_memory_partition?, set_compute_partition?, create_gi* (explicit placements, with their
compute instances), set_sriov_vfs(N)?.

A GPU whose current layout already satisfies the request gets no operations. When only part
of a MIG layout changes, current GPU instances that the new layout can keep (same profile and
compute instances; same start when the spec pins one) stay where they are and only the rest is
destroyed and created, so work running on the kept instances is not disturbed. If the wanted
layout cannot be completed around them, everything is rebuilt from an empty GPU (the simplest
layout that is certainly valid).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.agent.partition.expect import from_facts as expected_state
from gpupoolctl.hw import catalog
from gpupoolctl.hw import ops as hwops
from gpupoolctl.partition import layout as lay
from gpupoolctl.partition import reach
from gpupoolctl.partition.planner import place
from gpupoolctl.partition.spec import Spec, SpecEntry


@dataclass
class GpuDiff:
    index: int
    uuid: str
    model: str
    vendor: str
    current: str
    desired: str
    ops: list[hwops.Operation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    placements: list[tuple[str, int]] = field(default_factory=list)  # MIG layout after apply
    # The state the ops were planned from: the agent refuses the GPU if it is no longer so.
    expect: dict[str, Any] = field(default_factory=dict)
    # Other GPUs of the host the ops change too (an AMD card's partitions, its hive).
    also_changes: list[int] = field(default_factory=list)
    # Why its ops were dropped before anything was sent (partition.guard: slices held in
    # the ledger), and how many there were: the GPU is refused, not already right.
    withheld: str | None = None
    withheld_ops: int = 0

    @property
    def unchanged(self) -> bool:
        return not self.ops


@dataclass
class HostPlan:
    host: str
    gpus: list[GpuDiff] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(not g.unchanged for g in self.gpus)

    def agent_args(self, force: bool) -> hwops.PartitionRequestArgs:
        """The `partition` verb's args: the GPUs that change, with their ops, and, when any
        does, every other GPU of the plan with none: the node checks that all of them are
        still as planned before it changes any (another run may have changed one)."""
        plans: list[hwops.GpuPlan] = [
            hwops.GpuPlan(
                index=g.index,
                uuid=g.uuid,
                vendor="amd" if g.vendor == "amd" else "nvidia",
                ops=list(g.ops),
                expect=dict(g.expect),
            )
            for g in self.gpus
            if self.changed
        ]
        return {"gpus": plans, "force": force}


@dataclass
class _Ops:
    """Operations by phase, so every aspect can add its own and the order stays right."""

    destroy_ci: list[hwops.Operation] = field(default_factory=list)
    destroy_gi: list[hwops.Operation] = field(default_factory=list)
    sriov_off: list[hwops.Operation] = field(default_factory=list)
    mig_mode: list[hwops.Operation] = field(default_factory=list)
    memory: list[hwops.Operation] = field(default_factory=list)
    compute: list[hwops.Operation] = field(default_factory=list)
    create_gi: list[hwops.Operation] = field(default_factory=list)
    sriov_on: list[hwops.Operation] = field(default_factory=list)

    def ordered(self) -> list[hwops.Operation]:
        return [
            *self.destroy_ci,
            *self.destroy_gi,
            *self.sriov_off,
            *self.mig_mode,
            *self.memory,
            *self.compute,
            *self.create_gi,
            *self.sriov_on,
        ]


def plan_host(
    spec: Spec, label: str, host: str, groups: Sequence[str], facts: Mapping[str, Any]
) -> HostPlan:
    """Per-GPU diffs for one host under one label of the spec; never raises for bad input
    that concerns one GPU (it lands in `errors`)."""
    entries = spec.config(label)
    selection = lay.select(entries, host, groups, facts)
    plan = HostPlan(
        host=host, errors=[str(e) for e in selection.errors], warnings=list(selection.warnings)
    )
    memory = reach.hive_memory(facts, selection.targets)
    for target in selection.targets:
        try:
            plan.gpus.append(_diff_gpu(host, target, memory.get(target.index)))
        except lay.PlanError as exc:
            plan.errors.append(str(exc))
    plan.errors.extend(str(e) for e in reach.hive_conflicts(host, facts, selection.targets))
    _mark_reach(facts, plan)
    return plan


def _mark_reach(facts: Mapping[str, Any], plan: HostPlan) -> None:
    for diff in plan.gpus:
        diff.also_changes = reach.also_changed(facts, diff.index, diff.ops)
        if diff.also_changes:  # the confirmation and the plan name them, not only this GPU
            diff.notes.append(
                f"also changes GPU(s) {reach.spans(diff.also_changes)} (same card or xGMI hive)"
            )


def reset_plan(host: str, facts: Mapping[str, Any]) -> HostPlan:
    """Back to whole cards: MIG disabled, AMD default modes (SPX/NPS1), SR-IOV 0."""
    entry = SpecEntry(
        source="<reset>",
        label="reset",
        line=0,
        devices="all",
        mig_enabled=False,
        sriov_vfs=0,
    )
    plan = HostPlan(host=host)
    for gpu in facts.get("gpus") or []:
        target = lay.GpuTarget(gpu)
        if lay.mig_capable(gpu):
            target.mig = entry
        product = lay.amd_product(gpu)
        if product is not None:
            target.amd = SpecEntry(
                source="<reset>",
                label="reset",
                line=0,
                devices="all",
                compute_partition=product.default[0],
                memory_partition=product.default[1],
            )
        if gpu.get("sriov"):
            target.sriov = entry
        if target.mig or target.amd or target.sriov:
            try:
                plan.gpus.append(_diff_gpu(host, target))
            except lay.PlanError as exc:
                plan.errors.append(str(exc))
    _mark_reach(facts, plan)
    return plan


def _diff_gpu(host: str, target: lay.GpuTarget, hive_memory: str | None = None) -> GpuDiff:
    gpu = target.gpu
    ops = _Ops()
    notes: list[str] = []
    diff = GpuDiff(
        index=int(gpu["index"]),
        uuid=str(gpu.get("uuid") or ""),
        model=str(gpu.get("model") or ""),
        vendor=str(gpu.get("vendor") or ""),
        current=lay.current_summary(gpu),
        desired="",
        expect=expected_state(gpu),
    )
    mig_after = _mig_diff(host, target, ops, notes, diff) if target.mig else None
    if mig_after is None and lay.mig_capable(gpu):
        gis = [(g.profile, g.ci_names) for g in lay.current_gis(gpu)]
        mig_after = (lay.mig_enabled_now(gpu), gis)
    amd_after = _amd_diff(host, target, ops, notes, hive_memory)
    vfs_after = _sriov_diff(host, target, ops, notes, amd_after)
    diff.ops = ops.ordered()
    diff.notes = notes
    diff.desired = lay.state_summary(gpu, mig_after, amd_after, vfs_after)
    return diff


def _mig_diff(
    host: str, target: lay.GpuTarget, ops: _Ops, notes: list[str], diff: GpuDiff
) -> tuple[bool, list[tuple[str, tuple[str, ...]]]]:
    entry = target.mig
    assert entry is not None and entry.mig_enabled is not None
    gpu = target.gpu
    enabled_now = lay.mig_enabled_now(gpu)
    current = lay.current_gis(gpu)
    # A mode change left pending (Ampere, until a reset) takes effect at the next reset or
    # reboot: a GPU whose current mode is right but whose pending one is not is not right.
    pending = lay.mig_pending(gpu)
    if pending is not None and pending != entry.mig_enabled and enabled_now == entry.mig_enabled:
        ops.mig_mode.append({"op": "set_mig_mode", "enabled": entry.mig_enabled})
        notes.append(
            f"cancels the pending MIG {'enable' if pending else 'disable'}, "
            "which the next GPU reset would carry out"
        )
    elif pending is not None and pending != enabled_now:
        notes.append(f"MIG mode change to {lay.mode_word(pending)} is pending a GPU reset")
    if not entry.mig_enabled:
        _destroy(current, ops)
        if enabled_now:
            ops.mig_mode.append({"op": "set_mig_mode", "enabled": False})
            _reset_note(gpu, notes)
        return False, []

    geometry, geometry_notes = lay.geometry_for(entry, host, gpu)
    notes.extend(geometry_notes)
    wants = lay.mig_wants(entry, host, gpu, geometry)
    keep, new, layout = _fit(entry, host, gpu, geometry, wants, current if enabled_now else [])
    _destroy([g for g in current if g not in keep], ops)
    if not enabled_now:
        ops.mig_mode.append({"op": "set_mig_mode", "enabled": True})
        _reset_note(gpu, notes)
    for want, start in sorted(new, key=lambda item: item[1]):
        op: hwops.CreateGi = {
            "op": "create_gi",
            "profile": want.profile.name,
            "profile_id": want.profile.id,
            "start": start,
            "size": want.profile.placement_size,
        }
        if want.cis != (want.profile.name,):
            op["compute_instances"] = list(want.cis)
        ops.create_gi.append(op)
    diff.placements = layout
    after = [(g.profile, g.ci_names) for g in keep] + [(w.profile.name, w.cis) for w, _ in new]
    return True, after


def _fit(
    entry: SpecEntry,
    host: str,
    gpu: Mapping[str, Any],
    geometry: catalog.MigGeometry,
    wants: list[lay.GiWant],
    current: list[lay.CurrentGi],
) -> tuple[list[lay.CurrentGi], list[tuple[lay.GiWant, int]], list[tuple[str, int]]]:
    """Which current GIs stay, which wants are created where, and the final layout."""
    pinned = [w for w in wants if w.start is not None]
    loose = [w for w in wants if w.start is None]
    pinned_keep: list[lay.CurrentGi] = []
    pinned_new: list[lay.GiWant] = []
    free = list(current)
    for want in pinned:
        match = next(
            (
                g
                for g in free
                if g.profile == want.profile.name
                and g.start == want.start
                and g.ci_names == want.cis
            ),
            None,
        )
        if match is not None:
            free.remove(match)
            pinned_keep.append(match)
        else:
            pinned_new.append(want)
    loose_keep: list[lay.CurrentGi] = []
    loose_new: list[lay.GiWant] = []
    for want in loose:
        match = next(
            (g for g in free if g.profile == want.profile.name and g.ci_names == want.cis), None
        )
        if match is not None:
            free.remove(match)
            loose_keep.append(match)
        else:
            loose_new.append(want)
    attempts = [(pinned_keep + loose_keep, loose_new)]
    if loose_keep:
        # The kept instances may block the rest: try again with only the pinned ones kept.
        attempts.append((pinned_keep, loose))
    for keep, to_place in attempts:
        fixed: dict[str, list[int]] = {}
        for g in keep:
            fixed.setdefault(g.profile, []).append(g.start)
        for want in pinned_new:
            assert want.start is not None
            fixed.setdefault(want.profile.name, []).append(want.start)
        requested: dict[str, int] = {}
        for want in to_place:
            requested[want.profile.name] = requested.get(want.profile.name, 0) + 1
        layout = place(geometry, requested, fixed)
        if layout is None:
            continue
        taken = [(g.profile, g.start) for g in keep] + [
            (w.profile.name, w.start) for w in pinned_new if w.start is not None
        ]
        starts: dict[str, list[int]] = {}
        for name, start in layout:
            if (name, start) in taken:
                taken.remove((name, start))
            else:
                starts.setdefault(name, []).append(start)
        new = [(w, w.start) for w in pinned_new if w.start is not None]
        new += [(w, starts[w.profile.name].pop(0)) for w in to_place]
        return keep, new, layout
    raise lay.PlanError(entry.source, _mig_line(entry), _why_not(host, gpu, geometry, wants))


def _mig_line(entry: SpecEntry) -> int:
    return entry.lines.get("mig-devices", entry.line)


def _why_not(
    host: str, gpu: Mapping[str, Any], geometry: catalog.MigGeometry, wants: list[lay.GiWant]
) -> str:
    counts: dict[str, int] = {}
    for want in wants:
        counts[want.profile.name] = counts.get(want.profile.name, 0) + 1
    asked = lay.mig_layout_text(counts)
    name = lay.gpu_label(host, gpu)
    for profile in geometry.profiles:
        n = counts.get(profile.name, 0)
        if n > profile.max_instances:
            limits = ", ".join(f"{p.name} <= {p.max_instances}" for p in geometry.profiles)
            return (
                f"{name}: {asked} is impossible: at most {profile.max_instances} x "
                f"{profile.name}; valid maxima: {limits}"
            )
    compute = sum(w.profile.compute_slices for w in wants)
    if compute > geometry.compute_slices:
        return (
            f"{name}: {asked} needs {compute} compute slices; the GPU has {geometry.compute_slices}"
        )
    slots = sum(w.profile.placement_size for w in wants)
    placements = "; ".join(
        f"{p.name} {{{','.join(map(str, p.placement_starts))}}}:{p.placement_size}"
        for p in geometry.profiles
        if p.name in counts
    )
    return (
        f"{name}: no placement fits {asked} ({slots} of {geometry.memory_slots} memory "
        f"slots; placements: {placements})"
    )


def _destroy(gis: Sequence[lay.CurrentGi], ops: _Ops) -> None:
    for gi in gis:
        for ci_id, _ in gi.cis:
            ops.destroy_ci.append({"op": "destroy_ci", "gi": gi.gi_id, "ci": ci_id})
        ops.destroy_gi.append({"op": "destroy_gi", "gi": gi.gi_id})


def _reset_note(gpu: Mapping[str, Any], notes: list[str]) -> None:
    if lay.needs_reset(gpu):
        notes.append("MIG mode change on Ampere (A100/A30) needs a GPU reset")


def _amd_diff(
    host: str, target: lay.GpuTarget, ops: _Ops, notes: list[str], hive_memory: str | None
) -> tuple[str, str] | None:
    gpu = target.gpu
    part = gpu.get("partition") or {}
    current = (part.get("compute"), part.get("memory"))
    if target.amd is None:
        if current[0] and current[1]:
            return str(current[0]), str(current[1])
        return None
    compute, memory = lay.amd_want(target.amd, host, gpu, hive_memory)
    if memory != current[1]:
        ops.memory.append({"op": "set_memory_partition", "mode": memory})
        notes.append("a memory partition change reloads the amdgpu driver on every GPU of the hive")
    if compute != current[0]:
        ops.compute.append({"op": "set_compute_partition", "mode": compute})
    return compute, memory


def _sriov_diff(
    host: str,
    target: lay.GpuTarget,
    ops: _Ops,
    notes: list[str],
    amd_after: tuple[str, str] | None,
) -> int | None:
    gpu = target.gpu
    sriov = gpu.get("sriov")
    if not sriov:
        return None
    now = int(sriov.get("num_vfs") or 0)
    want = now if target.sriov is None else int(target.sriov.sriov_vfs or 0)
    partition_changes = bool(ops.memory or ops.compute)
    if want == now and not (partition_changes and now > 0):
        return want
    lay.sriov_check(target.sriov, host, gpu, want, amd_after)
    if now > 0:
        ops.sriov_off.append({"op": "set_sriov_vfs", "count": 0})
        if want == now:
            notes.append(f"SR-IOV VFs go to 0 for the partition change and back to {now}")
        else:
            notes.append("SR-IOV: the kernel takes 0 before a new VF count")
    if want > 0:
        ops.sriov_on.append({"op": "set_sriov_vfs", "count": want})
    return want
