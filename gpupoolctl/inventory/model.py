"""The loaded inventory: hosts with fully merged variables, groups, and Ansible's JSON view.

Built from a reconciled graph here (build_inventory; the precedence is in
gpupoolctl.inventory.loader's docstring); selection is gpupoolctl.inventory.patterns'.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpupoolctl.errors import InventoryError
from gpupoolctl.inventory.graph import InventoryData
from gpupoolctl.inventory.hosts import Group, Host, Selection
from gpupoolctl.inventory.patterns import select
from gpupoolctl.inventory.ranges import HostRangeError, expand_host_range, has_range, split_port
from gpupoolctl.inventory.varsfiles import load_vars

__all__ = [
    "ANSIBLE_INTERNAL_VARS",
    "Group",
    "Host",
    "Inventory",
    "Selection",
    "build_from_hosts",
    "build_inventory",
]

# Names ansible-inventory never prints among host variables (ansible-core's INTERNAL_STATIC_VARS):
# they are magic variables Ansible computes itself.
ANSIBLE_INTERNAL_VARS = frozenset(
    {
        "ansible_async_path", "ansible_collection_name", "ansible_config_file",
        "ansible_dependent_role_names", "ansible_diff_mode", "ansible_facts", "ansible_forks",
        "ansible_inventory_sources", "ansible_limit", "ansible_play_batch", "ansible_play_hosts",
        "ansible_play_hosts_all", "ansible_play_role_names", "ansible_playbook_python",
        "ansible_role_name", "ansible_role_names", "ansible_run_tags", "ansible_skip_tags",
        "ansible_verbosity", "ansible_version", "group_names", "groups", "hostvars",
        "inventory_dir", "inventory_file", "inventory_hostname", "inventory_hostname_short",
        "play_hosts", "playbook_dir", "role_name", "role_names", "role_path", "role_uuid",
    }
)  # fmt: skip


class Inventory:
    def __init__(
        self,
        source: Path,
        hosts: dict[str, Host],
        groups: dict[str, Group],
        members: Mapping[str, list[str]],
        insertion: list[str],
        warnings: list[str] | None = None,
    ) -> None:
        self.source = source
        self.hosts = hosts  # the order Ansible runs them in (`ansible all --list-hosts`)
        self.groups = groups
        self.warnings: list[str] = warnings or []  # what Ansible would warn about; never fatal
        self._members = dict(members)  # group -> hosts of it and its descendants, Ansible order
        self._insertion = insertion  # hosts in the order they were first defined

    def __repr__(self) -> str:
        return (
            f"Inventory({str(self.source)!r}, {len(self.hosts)} hosts, {len(self.groups)} groups)"
        )

    def hosts_of(self, group: str) -> list[Host]:
        """A group's hosts, its descendants' included, in Ansible's order."""
        return [self.hosts[name] for name in self._members.get(group, [])]

    def host_names_in_definition_order(self) -> list[str]:
        return list(self._insertion)

    def select(self, limit: str | None, cwd: Path | None = None) -> Selection:
        """Hosts matching an Ansible-style --limit (see gpupoolctl.inventory.patterns)."""
        return select(self, limit, cwd)

    def to_ansible_list(self) -> dict[str, Any]:
        """What `ansible-inventory -i FILE --list` prints, as a JSON-ready dict."""
        seen: set[str] = set()

        def fmt(name: str) -> dict[str, Any]:
            group = self.groups[name]
            entry: dict[str, Any] = {}
            if name != "all":
                entry["hosts"] = list(group.hosts)
            entry["children"] = list(group.children)
            out = {name: entry}
            for child in group.children:
                if child not in seen:
                    out.update(fmt(child))
                    seen.add(child)
            for key in ("hosts", "children"):
                if key in entry and not entry[key]:
                    del entry[key]
            if not entry:
                del out[name]
            return out

        result = fmt("all")
        hostvars = {}
        for host in self.hosts.values():
            shown = {k: v for k, v in host.vars.items() if k not in ANSIBLE_INTERNAL_VARS}
            if shown:
                hostvars[host.name] = copy.deepcopy(shown)
        result["_meta"] = {"hostvars": hostvars, "profile": "inventory_legacy"}
        return result

    @classmethod
    def from_hosts(
        cls,
        names: Iterable[str],
        host_vars: Mapping[str, Any] | None = None,
        source: str | os.PathLike[str] = "<ad-hoc>",
    ) -> Inventory:
        """An inventory of ungrouped hosts, like `ansible -i 'gpu[01:04],'`: ranges expand,
        `host:port` sets ansible_port, and `host_vars` applies to every host."""
        return build_from_hosts(list(names), dict(host_vars or {}), Path(source))


def build_inventory(
    source: Path, data: InventoryData, group_vars: Path, host_vars: Path
) -> Inventory:
    """Turn a reconciled graph into an Inventory, merging variables (the precedence is in
    gpupoolctl.inventory.loader's docstring)."""
    depths = data.depths()
    file_vars = {name: load_vars(group_vars, name) for name in data.groups}
    groups: dict[str, Group] = {}
    for name, node in data.groups.items():
        groups[name] = Group(
            name=name,
            hosts=list(node.hosts),
            children=list(node.children),
            vars={**node.vars, **file_vars[name]},
            parents=list(node.parents),
            priority=node.priority,
            depth=depths[name],
        )
    members = {name: data.hosts_under(name) for name in data.groups}
    hosts: dict[str, Host] = {}
    for name in members["all"]:
        mine = data.host_groups(name) | {"all"}
        ordered = sorted(
            (g for g in mine if g != "all"),
            key=lambda g: (depths[g], data.groups[g].priority, g),
        )
        merged: dict[str, Any] = dict(data.groups["all"].vars)
        for g in ordered:
            merged.update(data.groups[g].vars)
        merged.update(file_vars["all"])
        for g in ordered:
            merged.update(file_vars[g])
        merged.update(data.hosts[name].vars)
        merged.update(load_vars(host_vars, name))
        hosts[name] = Host(name=name, vars=merged, groups=sorted(mine))
    return Inventory(
        source=source,
        hosts=hosts,
        groups=groups,
        members=members,
        insertion=list(data.hosts),
        warnings=list(data.warnings),
    )


def build_from_hosts(names: list[str], host_vars: dict[str, Any], source: Path) -> Inventory:
    data = InventoryData()
    for entry in names:
        entry = entry.strip()
        if not entry:
            continue
        name, port = split_port(entry)
        try:
            expanded = expand_host_range(name) if has_range(name) else [name]
        except HostRangeError as exc:
            raise InventoryError(str(source), None, f"{entry}: {exc}") from None
        for host in expanded:
            data.add_host(host, "ungrouped", port)
            for key, value in host_vars.items():
                data.set_host_var(host, key, value)
    data.reconcile()
    # No files beside an ad-hoc list: point the vars folders at nothing.
    nowhere = Path(os.devnull) / "none"
    return build_inventory(source, data, nowhere, nowhere)
