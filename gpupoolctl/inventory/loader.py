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
The merge itself is gpupoolctl.inventory.model.build_inventory (Inventory.from_hosts uses it
too, so it sits below this module).
"""

from __future__ import annotations

import os
from pathlib import Path

from gpupoolctl.errors import InventoryError
from gpupoolctl.hw.shown import shown
from gpupoolctl.inventory.graph import GraphError, InventoryData
from gpupoolctl.inventory.ini import parse_ini
from gpupoolctl.inventory.model import Inventory, build_inventory
from gpupoolctl.inventory.varsfiles import read_bytes_bounded
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
    inventory = build_inventory(source, data, folder / "group_vars", folder / "host_vars")
    _check_site_links(inventory)
    _check_sim_nics(inventory, data)
    return inventory


def _check_site_links(inventory: Inventory) -> None:
    """gpupool_site_links describes the whole pool (set on `all`): a malformed one is an
    error of the inventory, one line naming it, not a failure of every host."""
    from gpupoolctl.hw.sites import VAR, SiteLinkError, parse_site_links

    checked: set[int] = set()  # merging is shallow: hosts share the value they inherit
    for host in inventory.hosts.values():
        value = host.vars.get(VAR)
        if value is None or id(value) in checked:
            continue
        checked.add(id(value))
        try:
            parse_site_links(value)
        except SiteLinkError as exc:
            raise InventoryError(str(inventory.source), None, str(exc)) from None


def _check_sim_nics(inventory: Inventory, data: InventoryData) -> None:
    """A malformed sim_nics is an error of the inventory too (one line naming the host and,
    when it is set in the inventory file itself, the line of its host or group), not a
    failure of that host when a command reaches it."""
    from gpupoolctl.hw.nics import VAR, NicSpecError, parse_nics

    for name, host in inventory.hosts.items():
        value = host.vars.get(VAR)
        if value is None:
            continue
        try:
            parse_nics(value)
        except NicSpecError as exc:
            line = _var_line(data, name, VAR, value)
            raise InventoryError(
                str(inventory.source),
                line,
                f"host {shown(name)}: {exc}",
            ) from None


def _var_line(data: InventoryData, host: str, key: str, value: object) -> int | None:
    """The line of the host or group that sets `key` to this very value in the file; None
    when it comes from group_vars/ or host_vars/ (or the parser kept no line)."""
    node = data.hosts.get(host)
    if node is not None and node.vars.get(key) is value:
        return node.line
    for group in data.groups.values():
        if group.vars.get(key) is value:
            return group.line
    return None


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


__all__ = ["build_inventory", "load_inventory"]
