"""The loaded inventory: hosts with fully merged variables, groups, and Ansible's JSON view."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass
class Host:
    name: str  # the inventory alias: what patterns match (never ansible_host)
    vars: dict[str, Any] = field(default_factory=dict)  # fully merged, Ansible's precedence
    groups: list[str] = field(default_factory=list)  # every group incl. 'all' and parents; sorted


@dataclass
class Group:
    name: str
    hosts: list[str] = field(default_factory=list)  # direct members, in inventory order
    children: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)  # inventory vars, then group_vars/ files
    parents: list[str] = field(default_factory=list)
    priority: int = 1  # ansible_group_priority
    depth: int = 0  # longest path from 'all'; vars of deeper groups win


class Selection(list[Host]):
    """Hosts chosen by a --limit, in inventory order, plus what the CLI should warn about."""

    def __init__(
        self,
        hosts: Iterable[Host] = (),
        unmatched: Iterable[str] = (),
        warnings: Iterable[str] = (),
    ) -> None:
        super().__init__(hosts)
        # Pattern parts that matched no host or group (Ansible: "Could not match supplied host
        # pattern, ignoring: ..."); node sets list each expanded name that is missing.
        self.unmatched: list[str] = list(unmatched)
        self.warnings: list[str] = list(warnings)

    @property
    def names(self) -> list[str]:
        return [h.name for h in self]


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
        from gpupoolctl.inventory.patterns import select

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
        from gpupoolctl.inventory.loader import build_from_hosts

        return build_from_hosts(list(names), dict(host_vars or {}), Path(source))
