"""Current state -> a v1 config, in mig-parted export's style, for one host or a fleet.

Per host, GPUs with the same PCI device id and the same state become one entry
(`device-filter` + `devices`: `all` when the entry covers every GPU of that device id on the
host). MIG state is written as compute-instance profile counts, as mig-parted exports it; AMD
modes as `compute-partition`/`memory-partition`; the VF count as `sriov-vfs` where the card
has an SR-IOV PF. Cards with nothing to partition are left out. When hosts differ, each
entry names its hosts (`hosts:`); when they all agree, no host selection is written. The
result parses with parse_spec and holds under assert_host on the same facts.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from gpupoolctl.partition import layout as lay


def export_config(
    facts_by_host: Mapping[str, Mapping[str, Any]], label: str = "current"
) -> dict[str, Any]:
    per_host = {host: _host_entries(facts) for host, facts in facts_by_host.items()}
    groups: dict[str, list[str]] = {}
    for host, entries in per_host.items():
        groups.setdefault(json.dumps(entries, sort_keys=True), []).append(host)
    entries_out: list[dict[str, Any]] = []
    if len(groups) == 1:
        entries_out = next(iter(per_host.values())) if per_host else []
    else:
        for key, hosts in groups.items():
            for entry in json.loads(key):
                entries_out.append({"hosts": sorted(hosts), **_ordered(entry)})
    if not entries_out:
        # mig-parted needs one entry per label; this one changes nothing anywhere.
        entries_out = [{"devices": "all", "mig-enabled": False}]
    return {"version": "v1", "mig-configs": {label: entries_out}}


_ORDER = (
    "device-filter",
    "devices",
    "mig-enabled",
    "mig-devices",
    "compute-partition",
    "memory-partition",
    "sriov-vfs",
)


def _ordered(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {key: entry[key] for key in _ORDER if key in entry}


def _gpu_state(gpu: Mapping[str, Any]) -> dict[str, Any] | None:
    state: dict[str, Any] = {}
    if lay.mig_capable(gpu):
        enabled = lay.mig_enabled_now(gpu)
        state["mig-enabled"] = enabled
        counts: Counter[str] = Counter()
        if enabled:
            for gi in lay.current_gis(gpu):
                counts.update(name for _, name in gi.cis)
        state["mig-devices"] = dict(sorted(counts.items()))
    part = gpu.get("partition")
    if lay.amd_product(gpu) is not None and part and part.get("compute"):
        state["compute-partition"] = str(part["compute"])
        if part.get("memory"):
            state["memory-partition"] = str(part["memory"])
    if gpu.get("sriov"):
        state["sriov-vfs"] = int(gpu["sriov"].get("num_vfs") or 0)
    return state or None


def _host_entries(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    gpus = list(facts.get("gpus") or [])
    by_pci: Counter[str] = Counter(str(g.get("pci_device_id") or "") for g in gpus)
    groups: dict[tuple[str, str], list[int]] = {}
    states: dict[tuple[str, str], dict[str, Any]] = {}
    for gpu in gpus:
        state = _gpu_state(gpu)
        if state is None:
            continue
        pci = str(gpu.get("pci_device_id") or "")
        key = (pci, json.dumps(state, sort_keys=True))
        groups.setdefault(key, []).append(int(gpu["index"]))
        states[key] = state
    entries = []
    for key in sorted(groups, key=lambda k: groups[k][0]):
        pci, _ = key
        indexes = sorted(groups[key])
        entry: dict[str, Any] = {}
        if pci:
            entry["device-filter"] = pci
        entry["devices"] = "all" if pci and len(indexes) == by_pci[pci] else indexes
        entry.update(states[key])
        entries.append(_ordered(entry))
    return entries
