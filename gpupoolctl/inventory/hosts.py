"""The records of a loaded inventory: Host, Group, Selection, and HostPool (what the
--limit matcher reads of an Inventory). The bottom of the package: patterns, model and
loader all build on these, so the pattern matcher needs nothing of the Inventory class.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol


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


class HostPool(Protocol):
    """What `patterns.select` reads of an inventory (gpupoolctl.inventory.model.Inventory)."""

    hosts: dict[str, Host]
    groups: dict[str, Group]

    def hosts_of(self, group: str) -> list[Host]: ...

    def host_names_in_definition_order(self) -> list[str]: ...
