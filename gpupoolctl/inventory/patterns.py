"""--limit patterns: Ansible's host patterns plus ClusterShell node sets.

Splitting: parts are separated by ',' (or, when the pattern has no ',' outside brackets, by ':'),
never inside brackets, so `gpu[01-04,07]` and `gpu[01:04]` stay whole. A part may start with
'&' (intersection) or '!' (exclusion); `@file` reads one pattern per line (relative to cwd).
As in Ansible, plain parts are applied first, then every '&', then every '!'; with no plain part
the start is `all`.

Resolving one part, first rule that applies:
  1. `~regex`: Python regex, matched (re.match) against group names, then host names.
  2. `base[i]`, `base[-1]`, `base[i:j]`, `base[i:]` where `base` (a name or glob) matches a
     group: Ansible's subscript on that group's hosts (ends inclusive).
  3. every bracket holds digits, '-', ',' or '/': a ClusterShell node set, expanded
     (`gpu[01-04,07]`, `node[1-9/2]`, `rack[1-2]-gpu[01-04]`).
  4. every bracket holds an inventory range (`[01:04]`, `[a:f]`, `[1:9:2]`): expanded like a
     host range in an inventory file.
  5. otherwise Ansible's matching: a shell glob (`gpu*`, `gpu?`, `[!x]` character classes) over
     group names (all their hosts) and, for globs or when no group matched, host names.
Names from rules 3 and 4 each match a group of that name, else a host of that name.
So `name[...]` is a group subscript exactly when `name` is a group; otherwise it is a node set.
Patterns match inventory aliases, never ansible_host. The result keeps inventory order.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from gpupoolctl.errors import InventoryError, UsageError
from gpupoolctl.hw.shown import shown
from gpupoolctl.inventory.hosts import HostPool, Selection
from gpupoolctl.inventory.nodeset import (
    NodeSetError,
    expand_nodeset,
    looks_like_nodeset,
    split_outside_brackets,
)
from gpupoolctl.inventory.ranges import HostRangeError, expand_host_range

# Ansible's PATTERN_WITH_SUBSCRIPT: `[n]`, `[-n]`, `[a:b]`, `[a:]` (and the old `[a-b]`).
_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]*))\]$")
_ANSIBLE_RANGE = re.compile(r"^[^\[\]:]*:[^\[\]:]*(?::[^\[\]:]*)?$")
_GLOB_CHARS = (".", "?", "*", "[")


@dataclass(frozen=True)
class Part:
    text: str  # without its & or ! prefix
    op: str  # "", "&" or "!"
    origin: tuple[str, int] | None = None  # (file, line) when it came from an @file


def split_limit(limit: str) -> list[str]:
    """Split a --limit into its parts (prefixes kept), without reading @files."""
    text = limit.strip()
    try:
        if len(split_outside_brackets(text, ",")) > 1:
            pieces = split_outside_brackets(text, ",")
        elif _is_ip(text):
            pieces = [text]  # an IPv6 address is not a ':' list
        else:
            pieces = split_outside_brackets(text, ":")
    except NodeSetError as exc:
        problem = shown(str(exc), 200)
        raise UsageError(f"bad --limit pattern {shown(limit, 80)}: {problem}") from None
    return [p.strip() for p in pieces if p.strip()]


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def parse_limit(limit: str, cwd: Path) -> list[Part]:
    parts: list[Part] = []
    for piece in split_limit(limit):
        if piece.startswith("@"):
            parts.extend(_read_limit_file(cwd / piece[1:]))
        else:
            parts.append(_part(piece))
    return parts


# Longer than any host name (253) or sensible glob/regex of them: fnmatch's translation of
# unclosed `[` is quadratic, so 100,000 of them took minutes before this bound.
MAX_PATTERN = 1024


def _part(text: str, origin: tuple[str, int] | None = None) -> Part:
    if len(text) > MAX_PATTERN:
        where = f"{origin[0]}:{origin[1]}: " if origin else ""
        raise UsageError(
            f"{where}host pattern of {len(text)} characters: at most {MAX_PATTERN} "
            "(list many hosts with ',' or one per line in an @file)"
        )
    if text[0] in "&!":
        return Part(text[1:], text[0], origin)
    return Part(text, "", origin)


def _read_limit_file(path: Path) -> list[Part]:
    if not path.exists():
        raise UsageError(f"Unable to find limit file {path}")
    if not path.is_file():
        raise UsageError(f'Limit starting with "@" must be a file, not a directory: {path}')
    from gpupoolctl.errors import SourceError
    from gpupoolctl.textfile import read_user_text

    try:
        lines = read_user_text(path, "limit file").split("\n")
    except SourceError as exc:  # a bad --limit is a usage error, naming the file all the same
        raise UsageError(str(exc)) from None
    # Like Ansible, each line is one pattern (it is not split again on ',' or ':').
    return [_part(line.strip(), (str(path), n)) for n, line in enumerate(lines, 1) if line.strip()]


def select(inventory: HostPool, limit: str | None, cwd: Path | None = None) -> Selection:
    if limit is None or not limit.strip():
        return Selection(inventory.hosts.values())
    parts = parse_limit(limit, cwd if cwd is not None else Path.cwd())
    return _Matcher(inventory).evaluate(parts)


class _Matcher:
    def __init__(self, inventory: HostPool) -> None:
        self.inv = inventory
        self.unmatched: list[str] = []
        self.warnings: list[str] = []

    def evaluate(self, parts: list[Part]) -> Selection:
        plain = [p for p in parts if p.op == "" and p.text]
        inter = [p for p in parts if p.op == "&" and p.text]
        exclude = [p for p in parts if p.op == "!" and p.text]
        if not plain:
            plain = [Part("all", "")]
        chosen: dict[str, None] = {}
        for part in plain:
            if part.text in self.inv.hosts:  # Ansible: an exact host name wins for plain parts
                chosen.setdefault(part.text, None)
                continue
            for name in self.resolve(part):
                chosen.setdefault(name, None)
        for part in inter:
            keep = set(self.resolve(part))
            chosen = {n: None for n in chosen if n in keep}
        for part in exclude:
            drop = set(self.resolve(part))
            chosen = {n: None for n in chosen if n not in drop}
        hosts = [h for name, h in self.inv.hosts.items() if name in chosen]
        return Selection(hosts, _dedupe(self.unmatched), self.warnings)

    def fail(self, part: Part, message: str) -> Exception:
        if part.origin is not None:
            return InventoryError(part.origin[0], part.origin[1], message)
        return UsageError(message)

    def resolve(self, part: Part) -> list[str]:
        text = part.text
        if text.startswith("~"):
            return self.enumerate(part, text)
        m = _SUBSCRIPT.match(text)
        if m and self.glob_groups(part, m.group(1)):
            return self.subscript(part, m)
        if "[" in text:
            names = self.expand(part, text)
            if names is not None:
                return self.by_names(names)
        return self.enumerate(part, text)

    def expand(self, part: Part, text: str) -> list[str] | None:
        try:
            if looks_like_nodeset(text):
                return expand_nodeset(text)
            brackets = re.findall(r"\[([^\]]*)\]", text)
            if brackets and all(_ANSIBLE_RANGE.match(b) for b in brackets):
                return expand_host_range(text)
        except (NodeSetError, HostRangeError) as exc:
            raise self.fail(part, f"bad host range in pattern {shown(text)}: {exc}") from None
        return None

    def by_names(self, names: list[str]) -> list[str]:
        found: dict[str, None] = {}
        for name in names:
            if name in self.inv.groups:
                found.update(dict.fromkeys(h.name for h in self.inv.hosts_of(name)))
            elif name in self.inv.hosts:
                found.setdefault(name, None)
            else:
                self.unmatched.append(name)
        return list(found)

    def compile(self, part: Part, text: str) -> re.Pattern[str]:
        try:
            return re.compile(text[1:] if text.startswith("~") else fnmatch.translate(text))
        except re.error as exc:
            raise self.fail(part, f"Invalid host list pattern: {text} ({exc})") from None

    def glob_groups(self, part: Part, text: str) -> list[str]:
        regex = self.compile(part, text)
        return [g for g in self.inv.groups if regex.match(g)]

    def enumerate(self, part: Part, text: str) -> list[str]:
        """Ansible's _enumerate_matches; may hold duplicates (subscripts count them)."""
        regex = self.compile(part, text)
        groups = [g for g in self.inv.groups if regex.match(g)]
        results = [h.name for g in groups for h in self.inv.hosts_of(g)]
        if not groups or text.startswith("~") or any(c in text for c in _GLOB_CHARS):
            results += [h for h in self.inv.host_names_in_definition_order() if regex.match(h)]
        if not results and not groups and text != "all":
            self.unmatched.append(text)
        return results

    def subscript(self, part: Part, m: re.Match[str]) -> list[str]:
        base, index, start, sep, end = m.groups()
        hosts = self.enumerate(part, base)
        if sep == "-":
            self.warnings.append(
                f"{part.text}: use [x:y] inclusive subscripts instead of [x-y], "
                "which Ansible has removed"
            )
        if not hosts:
            return hosts
        try:
            if index is not None:
                return [hosts[int(index)]]
            first, last = int(start), int(end) if end else -1
            # Ansible's rule, quirks included: a last index of 0 selects only the first.
            if last:
                if last == -1:
                    last = len(hosts) - 1
                return hosts[first : last + 1]
            return [hosts[first]]
        except IndexError:
            raise self.fail(
                part, f"No hosts matched the subscripted pattern {shown(part.text)}"
            ) from None


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
