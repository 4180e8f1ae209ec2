"""Ansible's INI inventory format, parsed with the same rules as ansible-core's `ini` plugin.

Lines before the first section are `ungrouped` hosts; `[g]` holds hosts (with inline
`key=value` vars), `[g:vars]` one `key=value` per line, `[g:children]` child group names that may
be declared further down. Values are typed as ansible-core 2.19 really types them: both inline
host vars and `:vars` values go through `ast.literal_eval`, falling back to the text (the
documentation says `:vars` stay strings; the plugin's code, and `ansible-inventory`, disagree).
"""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupoolctl.errors import InventoryError
from gpupoolctl.hw.shown import shown
from gpupoolctl.inventory.graph import GraphError, InventoryData
from gpupoolctl.inventory.ranges import HostRangeError, expand_host_range, has_range, split_port

_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
_COMMENT = (";", "#")


@dataclass
class _Pending:
    """A group named before it is declared; it must be declared by the end of the file."""

    line: int
    state: str
    parents: list[str] = field(default_factory=list)


def decode_lines(raw: bytes) -> list[str]:
    """UTF-8 lines; like Ansible, undecodable bytes are tolerated in comment lines only."""
    try:
        return raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        pass
    lines = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if line[:1] in (b"#", b";"):
            lines.append("")
            continue
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise _LineError(number, f"line is not valid UTF-8 ({exc.reason})") from None
    return lines


class _LineError(Exception):
    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def parse_ini(path: Path, raw: bytes, data: InventoryData) -> None:
    """Fill `data` from INI text; raises InventoryError naming the file and line."""
    try:
        _Parser(data).run(decode_lines(raw))
    except _LineError as exc:
        raise InventoryError(str(path), exc.line, exc.message) from None


class _Parser:
    def __init__(self, data: InventoryData) -> None:
        self.data = data
        self.line = 0

    def fail(self, message: str, line: int | None = None) -> _LineError:
        return _LineError(line if line is not None else self.line, message)

    def run(self, lines: list[str]) -> None:
        pending: dict[str, _Pending] = {}
        group, state = "ungrouped", "hosts"
        for self.line, text in enumerate(lines, start=1):
            text = text.strip()
            if not text or text[0] in _COMMENT:
                continue
            m = _SECTION.match(text)
            if m:
                group, state = m.group(1), m.group(2) or "hosts"
                self._section(group, state, pending)
                continue
            if text.startswith("[") and text.endswith("]"):
                raise self.fail(
                    f"Invalid section entry: {shown(text)}. Please make sure that there are no "
                    "spaces "
                    "in the section entry, and that there are no other invalid characters"
                )
            try:
                if state == "hosts":
                    self._host_line(text, group)
                elif state == "vars":
                    key, value = self._variable(text)
                    self.data.set_group_var(group, key, value)
                else:
                    self._child_line(text, group, pending)
            except GraphError as exc:
                raise self.fail(str(exc)) from None
        # Report the first name that was used but never declared, at the line it was used.
        for name, decl in pending.items():
            if decl.state == "vars":
                raise self.fail(
                    f"Section {shown(f'[{name}:vars]')} not valid for undefined group "
                    f"{shown(name)}.",
                    decl.line,
                )
            raise self.fail(
                f"Section {shown(f'[{decl.parents[-1]}:children]')} includes undefined group "
                f"{shown(name)}.",
                decl.line,
            )

    def _section(self, group: str, state: str, pending: dict[str, _Pending]) -> None:
        if state not in ("hosts", "children", "vars"):
            raise self.fail(
                f"Section {shown(f'[{group}:{state}]')} has unknown type: {shown(state)}"
            )
        if group not in self.data.groups:
            # [g:vars] alone does not declare g; it must be declared somewhere in the file.
            if state == "vars" and group not in pending:
                pending[group] = _Pending(self.line, "vars")
            self.data.add_group(group, self.line)
        if group in pending and state != "vars":
            if pending[group].state == "children":
                self._resolve_children(group, pending)
            else:
                del pending[group]

    def _resolve_children(self, group: str, pending: dict[str, _Pending]) -> None:
        for parent in pending[group].parents:
            try:
                self.data.add_child(parent, group)
            except GraphError as exc:
                raise self.fail(str(exc)) from None
            if parent in pending and pending[parent].state == "children":
                self._resolve_children(parent, pending)
        pending.pop(group, None)

    def _child_line(self, text: str, group: str, pending: dict[str, _Pending]) -> None:
        m = _GROUP_NAME.match(text)
        if not m:
            raise self.fail(f"Expected group name, got: {shown(text)}")
        child = m.group(1)
        if child in self.data.groups:
            self.data.add_child(group, child)
        elif child in pending:
            pending[child].parents.append(group)
        else:
            pending[child] = _Pending(self.line, "children", [group])

    def _variable(self, text: str) -> tuple[str, Any]:
        if "=" not in text:
            raise self.fail(f"Expected key=value, got: {shown(text)}")
        key, value = (part.strip() for part in text.split("=", 1))
        return key, self._value(value)

    def _host_line(self, text: str, group: str) -> None:
        try:
            tokens = shlex.split(text, comments=True)
        except ValueError as exc:
            raise self.fail(f"Error parsing host definition {shown(text)}: {exc}") from None
        if not tokens:
            return
        names, port = self._host_pattern(tokens[0])
        variables: dict[str, Any] = {}
        for token in tokens[1:]:
            if "=" not in token:
                raise self.fail(f"Expected key=value host variable assignment, got: {shown(token)}")
            key, value = token.split("=", 1)
            variables[key] = self._value(value)
        for name in names:
            self.data.add_host(name, group, port, self.line)
            for key, value in variables.items():
                self.data.set_host_var(name, key, value)

    def _host_pattern(self, pattern: str) -> tuple[list[str], int | None]:
        name, port = split_port(pattern)
        if pattern.strip().endswith(":") and port is None:
            raise self.fail(
                f"Invalid host pattern {shown(pattern)} supplied, ending in ':' is not allowed, "
                "this character is reserved to provide a port."
            )
        try:
            names = expand_host_range(name) if has_range(name) else [name]
        except HostRangeError as exc:
            raise self.fail(str(exc)) from None
        if any(n.strip() == "---" for n in names):
            raise self.fail(
                f"Invalid host pattern {shown(pattern)} supplied, '---' is normally a sign this is "
                "a YAML file."
            )
        return names, port

    def _value(self, text: str) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntaxWarning)
                value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return text  # not a Python literal: the text itself is the value
        except TypeError as exc:  # e.g. an unhashable dict key; Ansible fails here too
            raise self.fail(f"cannot use value {shown(text)}: {exc}") from None
        return _coerce(value)


def _coerce(value: Any) -> Any:
    # Keep only types a variable may hold, as Ansible does after literal_eval.
    if isinstance(value, (list, tuple, set)):
        return [_coerce(v) for v in value]
    if isinstance(value, dict):
        return {k: _coerce(v) for k, v in value.items()}
    if value is ...:
        return "..."
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="surrogateescape")
    return value
