"""YAML read as nodes that keep their line numbers, so that a bad value names file:line.

Parsers of user files (partition specs, stress scenarios) compose the document into nodes
instead of loading it into plain Python values, check it node by node, and fail with
SourceError(path, line, message) at the node that is wrong:

    doc = YamlSource(text, "layouts.yaml")
    root = doc.root()                        # None for an empty file
    top = doc.mapping(root, "the file")      # key -> (key node, value node), in file order
    version = doc.scalar(top["version"][1])  # NOT_SCALAR for a list or mapping
    raise doc.fail(node, "expected ...")     # SourceError at the node's line
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import yaml

from gpupoolctl.errors import SourceError, UsageError

__all__ = ["NOT_SCALAR", "YamlSource", "did_you_mean"]


class _NotScalarType:
    def __repr__(self) -> str:
        return "a list or mapping"  # what error messages say when they show the value


NOT_SCALAR: Any = _NotScalarType()
"""What YamlSource.scalar returns for a list or a mapping where one value was expected."""


def did_you_mean(word: str, valid: Sequence[str]) -> str:
    """' (did you mean 'x'?)' for the closest valid word, or '' when none is close."""
    close = difflib.get_close_matches(word, list(valid), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class YamlSource:
    """One YAML document from `source` (a path, or a name such as '<stdin>'), composed into
    nodes; every failure is a SourceError that names source:line."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.loader = yaml.SafeLoader(text)

    def line(self, node: yaml.Node | None) -> int | None:
        """The node's 1-based line; None without a node (the error then names the file)."""
        return node.start_mark.line + 1 if node is not None else None

    def fail(self, node: yaml.Node | None, message: str) -> SourceError:
        """The error to raise for a problem at `node`."""
        return SourceError(self.source, self.line(node), message)

    @contextmanager
    def at(self, node: yaml.Node) -> Iterator[None]:
        """UsageErrors raised inside become SourceErrors at this node's line."""
        try:
            yield
        except UsageError as exc:
            raise self.fail(node, str(exc)) from None

    def root(self) -> yaml.Node | None:
        """The document's root node, None for an empty document."""
        try:
            return self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            raise SourceError(self.source, line, f"not valid YAML: {exc.problem}") from None
        except yaml.YAMLError as exc:
            raise SourceError(self.source, None, f"not valid YAML: {exc}") from None

    def scalar(self, node: yaml.Node) -> Any:
        """The value of a scalar node (str, int, float, bool, None, ...); NOT_SCALAR for a
        list or mapping."""
        if not isinstance(node, yaml.ScalarNode):
            return NOT_SCALAR
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.fail(node, f"bad value: {exc}") from None

    def items(self, node: yaml.Node) -> list[yaml.Node]:
        """A list's items; a single value counts as a list of one."""
        return list(node.value) if isinstance(node, yaml.SequenceNode) else [node]

    def mapping(
        self,
        node: yaml.Node,
        what: str,
        valid: Sequence[str] | None = None,
        *,
        scalar_keys: bool = False,
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """key -> (key node, value node), in file order. Keys must be strings; with
        `scalar_keys` any scalar but null is read as its text (`7:` is the key '7').
        Duplicate keys are refused, and keys outside `valid` when it is given; each key is
        checked in turn, so the first bad key in the file is the one named."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node)
            if scalar_keys and key is not NOT_SCALAR and key is not None:
                key = str(key)
            if not isinstance(key, str):
                raise self.fail(key_node, f"{what}: keys must be plain strings")
            if key in out:
                raise self.fail(key_node, f"{what}: duplicate key {key!r}")
            if valid is not None and key not in valid:
                raise self.fail(
                    key_node,
                    f"{what}: unknown key {key!r}{did_you_mean(key, valid)}; "
                    f"valid: {', '.join(valid)}",
                )
            out[key] = (key_node, value_node)
        return out
