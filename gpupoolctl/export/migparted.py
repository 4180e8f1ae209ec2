"""The current layout as a mig-parted v1 config: gpupoolctl's own export, and the strict
subset that NVIDIA's mig-parted (and the GPU operator's mig-manager) accepts.

`current_config` is `gpupoolctl partition export`'s output (gpupoolctl's superset: `hosts:`,
AMD partitions, SR-IOV), which parse_spec reads back and which plans zero operations on the
hosts it came from. `mig_entries` is one host's MIG layout with only the fields mig-parted
knows, for consumers that reject unknown fields (mig-parted's spec.go does).

`layouts_for_mig_parted` writes the labels of a layouts file (gpupoolctl's superset) in that
strict subset, each under its own label, for the hosts read:

- entries that set only AMD partitions or SR-IOV VFs are left out, and so are those fields
  (mig-manager sets MIG only);
- `hosts:` becomes the device-filter of the MIG-capable GPUs the entry selects on those
  hosts, which means the same on the hosts read only when no other host read has such a GPU
  the entry would then select too: otherwise the label is refused, naming the entry;
- a pinned placement (`3g.40gb@4`) becomes a count (mig-parted places instances itself);
- a label left with no entry is not written (it means nothing to mig-manager).

Every label must also plan on every host read (as `partition plan` would), and its entries
pass partition.coverage's checks: a label that cannot be applied on a node, or whose entry
selects nothing or asks cards for what they lack, is refused rather than handed to
mig-manager to fail there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpupoolctl.partition import Spec, SpecEntry
    from gpupoolctl.partition.coverage import HostRead

# The MigConfigSpec fields of mig-parted's api/spec/v1: anything else is rejected there.
MIG_PARTED_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")


def current_config(
    facts_by_host: Mapping[str, Mapping[str, Any]], label: str = "current"
) -> dict[str, Any]:
    """The selected hosts' current state as one v1 config under `label` (gpupoolctl's
    superset; the same document `gpupoolctl partition export` writes)."""
    from gpupoolctl.partition import export_config

    return export_config(facts_by_host, label=label)


def mig_capable(facts: Mapping[str, Any]) -> bool:
    """Whether the host has at least one MIG-capable GPU (what mig-manager acts on)."""
    from gpupoolctl.partition import layout

    return any(layout.mig_capable(gpu) for gpu in facts.get("gpus") or [])


def mig_entries(host: str, facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One host's MIG layout as mig-parted MigConfigSpec entries, with no host selection
    and no gpupoolctl-only fields; [] when the host has no MIG-capable GPU."""
    if not mig_capable(facts):
        return []
    config = current_config({host: facts}, label="current")
    entries = []
    for entry in config["mig-configs"]["current"]:
        if "mig-enabled" not in entry:
            continue  # an AMD or SR-IOV-only card: nothing for mig-parted
        entries.append({key: entry[key] for key in MIG_PARTED_FIELDS if key in entry})
    return entries


@dataclass
class MigPartedLayouts:
    """A layouts file's labels in mig-parted's subset: label -> entries, in file order;
    what was left out on the way (warnings) and why a label cannot be written (errors,
    each naming file:line)."""

    configs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def layouts_for_mig_parted(
    spec: Spec,
    read: Sequence[HostRead],
    known: Sequence[tuple[str, Sequence[str]]],
    inventory: str | None = None,
) -> MigPartedLayouts:
    """Every label of `spec` for mig-parted, checked against the hosts read (`known`: every
    inventory host as (name, groups), for the entries' `hosts:`)."""
    from gpupoolctl.partition import plan_host
    from gpupoolctl.partition.coverage import entry_problems

    out = MigPartedLayouts()
    for label in spec.labels:
        coverage = entry_problems(spec, label, read, known, inventory)
        errors = [str(e) for e in coverage.errors]
        out.warnings += [str(e) for e in coverage.unknown_hosts]
        for host in read:
            errors += plan_host(spec, label, host.name, host.groups, host.facts).errors
        entries: list[dict[str, Any]] = []
        dropped: list[str] = []
        for entry in spec.config(label):
            if entry.sets_amd or entry.sriov_vfs is not None:
                dropped.append(entry.where())
            if entry.mig_enabled is None:
                continue
            written, problem = _strict_entry(label, entry, read)
            if problem is not None:
                errors.append(problem)
            elif written is not None:
                entries.append(written)
        out.errors += list(dict.fromkeys(errors))
        if dropped:
            out.warnings.append(
                f"{label}: AMD partitions and SR-IOV VFs ({', '.join(dropped)}) are not "
                "written for mig-manager, which sets MIG only"
            )
        pinned = [d.key for e in spec.config(label) for d in e.mig_devices if d.start is not None]
        if pinned:
            out.warnings.append(
                f"{label}: placements {', '.join(pinned)} are written as counts "
                "(mig-parted places instances itself)"
            )
        if entries:
            out.configs[label] = entries
        else:
            out.warnings.append(f"{label}: no MIG entry for the hosts read: not written")
    return out


def _strict_entry(
    label: str, entry: SpecEntry, read: Sequence[HostRead]
) -> tuple[dict[str, Any] | None, str | None]:
    """One entry in mig-parted's fields (None: it selects no MIG GPU of its hosts), or why
    it cannot be written."""
    written: dict[str, Any] = {}
    if entry.hosts is not None:
        inside = [h for h in read if entry.matches_host(h.name, h.groups)]
        ids = {_id(gpu) for host in inside for gpu in _mig_gpus(entry, host)}
        if not ids:
            return None, None
        if "" in ids and not entry.device_filter:
            return None, (
                f"{entry.where('hosts')}: {label}: this entry's hosts: cannot be written for "
                "mig-parted: a GPU it selects reports no PCI device id to filter on"
            )
        # The entry's own device-filter where it has one (cards added later still match),
        # else the device ids of the cards it selects on its hosts.
        within = None if entry.device_filter else ids
        names = {h.name for h in inside}
        outside = [h.name for h in read if h.name not in names and _mig_gpus(entry, h, within)]
        if outside:
            return None, (
                f"{entry.where('hosts')}: {label}: this entry's hosts: cannot be written for "
                f"mig-parted, which has no host selection: {', '.join(outside)} (not in "
                f"hosts: {', '.join(entry.hosts)}) have GPUs that its devices: and device "
                f"id(s) {', '.join(_pci(i) for i in within or entry.device_filter)} select "
                "too, and mig-manager would change them as well"
            )
        filters = [_pci(i) for i in (entry.device_filter or sorted(ids))]
        written["device-filter"] = filters[0] if len(filters) == 1 else filters
    elif entry.device_filter:
        filters = [_pci(i) for i in entry.device_filter]
        written["device-filter"] = filters[0] if len(filters) == 1 else filters
    written["devices"] = "all" if entry.all_devices else list(entry.devices)
    written["mig-enabled"] = bool(entry.mig_enabled)
    if entry.mig_enabled or entry.mig_devices or "mig-devices" in entry.lines:
        counts: Counter[str] = Counter()
        for device in entry.mig_devices:
            counts[str(device.profile)] += device.count
        written["mig-devices"] = dict(counts)
    return written, None


def _mig_gpus(
    entry: SpecEntry, host: HostRead, ids: set[str] | None = None
) -> list[Mapping[str, Any]]:
    """The host's MIG-capable GPUs the entry's devices: and device-filter: select (those
    with a device id in `ids`, when given)."""
    from gpupoolctl.partition import layout

    return [
        gpu
        for gpu in host.facts.get("gpus") or []
        if layout.mig_capable(gpu)
        and entry.matches_device(int(gpu["index"]), gpu.get("pci_device_id"))
        and (ids is None or _id(gpu) in ids)
    ]


def _id(gpu: Mapping[str, Any]) -> str:
    return str(gpu.get("pci_device_id") or "").upper()


def _pci(text: str) -> str:
    """A PCI device id as mig-parted's files write it: "0x233010DE"."""
    digits = text[2:] if text[:2].lower() == "0x" else text
    return "0x" + digits.upper()


def config_holds(entries: list[dict[str, Any]], host: str, facts: Mapping[str, Any]) -> bool:
    """Whether a mig-parted config (its entries) selects every MIG-capable GPU of the host
    and holds there: what mig-manager would find already done on that node."""
    import yaml

    from gpupoolctl.errors import SourceError
    from gpupoolctl.partition import assert_host, layout, parse_spec

    text = yaml.safe_dump({"version": "v1", "mig-configs": {"x": entries}})
    try:
        spec = parse_spec(text, source="<config>")
        selection = layout.select(spec.config("x"), host, [], facts)
        if selection.errors:
            return False
        governed = {t.index for t in selection.targets if t.mig is not None}
        wanted = {int(g["index"]) for g in facts.get("gpus") or [] if layout.mig_capable(g)}
        return bool(wanted) and governed == wanted and not assert_host(spec, "x", host, [], facts)
    except SourceError:
        return False
