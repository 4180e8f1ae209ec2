"""The inventory as `ansible-inventory --list` JSON, with gpupoolctl's facts as host vars.

The groups, hosts and users' vars are exactly what `ansible-inventory -i FILE --list` prints
for the same inventory (Inventory.to_ansible_list). gpupoolctl adds, per host, what it knows:
from the nodes (when read) `gpupool_gpus`, `gpupool_vendor`, `gpupool_model`,
`gpupool_islands`, `gpupool_mig`; from the ledger `gpupool_slices`. Every added name starts
with `gpupool_`; where the inventory already sets one, the inventory's value is kept (and a
warning says so): the user's vars always win.

The document has `_meta.hostvars`, so Ansible's script plugin asks nothing per host, and the
output doubles as a dynamic inventory script (see the CLI's --list / --host).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpupoolctl.inventory import Inventory
    from gpupoolctl.ledger.state import State

FACT_PREFIX = "gpupool_"
SLICE_FIELDS = ("id", "kind", "profile", "gpu", "memory_mib")


@dataclass
class AnsibleExport:
    document: dict[str, Any]  # ansible-inventory --list JSON, with _meta.hostvars
    warnings: list[str] = field(default_factory=list)

    def host_vars(self, host: str) -> dict[str, Any] | None:
        """One host's vars (the script protocol's `--host NAME`); None for an unknown host."""
        hostvars: dict[str, Any] = self.document["_meta"]["hostvars"]
        if host in hostvars:
            return dict(hostvars[host])
        return {} if host in _all_hosts(self.document) else None


def node_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """gpupool_ vars from one node's facts."""
    from gpupoolctl.hw.topology import island_count

    gpus = list(facts.get("gpus") or [])
    found: dict[str, Any] = {f"{FACT_PREFIX}gpus": len(gpus)}
    if gpus:
        found[f"{FACT_PREFIX}vendor"] = _joined(gpus, "vendor")
        found[f"{FACT_PREFIX}model"] = _joined(gpus, "model")
        found[f"{FACT_PREFIX}mig"] = any(
            (gpu.get("mig") or {}).get("mode") == "enabled" for gpu in gpus
        )
        islands = island_count(facts)
        if islands is not None:
            found[f"{FACT_PREFIX}islands"] = islands
    return found


def ledger_slices(state: State, now: str) -> dict[str, list[dict[str, Any]]]:
    """Per host, its slices as the ledger knows them, each with its state (free, held, or
    why it is out of placement: sched.unavailable)."""
    from gpupoolctl.sched.unavailable import Finder

    finder = Finder(state)
    by_host: dict[str, list[dict[str, Any]]] = {}
    for slice_id, entry in state.slices.items():
        item = {key: entry.get(key) for key in SLICE_FIELDS}
        item["state"] = finder.state_of(slice_id, now)
        by_host.setdefault(str(entry.get("host")), []).append(item)
    for items in by_host.values():
        items.sort(key=lambda s: (s["gpu"] if isinstance(s["gpu"], int) else -1, str(s["id"])))
    return by_host


def ansible_export(
    inventory: Inventory,
    *,
    facts_by_host: Mapping[str, Mapping[str, Any]] | None = None,
    slices_by_host: Mapping[str, list[dict[str, Any]]] | None = None,
) -> AnsibleExport:
    """`ansible-inventory --list` JSON for `inventory`, plus gpupool_ vars for the hosts in
    `facts_by_host` (node facts) and `slices_by_host` (the ledger's slices). Hosts the
    inventory does not have are ignored."""
    document = inventory.to_ansible_list()
    hostvars: dict[str, dict[str, Any]] = document["_meta"]["hostvars"]
    warnings: list[str] = []
    for host in inventory.hosts:
        added: dict[str, Any] = {}
        if facts_by_host and host in facts_by_host:
            added.update(node_facts(facts_by_host[host]))
        if slices_by_host and host in slices_by_host:
            added[f"{FACT_PREFIX}slices"] = copy.deepcopy(slices_by_host[host])
        if not added:
            continue
        current = hostvars.setdefault(host, {})
        for key, value in added.items():
            if key in current:
                warnings.append(
                    f"{host}: the inventory sets {key}; kept its value, not gpupoolctl's"
                )
            else:
                current[key] = value
    return AnsibleExport(document, warnings)


def _joined(gpus: list[Mapping[str, Any]], key: str) -> str:
    """The GPUs' values of `key`, distinct, in GPU order: one value on most nodes."""
    return ", ".join(dict.fromkeys(str(gpu.get(key) or "unknown") for gpu in gpus))


def _all_hosts(document: Mapping[str, Any]) -> set[str]:
    return {
        host
        for name, group in document.items()
        if name != "_meta" and isinstance(group, dict)
        for host in group.get("hosts", [])
    }
