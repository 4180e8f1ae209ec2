"""load_inventory: read an inventory file, merge variables the way Ansible does, return Inventory.

Format detection follows Ansible's plugin order: files named *.yml, *.yaml, *.json or without
extension are tried as YAML first; anything that is not a YAML mapping (and every other
extension) is read as INI. TOML and inventory directories are not supported.

Variable precedence for a host, lowest first (ansible-core's default VARIABLE_PRECEDENCE):
  1. vars of `all` in the inventory
  2. vars of the host's other groups in the inventory, sorted by (depth, priority, name)
  3. group_vars/all
  4. group_vars/<group> for those groups, in the same order
  5. the host's own inventory vars (inline, and ansible_port from `host:port`)
  6. host_vars/<host>
Merging is shallow: a key set at a higher level replaces the whole value.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpupoolctl.errors import InventoryError
from gpupoolctl.inventory.graph import GraphError, InventoryData
from gpupoolctl.inventory.ini import parse_ini
from gpupoolctl.inventory.model import Group, Host, Inventory
from gpupoolctl.inventory.ranges import HostRangeError, expand_host_range, has_range, split_port
from gpupoolctl.inventory.varsfiles import load_vars, read_bytes_bounded
from gpupoolctl.inventory.yamlinv import NotYamlInventory, parse_yaml

YAML_SUFFIXES = ("", ".yml", ".yaml", ".json")


def load_inventory(path: str | os.PathLike[str]) -> Inventory:
    """Load a YAML or INI Ansible inventory file with its group_vars/ and host_vars/."""
    source = Path(path)
    if source.is_dir():
        raise InventoryError(str(source), None, "is a directory; give the inventory file itself")
    raw = read_bytes_bounded(source, "inventory")
    if source.suffix == ".toml":
        raise InventoryError(str(source), None, "TOML inventories are not supported")
    data = _parse(source, raw)
    try:
        data.reconcile()
    except GraphError as exc:
        raise InventoryError(str(source), _blame_line(data, str(exc)), str(exc)) from None
    folder = source.resolve().parent
    return build_inventory(source, data, folder / "group_vars", folder / "host_vars")


def _parse(source: Path, raw: bytes) -> InventoryData:
    if source.suffix in YAML_SUFFIXES:
        data = InventoryData()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None  # cannot be YAML; INI tolerates bad bytes in comments
        if text is not None:
            try:
                parse_yaml(source, text, data)
                return data
            except NotYamlInventory as exc:
                yaml_error: InventoryError | None = exc.error
            except InventoryError as exc:
                if not _looks_like_ini(text):
                    raise
                yaml_error = exc
            ini_data = InventoryData()
            try:
                parse_ini(source, raw, ini_data)
            except InventoryError:
                # Neither parser accepted it: report the YAML problem for YAML-named files.
                if source.suffix and yaml_error is not None:
                    raise yaml_error from None
                raise
            return ini_data
    data = InventoryData()
    parse_ini(source, raw, data)
    return data


def _looks_like_ini(text: str) -> bool:
    # A YAML syntax error in a file whose first real line is a [section] is really INI.
    for line in text.splitlines():
        line = line.strip()
        if line and line[0] not in "#;":
            return line.startswith("[")
    return False


def _blame_line(data: InventoryData, message: str) -> int | None:
    for name, group in data.groups.items():
        if f"'{name}'" in message:
            return group.line
    return None


def build_inventory(
    source: Path, data: InventoryData, group_vars: Path, host_vars: Path
) -> Inventory:
    """Turn a reconciled graph into an Inventory, merging variables (precedence above)."""
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
