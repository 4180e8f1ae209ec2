"""YAML reading that keeps line numbers: compose to nodes first, construct values on demand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpupoolctl.errors import InventoryError
from gpupoolctl.hw.shown import shown
from gpupoolctl.yamlsource import GuardedLoader

NULL_TAG = "tag:yaml.org,2002:null"
STR_TAG = "tag:yaml.org,2002:str"


class Loader(GuardedLoader):
    """The shared guarded loader (bounded depth and alias expansion) plus Ansible's
    `!unsafe` tag (never templated: plain data here)."""


def _construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    raise yaml.constructor.ConstructorError(None, None, "unexpected !unsafe node", node.start_mark)


Loader.add_constructor("!unsafe", _construct_unsafe)


def line_of(node: yaml.Node | None) -> int | None:
    mark = getattr(node, "start_mark", None)
    return mark.line + 1 if mark is not None else None


def yaml_error(path: Path, exc: yaml.YAMLError) -> InventoryError:
    """An InventoryError pointing at the line PyYAML blamed."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    message = f"{context}: {problem}" if context else str(problem)
    return InventoryError(str(path), line, f"invalid YAML: {message}")


class Document:
    """One composed YAML document and the loader that can construct its nodes."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        try:
            self._loader = Loader(text)
        except yaml.reader.ReaderError as exc:  # the whole text is checked up front
            line = text.count("\n", 0, exc.position) + 1
            raise InventoryError(
                str(path), line, f"invalid YAML: {exc.reason} (is it a text file?)"
            ) from None
        try:
            self.root: yaml.Node | None = self._loader.get_single_node()
        except yaml.YAMLError as exc:
            raise yaml_error(path, exc) from None

    def value(self, node: yaml.Node) -> Any:
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise yaml_error(self.path, exc) from None
        except (TypeError, ValueError) as exc:  # e.g. a list used as a mapping key
            raise InventoryError(
                str(self.path), line_of(node), f"invalid YAML value: {exc}"
            ) from None

    def pairs(self, node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node]]:
        """Mapping entries with merge keys applied; a repeated key keeps its first place but
        takes its last value, as a constructed dict would."""
        try:
            self._loader.flatten_mapping(node)
        except yaml.YAMLError as exc:
            raise yaml_error(self.path, exc) from None
        entries: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node)
            try:
                entries[key] = (key_node, value_node)
            except TypeError:
                raise InventoryError(
                    str(self.path), line_of(key_node), f"unhashable mapping key {shown(key)}"
                ) from None
        return list(entries.values())


def is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == NULL_TAG


def is_str(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == STR_TAG


def kind(node: yaml.Node) -> str:
    """A word for error messages."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if is_null(node):
        return "nothing"
    return f"the scalar {shown(node.value)}"
