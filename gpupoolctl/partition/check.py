"""Does the current state hold a spec label? mig-parted's assert, per host.

MIG: the mode must match, and no change to the other mode may be pending a GPU reset (the
next reset or reboot would carry it out; mig-parted checks the current mode only); when
enabled, the compute-instance profile counts must equal the spec's (mig-parted compares the
same multiset, e.g. {"1g.10gb": 7}); GPU instances the spec pins (`P@s`) must sit at that
start with those compute instances. AMD: the modes the entry names must be the current ones.
SR-IOV: the VF count must match. GPUs no entry selects are outside the config and not
checked (mig-parted, which sees one node, fails them instead).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gpupoolctl.partition import layout as lay
from gpupoolctl.partition.spec import Spec, SpecEntry


def assert_host(
    spec: Spec, label: str, host: str, groups: Sequence[str], facts: Mapping[str, Any]
) -> list[str]:
    """Mismatches as one line each; [] means the label holds on this host.

    Raises PlanError (a SourceError) when the spec selects a GPU that cannot take what the
    entry asks (e.g. mig-enabled: true on a non-MIG GPU named by index)."""
    selection = lay.select(spec.config(label), host, groups, facts)
    if selection.errors:
        raise selection.errors[0]
    out: list[str] = []
    for target in selection.targets:
        name = lay.gpu_label(host, target.gpu)
        if target.mig is not None:
            out.extend(f"{name}: {m}" for m in _mig(target.mig, target.gpu))
        if target.amd is not None:
            out.extend(f"{name}: {m}" for m in _amd(target.amd, target.gpu))
        if target.sriov is not None:
            now = int((target.gpu.get("sriov") or {}).get("num_vfs") or 0)
            if now != target.sriov.sriov_vfs:
                out.append(f"{name}: {now} SR-IOV VFs, wanted {target.sriov.sriov_vfs}")
    return out


def selected_gpus(
    spec: Spec, label: str, host: str, groups: Sequence[str], facts: Mapping[str, Any]
) -> int:
    """How many of the host's GPUs the label selects. An assert over hosts where this is 0
    everywhere holds vacuously, which is almost always a typo in hosts:/devices:."""
    selection = lay.select(spec.config(label), host, groups, facts)
    return len(selection.targets)


def _mig(entry: SpecEntry, gpu: Mapping[str, Any]) -> list[str]:
    enabled = lay.mig_enabled_now(gpu)
    pending = lay.mig_pending(gpu)
    wanted = lay.mode_word(bool(entry.mig_enabled))
    if enabled != entry.mig_enabled:
        return [f"MIG is {lay.mode_word(enabled)}, wanted {wanted}"]
    out = []
    if pending is not None and pending != enabled:
        # It holds only until the next GPU reset or reboot carries the pending mode out.
        out.append(
            f"MIG {'enable' if pending else 'disable'} is pending a GPU reset, wanted {wanted}"
        )
    if not entry.mig_enabled:
        return out
    current = lay.current_gis(gpu)
    have: Counter[str] = Counter()
    for gi in current:
        if not gi.cis:
            out.append(f"GPU instance {gi.gi_id} ({gi.profile}) has no compute instance")
        have.update(name for _, name in gi.cis)
    want: Counter[str] = Counter()
    for device in entry.mig_devices:
        want[str(device.profile)] += device.count
    want = +want  # zero counts mean nothing, as in mig-parted
    if have != want:
        out.append(f"{lay.mig_layout_text(have)}, wanted {lay.mig_layout_text(want)}")
    pins: dict[tuple[str, int], list[str]] = {}
    for device in entry.mig_devices:
        if device.start is not None:
            pins.setdefault((device.profile.gi_name, device.start), []).extend(
                [str(device.profile)] * device.count
            )
    for (profile, start), cis in pins.items():
        match = [g for g in current if g.profile == profile and g.start == start]
        if not match:
            out.append(f"no {profile} at slot {start}")
        elif match[0].ci_names != tuple(sorted(cis)):
            out.append(
                f"{profile}@{start} holds {', '.join(match[0].ci_names) or 'no CI'}, "
                f"wanted {', '.join(sorted(cis))}"
            )
    return out


def _amd(entry: SpecEntry, gpu: Mapping[str, Any]) -> list[str]:
    part = gpu.get("partition") or {}
    out = []
    if entry.compute_partition and part.get("compute") != entry.compute_partition:
        out.append(f"compute partition {part.get('compute')}, wanted {entry.compute_partition}")
    if entry.memory_partition and part.get("memory") != entry.memory_partition:
        out.append(f"memory partition {part.get('memory')}, wanted {entry.memory_partition}")
    return out
