"""The current layout as a mig-parted v1 config: gpupoolctl's own export, and the strict
subset that NVIDIA's mig-parted (and the GPU operator's mig-manager) accepts.

`current_config` is `gpupoolctl partition export`'s output (gpupoolctl's superset: `hosts:`,
AMD partitions, SR-IOV), which parse_spec reads back and which plans zero operations on the
hosts it came from. `mig_entries` is one host's MIG layout with only the fields mig-parted
knows, for consumers that reject unknown fields (mig-parted's spec.go does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
