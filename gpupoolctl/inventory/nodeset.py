"""ClusterShell node sets: `gpu[01-04,07]`, `node[1-9/2]`, `rack[1-2]-gpu[01-04]`.

Expansion follows ClusterShell's RangeSet rules (inclusive `a-b`, `/step`, zero padding taken
from begin, begin and end of equal length when either is padded, duplicates dropped) and its
order within one pattern: each bracket axis sorted by (length, text), the first axis outermost.
Negative indices and the extended operators (`!`, `&`, `^`) are not supported: in `--limit`
those characters belong to Ansible's pattern syntax.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from gpupoolctl.hw.shown import shown

MAX_NODES = 100_000

_RANGE_TEXT = re.compile(r"^[0-9\s,/-]*$")


class NodeSetError(ValueError):
    """A malformed node set; the message says which part is wrong."""


def looks_like_nodeset(text: str) -> bool:
    """True when every bracket holds only digits, '-', ',', '/' (ClusterShell range syntax)."""
    brackets = re.findall(r"\[([^\]]*)\]", text)
    return bool(brackets) and all(_RANGE_TEXT.match(b) for b in brackets)


def expand_nodeset(text: str) -> list[str]:
    """Expand a node set; commas outside brackets join several patterns (first seen first)."""
    seen: dict[str, None] = {}
    for part in split_outside_brackets(text, ","):
        part = part.strip()
        if not part:
            continue
        for name in _expand_one(part):
            seen.setdefault(name, None)
        if len(seen) > MAX_NODES:
            raise NodeSetError(f"node set {shown(text)} has more than {MAX_NODES} nodes")
    return list(seen)


def split_outside_brackets(text: str, separators: str) -> list[str]:
    """Split on any of `separators` at bracket depth 0; brackets must balance."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise NodeSetError(f"illegal closing bracket in {shown(text)}")
        if ch in separators and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise NodeSetError(f"missing closing bracket in {shown(text)}")
    parts.append("".join(current))
    return parts


def _expand_one(pattern: str) -> list[str]:
    pieces = re.split(r"(\[[^\[\]]*\])", pattern)
    fixed: list[str] = []
    axes: list[list[str]] = []
    previous_was_bracket = False
    for piece in pieces:
        if piece.startswith("[") and piece.endswith("]"):
            if previous_was_bracket:
                raise NodeSetError(f"illegal reopening bracket in {shown(pattern)}")
            axes.append(_parse_rangeset(piece[1:-1]))
            previous_was_bracket = True
        else:
            if "[" in piece or "]" in piece:
                raise NodeSetError(f"unbalanced bracket in {shown(pattern)}")
            fixed.append(piece)
            previous_was_bracket = previous_was_bracket and piece == ""
    total = 1
    for axis in axes:
        total *= len(axis)
    if total > MAX_NODES:
        raise NodeSetError(f"node set {shown(pattern)} has more than {MAX_NODES} nodes")
    # re.split with one capture group alternates text and brackets: fixed has len(axes)+1 items.
    names = []
    for combo in itertools.product(*axes):
        out = [fixed[0]]
        for value, text in zip(combo, fixed[1:], strict=True):
            out.append(value)
            out.append(text)
        names.append("".join(out))
    return names


def _parse_rangeset(body: str) -> list[str]:
    values: set[str] = set()
    for raw in body.split(","):
        item = raw.strip()
        if not item:
            raise NodeSetError("empty range in node set")
        base, slash, step_text = item.partition("/")
        step = _number(step_text.strip(), item) if slash else 1
        begin, dash, end = (p.strip() for p in base.partition("-"))
        if not dash:
            if step != 1:
                raise NodeSetError(f"invalid step usage in range {shown(item)}")
            end = begin
        if not begin or "-" in end:
            raise NodeSetError(f"negative ranges are not supported: {shown(item)}")
        start, stop = _number(begin, item), _number(end, item)
        width = _padding(begin, end, item)
        if start > stop or step < 1:
            raise NodeSetError(f"invalid values in range {shown(item)}")
        if (stop - start) // step >= MAX_NODES:
            raise NodeSetError(f"range {shown(item)} has more than {MAX_NODES} values")
        values.update(f"{i:0{width}d}" for i in range(start, stop + 1, step))
    return sorted(values, key=lambda v: (len(v), v))


def _number(text: str, item: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise NodeSetError(f"cannot convert {shown(text)} to an integer in range {shown(item)}")
    return int(text)


def _padding(begin: str, end: str, item: str) -> int:
    # ClusterShell: begin sets the width when it has leading zeros; a padded begin or end
    # forces both to the same length.
    begin_padded = len(begin) > 1 and begin.startswith("0")
    end_padded = int(end) != 0 and end.startswith("0")
    if (begin_padded or end_padded) and len(begin) != len(end):
        raise NodeSetError(f"padding length mismatch in range {shown(item)}")
    return len(begin) if begin_padded else 0


def fold_nodeset(names: Iterable[str]) -> str:
    """Fold names into a compact node set (on the last run of digits); `expand_nodeset` undoes it.

    Names must not contain brackets or commas.
    """
    buckets: dict[tuple[str, str], set[str]] = {}
    plain: set[str] = set()
    for name in names:
        if any(c in name for c in "[],"):
            raise NodeSetError(f"cannot fold a name with brackets or commas: {shown(name)}")
        m = re.match(r"^(.*?)([0-9]+)([^0-9]*)$", name)
        if m is None:
            plain.add(name)
            continue
        buckets.setdefault((m.group(1), m.group(3)), set()).add(m.group(2))
    parts = sorted(plain)
    for (prefix, suffix), digits in sorted(buckets.items()):
        ranges = _fold_digits(digits)
        if len(ranges) == 1 and "-" not in ranges[0]:
            parts.append(f"{prefix}{ranges[0]}{suffix}")
        else:
            parts.append(f"{prefix}[{','.join(ranges)}]{suffix}")
    return ",".join(parts)


def _fold_digits(digits: set[str]) -> list[str]:
    # Zero-padded values only fold with values of the same width that also start with '0';
    # that keeps each `begin-end` valid under ClusterShell's padding rule.
    def width_class(d: str) -> int:
        return len(d) if len(d) > 1 and d.startswith("0") else 0

    out: list[tuple[tuple[int, str], str]] = []
    for cls in sorted({width_class(d) for d in digits}):
        values = sorted(int(d) for d in digits if width_class(d) == cls)
        run_start = prev = values[0]
        for value in [*values[1:], None]:
            if value is not None and value == prev + 1:
                prev = value
                continue
            first = f"{run_start:0{cls}d}"
            last = f"{prev:0{cls}d}"
            out.append(((len(first), first), first if run_start == prev else f"{first}-{last}"))
            if value is not None:
                run_start = prev = value
    return [text for _, text in sorted(out)]
