"""The group/host graph the parsers fill in, with Ansible's rules for building it.

Mirrors ansible-core's InventoryData: implicit `all` and `ungrouped`, a child group may have
several parents, cycles are refused when the edge is added, and `reconcile` hangs orphan groups
under `all` and puts group-less hosts in `ungrouped`. Parsers catch GraphError and add the file
and line they were reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.hw.shown import shown


class GraphError(ValueError):
    """A structural error (cycle, unknown group); the parser adds where it happened."""


@dataclass
class GroupNode:
    name: str
    line: int | None = None  # where the group was first seen, for errors found later
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    priority: int = 1


@dataclass
class HostNode:
    name: str
    line: int | None = None
    groups: list[str] = field(default_factory=list)  # direct memberships, in order
    vars: dict[str, Any] = field(default_factory=dict)


class InventoryData:
    def __init__(self) -> None:
        self.groups: dict[str, GroupNode] = {}
        self.hosts: dict[str, HostNode] = {}
        self.warnings: list[str] = []
        self.add_group("all")
        self.add_group("ungrouped")
        self.add_child("all", "ungrouped")

    def add_group(self, name: object, line: int | None = None) -> str:
        if not isinstance(name, str):
            raise GraphError(
                f"group name must be a string, got {type(name).__name__} {shown(name)}"
            )
        if not name:
            raise GraphError("group name must not be empty")
        if name not in self.groups:
            self.groups[name] = GroupNode(name, line)
        return name

    def add_host(
        self, name: str, group: str | None = None, port: int | None = None, line: int | None = None
    ) -> None:
        if not name:
            raise GraphError("host name must not be empty")
        if group is not None and group not in self.groups:
            raise GraphError(f"could not find group {shown(group)} in inventory")
        host = self.hosts.get(name)
        if host is None:
            host = self.hosts[name] = HostNode(name, line)
            # Ansible only applies host:port when it first creates the host.
            if port is not None:
                host.vars["ansible_port"] = port
        if group is not None:
            self._add_host_to_group(group, name)

    def _add_host_to_group(self, group: str, host: str) -> None:
        node = self.groups[group]
        if host not in node.hosts:
            node.hosts.append(host)
            self.hosts[host].groups.append(group)

    def set_group_var(self, group: str, key: Any, value: Any) -> None:
        node = self.groups[group]
        if key == "ansible_group_priority":
            # Only the inventory source may set it, and it is kept apart from the vars.
            try:
                node.priority = int(value)
            except (TypeError, ValueError):
                raise GraphError(
                    f"ansible_group_priority of group {shown(group)} must be an integer, got "
                    f"{shown(value)}"
                ) from None
            return
        node.vars[key] = value

    def set_host_var(self, host: str, key: Any, value: Any) -> None:
        self.hosts[host].vars[key] = value

    def add_child(self, parent: str, child: str) -> None:
        if parent not in self.groups:
            raise GraphError(f"{shown(parent)} is not a known group")
        if child in self.groups:
            self._add_child_group(parent, child)
        elif child in self.hosts:
            self._add_host_to_group(parent, child)
        else:
            raise GraphError(f"{shown(child)} is not a known host nor group")

    def _add_child_group(self, parent: str, child: str) -> None:
        if parent == child:
            raise GraphError(f"group {shown(parent)} cannot be a child of itself")
        node = self.groups[parent]
        if child in node.children:
            return
        if child in self.ancestors(parent):
            raise GraphError(
                f"Adding group {shown(child)} as child to {shown(parent)} creates a recursive "
                "dependency loop."
            )
        node.children.append(child)
        if parent not in self.groups[child].parents:
            self.groups[child].parents.append(parent)

    def ancestors(self, group: str) -> set[str]:
        seen: set[str] = set()
        stack = list(self.groups[group].parents)
        while stack:
            name = stack.pop()
            if name not in seen:
                seen.add(name)
                stack.extend(self.groups[name].parents)
        return seen

    def host_groups(self, host: str) -> set[str]:
        """Every group a host belongs to: its direct groups and all their ancestors."""
        result: set[str] = set()
        for group in self.hosts[host].groups:
            result.add(group)
            result |= self.ancestors(group)
        return result

    def reconcile(self) -> None:
        """Ansible's reconcile_inventory: orphans under `all`, group-less hosts in `ungrouped`."""
        for name in list(self.groups):
            if name != "all" and not self.groups[name].parents:
                self.add_child("all", name)
        ungrouped = self.groups["ungrouped"]
        for host in self.hosts.values():
            mine = self.host_groups(host.name)
            if "ungrouped" in mine:
                if mine - {"all", "ungrouped"} and host.name in ungrouped.hosts:
                    ungrouped.hosts.remove(host.name)
                    host.groups.remove("ungrouped")
            elif not mine or mine == {"all"}:
                self._add_host_to_group("ungrouped", host.name)
        for name in sorted(set(self.groups) & set(self.hosts)):
            self.warnings.append(f"Found both group and host with same name: {shown(name)}")

    def depths(self) -> dict[str, int]:
        """Longest path from a root: the depth Ansible sorts groups by when merging vars."""
        memo: dict[str, int] = {}

        def depth(name: str) -> int:
            if name not in memo:
                parents = self.groups[name].parents
                memo[name] = max((depth(p) + 1 for p in parents), default=0)
            return memo[name]

        for name in self.groups:
            depth(name)
        return memo

    def hosts_under(self, group: str) -> list[str]:
        """Hosts of a group and its descendants, in Ansible's order (breadth first).

        Ansible walks the levels below the first one through a set, so its order there is
        arbitrary; we keep discovery order, which agrees with it wherever it is deterministic.
        """
        ordered = [group, *self.groups[group].children]
        seen = set(ordered)
        frontier = list(self.groups[group].children)
        while frontier:
            following: list[str] = []
            for name in frontier:
                for kid in self.groups[name].children:
                    if kid not in seen:
                        seen.add(kid)
                        ordered.append(kid)
                        following.append(kid)
            frontier = following
        hosts: dict[str, None] = {}
        for name in ordered:
            for host in self.groups[name].hosts:
                hosts.setdefault(host, None)
        return list(hosts)
