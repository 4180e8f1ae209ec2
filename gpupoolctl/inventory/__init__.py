"""Ansible inventories (YAML and INI), host ranges, group/host vars and --limit patterns.

Public API::

    load_inventory(path) -> Inventory
    Inventory.hosts / .groups / .source / .warnings
    Inventory.select(limit, cwd=None) -> Selection (a list[Host] with .unmatched, .warnings)
    Inventory.to_ansible_list() -> dict       # the JSON of `ansible-inventory --list`
    Inventory.from_hosts(names, host_vars=None) -> Inventory
    expand_host_range / expand_nodeset / fold_nodeset
"""

from gpupoolctl.inventory.loader import load_inventory
from gpupoolctl.inventory.model import Group, Host, Inventory, Selection
from gpupoolctl.inventory.nodeset import NodeSetError, expand_nodeset, fold_nodeset
from gpupoolctl.inventory.ranges import HostRangeError, expand_host_range

__all__ = [
    "Group",
    "Host",
    "HostRangeError",
    "Inventory",
    "NodeSetError",
    "Selection",
    "expand_host_range",
    "expand_nodeset",
    "fold_nodeset",
    "load_inventory",
]
