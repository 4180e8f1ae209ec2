"""Ansible's YAML inventory format (`all:` / `hosts:` / `vars:` / `children:`).

Walks the composed node tree in document order with the rules of ansible-core's `yaml` plugin,
so groups and hosts are created in the same order and every error has a line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gpupoolctl.errors import InventoryError
from gpupoolctl.hw.shown import shown
from gpupoolctl.inventory.graph import GraphError, InventoryData
from gpupoolctl.inventory.ranges import HostRangeError, expand_host_range, has_range, split_port
from gpupoolctl.inventory.yamlload import Document, is_null, is_str, kind, line_of

_SECTIONS = ("vars", "children", "hosts")


class NotYamlInventory(Exception):
    """The text is YAML but not shaped like an inventory; the loader may then try INI."""

    def __init__(self, error: InventoryError) -> None:
        super().__init__(str(error))
        self.error = error


def parse_yaml(path: Path, text: str, data: InventoryData) -> None:
    """Fill `data` from a YAML inventory. Raises NotYamlInventory when the document is not a
    mapping at all (so INI may be tried) and InventoryError for a malformed inventory."""
    doc = Document(path, text)
    root = doc.root
    if root is None or (isinstance(root, yaml.ScalarNode) and not doc.value(root)):
        raise NotYamlInventory(InventoryError(str(path), line_of(root), "Parsed empty YAML file"))
    if not isinstance(root, yaml.MappingNode):
        raise NotYamlInventory(
            InventoryError(
                str(path),
                line_of(root),
                f"YAML inventory has invalid structure, it should be a mapping, got {kind(root)}",
            )
        )
    _Walker(doc, data).run(root)


class _Walker:
    def __init__(self, doc: Document, data: InventoryData) -> None:
        self.doc = doc
        self.data = data

    def fail(self, node: yaml.Node | None, message: str) -> InventoryError:
        return InventoryError(str(self.doc.path), line_of(node), message)

    def run(self, root: yaml.MappingNode) -> None:
        pairs = self.doc.pairs(root)
        if not pairs:
            raise self.fail(root, "Parsed empty YAML file")
        for key_node, value_node in pairs:
            if self.doc.value(key_node) == "plugin" and self.doc.value(value_node):
                raise self.fail(key_node, "Plugin configuration YAML file, not YAML inventory")
        for key_node, value_node in pairs:
            self.group(key_node, value_node)

    def group(self, key_node: yaml.Node, node: yaml.Node) -> Any:
        name = self.doc.value(key_node)
        if not (isinstance(node, yaml.MappingNode) or is_null(node)):
            self.data.warnings.append(
                f"{self.doc.path}:{line_of(key_node)}: skipping {shown(name)}, "
                "which is not a valid group definition"
            )
            return name
        try:
            self.data.add_group(name, line_of(key_node))
        except GraphError as exc:
            raise self.fail(key_node, f"Unable to add group {shown(name)}: {exc}") from None
        if is_null(node):
            return name
        for section_key, section in self.doc.pairs(node):
            section_name = self.doc.value(section_key)
            if is_str(section) and section_name in _SECTIONS:
                # `hosts: gpu01` is shorthand for `hosts: {gpu01: null}`.
                self.section(name, section_name, [(section, _NULL)])
                continue
            if section_name in _SECTIONS and not (
                isinstance(section, yaml.MappingNode) or is_null(section)
            ):
                raise self.fail(
                    section,
                    f'Invalid "{section_name}" entry for {shown(name)} group, requires a mapping, '
                    f"found {kind(section)} instead.",
                )
            if not isinstance(section, yaml.MappingNode):
                if not is_null(section):
                    self.data.warnings.append(
                        f"{self.doc.path}:{line_of(section_key)}: skipping key "
                        f"{shown(section_name)} "
                        f"in group {shown(name)}: it is not a mapping"
                    )
                continue
            if section_name not in _SECTIONS:
                self.data.warnings.append(
                    f"{self.doc.path}:{line_of(section_key)}: skipping unexpected key "
                    f'{shown(section_name)} in group {shown(name)}; only "vars", "children" and '
                    '"hosts" '
                    "are valid"
                )
                continue
            self.section(name, section_name, self.doc.pairs(section))
        return name

    def section(self, group: str, section: str, pairs: list[tuple[yaml.Node, yaml.Node]]) -> None:
        for key_node, value_node in pairs:
            if section == "vars":
                value = None if value_node is _NULL else self.doc.value(value_node)
                try:
                    self.data.set_group_var(group, self.doc.value(key_node), value)
                except GraphError as exc:
                    raise self.fail(value_node, str(exc)) from None
            elif section == "children":
                child = self.group(key_node, value_node)
                try:
                    self.data.add_child(group, child)
                except (GraphError, TypeError) as exc:
                    raise self.fail(key_node, str(exc)) from None
            else:
                self.hosts(group, key_node, value_node)

    def hosts(self, group: str, key_node: yaml.Node, value_node: yaml.Node) -> None:
        entry = self.doc.value(key_node)
        if not isinstance(entry, str):
            raise self.fail(
                key_node,
                f"Host pattern {shown(entry)} must be a string. "
                "Enclose integers/floats in quotation marks.",
            )
        name, port = split_port(entry)
        try:
            names = expand_host_range(name) if has_range(name) else [name]
        except HostRangeError as exc:
            raise self.fail(key_node, str(exc)) from None
        variables = None if value_node is _NULL else self.doc.value(value_node)
        variables = variables or {}
        if not isinstance(variables, Mapping):
            raise self.fail(
                value_node,
                f"variables of host {shown(entry)} must be a mapping, got {kind(value_node)}",
            )
        for host in names:
            try:
                self.data.add_host(host, group, port, line_of(key_node))
            except GraphError as exc:
                raise self.fail(key_node, str(exc)) from None
            for key, value in variables.items():
                self.data.set_host_var(host, key, value)


# Stands for the implicit null value in the `hosts: name` shorthand.
_NULL = yaml.ScalarNode("tag:yaml.org,2002:null", "")
