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
from gpupoolctl.hw.shown import shown

__all__ = [
    "MAX_DEPTH",
    "NOT_SCALAR",
    "GuardedLoader",
    "YamlLimitError",
    "YamlSource",
    "did_you_mean",
    "safe_load",
]

# Every YAML document a user hands us is composed by GuardedLoader, which stops, with a
# line, before a document costs seconds or hundreds of MB: nesting deeper than MAX_DEPTH
# (composing and constructing are recursive), or aliases that stand for more nodes than the
# budget (a "billion laughs" of nine levels of `&a [*a, *a, ...]` is under 1 KB and expands
# to ~400 million nodes once anything walks it). Anchors and aliases as Ansible inventories
# use them (a shared vars mapping, a list merged in a few places) stay far below it.
MAX_DEPTH = 100
ALIAS_FACTOR = 10  # expanded nodes allowed per node written in the document...
ALIAS_FLOOR = 1_000_000  # ...and at least this many (a walk of ~1 s), whatever its size


class YamlLimitError(yaml.MarkedYAMLError):
    """A document past MAX_DEPTH or the alias budget; marks the node where it was found."""


class GuardedLoader(yaml.SafeLoader):
    """SafeLoader that bounds the nesting depth and the alias expansion while composing.

    Both are measured through aliases, as a reader walking the values would meet them: a
    node's height counts the levels an alias brings, and its weight counts what aliases
    multiply. An alias of a value that holds no alias itself (a shared vars mapping, `<<:
    *defaults` on every host) costs one node however often it is used: sharing is linear.
    An alias of a value that holds aliases brings that value's whole expanded size, so
    nested aliases (a bomb) compound and are refused after their few lines are read, never
    expanded."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._written = 0
        self._order: dict[int, int] = {}  # node -> when it was composed
        self._height: dict[int, int] = {}
        self._weight: dict[int, int] = {}  # what the node costs a walk, sharing aside
        self._size: dict[int, int] = {}  # the node written out, every alias expanded
        self._aliased: set[int] = set()  # nodes that hold an alias somewhere inside
        self._open_anchors: list[str] = []  # anchors of the nodes being composed

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:  # `&a [*a]`: a value that contains itself
                raise YamlLimitError(
                    None,
                    None,
                    f"alias *{event.anchor} refers to a node it is inside: a value cannot "
                    "merge itself or hold itself",
                    event.start_mark,
                )
            return super().compose_node(parent, index)  # an anchored node, measured already
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open_anchors.append(anchor)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise YamlLimitError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        began = self._written
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open_anchors.pop()
        self._measure(node, began)
        return node

    def _measure(self, node: yaml.Node, began: int) -> None:
        self._written += 1
        self._order[id(node)] = self._written
        height, weight, size, aliased = 0, 1, 1, False
        for child in _children(node):
            key = id(child)
            height = max(height, self._height.get(key, 1))
            size += self._size.get(key, 1)
            if self._order.get(key, began + 1) <= began:  # composed before: an alias use
                aliased = True
                weight += self._size.get(key, 1) if key in self._aliased else 1
            else:
                aliased = aliased or key in self._aliased
                weight += self._weight.get(key, 1)
        self._height[id(node)] = height + 1
        self._weight[id(node)] = weight
        self._size[id(node)] = size
        if aliased:
            self._aliased.add(id(node))
        if height + 1 > MAX_DEPTH:  # deep only through aliases: a walk would still recurse
            raise YamlLimitError(
                None,
                None,
                f"nested deeper than {MAX_DEPTH} levels (through aliases)",
                node.start_mark,
            )
        budget = max(ALIAS_FACTOR * self._written, ALIAS_FLOOR)
        if weight > budget:
            raise YamlLimitError(
                None,
                None,
                f"aliases expand to more than {budget} nodes (aliases may share a value, "
                "not multiply the document: an alias bomb?)",
                node.start_mark,
            )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def safe_load(text: str, source: str) -> Any:
    """yaml.safe_load through GuardedLoader: plain values, or a SourceError naming
    source:line (bad YAML, a character YAML does not allow, too deep, an alias bomb)."""
    try:
        loader = GuardedLoader(text)
    except yaml.reader.ReaderError as exc:
        raise _reader_error(text, source, exc) from None
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SourceError(source, line, f"not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise SourceError(source, None, f"not valid YAML: {exc}") from None
    except (ValueError, TypeError, OverflowError) as exc:  # `!!int x`, a list as a key
        raise SourceError(source, None, f"not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def _reader_error(text: str, source: str, exc: yaml.reader.ReaderError) -> SourceError:
    """A character YAML does not allow (a NUL in a binary file, say), at its line."""
    line = text.count("\n", 0, exc.position) + 1
    return SourceError(source, line, f"not valid YAML: {exc.reason} (is it a text file?)")


_MERGE_TAG = "tag:yaml.org,2002:merge"  # what the resolver gives a plain `<<` key


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
        try:
            self.loader = GuardedLoader(text)
        except yaml.reader.ReaderError as exc:  # the whole text is checked up front
            raise _reader_error(text, source, exc) from None

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

    def _error(self, exc: yaml.YAMLError, what: str, node: yaml.Node | None) -> SourceError:
        """One line from pyyaml's error: its problem at its own mark (str(exc) spans several
        lines, with the context and a snippet of the file)."""
        if isinstance(exc, yaml.MarkedYAMLError):
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else self.line(node)
            text = exc.problem or exc.context or type(exc).__name__
        else:  # a ReaderError (a character YAML does not allow) says where on a second line
            line = self.line(node)
            text = (str(exc).splitlines() or [type(exc).__name__])[0]
        return SourceError(self.source, line, f"{what}: {text}")

    def root(self) -> yaml.Node | None:
        """The document's root node, None for an empty document."""
        try:
            return self.loader.get_single_node()
        except yaml.YAMLError as exc:
            raise self._error(exc, "not valid YAML", None) from None

    def scalar(self, node: yaml.Node) -> Any:
        """The value of a scalar node (str, int, float, bool, None, ...); NOT_SCALAR for a
        list or mapping."""
        if not isinstance(node, yaml.ScalarNode):
            return NOT_SCALAR
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self._error(exc, "bad value", node) from None
        except (ValueError, TypeError, OverflowError):  # `!!int x`: the tag's own parse failed
            tag = node.tag.rpartition(":")[2] or node.tag
            raise self.fail(node, f"bad value: {shown(node.value)} is not a valid {tag}") from None

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
        checked in turn, so the first bad key in the file is the one named.

        YAML merge keys work as in pyyaml's loaders: `{<<: *base, weight: 2}` has base's
        keys (named at their own lines), its own keys win over merged ones, and in
        `<<: [*a, *b]` a wins over b."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        own: set[str] = set()  # keys written in this mapping, not merged into it
        for key_node, value_node, merged in self._pairs(node):
            key = self.scalar(key_node)
            if scalar_keys and key is not NOT_SCALAR and key is not None:
                key = str(key)
            if not isinstance(key, str):
                raise self.fail(key_node, f"{what}: keys must be plain strings")
            if key in own:
                raise self.fail(key_node, f"{what}: duplicate key {shown(key)}")
            if not merged:
                own.add(key)
            if valid is not None and key not in valid:
                raise self.fail(
                    key_node,
                    f"{what}: unknown key {shown(key)}{did_you_mean(key, valid)}; "
                    f"valid: {', '.join(valid)}",
                )
            out[key] = (key_node, value_node)
        return out

    def _pairs(
        self, node: yaml.MappingNode, seen: tuple[yaml.Node, ...] = ()
    ) -> list[tuple[yaml.Node, yaml.Node, bool]]:
        """The mapping's (key, value, merged) pairs with merge keys expanded, lowest
        precedence first: later pairs win. Like pyyaml's flatten_mapping, without changing
        the nodes (an anchored mapping is read again where it is defined)."""
        merged: list[tuple[yaml.Node, yaml.Node, bool]] = []
        own: list[tuple[yaml.Node, yaml.Node, bool]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                own.append((key_node, value_node, False))
                continue
            sources = (
                value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            )
            for source in reversed(sources):  # the first source wins: it goes last
                if not isinstance(source, yaml.MappingNode):
                    raise self.fail(source, "<<: expected a mapping or a list of mappings to merge")
                if source is node or source in seen:
                    raise self.fail(source, "<<: a mapping cannot merge itself")
                merged.extend((k, v, True) for k, v, _ in self._pairs(source, (*seen, node)))
        return merged + own
