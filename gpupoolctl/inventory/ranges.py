"""Ansible host ranges in inventory names: `gpu[01:16]`, `node[1:9:2]`, `db-[a:f]`.

The rules follow ansible-core's `expand_hostname_range` (inclusive ends, zero padding kept
when begin is zero-padded, letters from `string.ascii_letters`, several ranges in one name,
first range outermost) so that our host lists equal what `ansible-inventory` prints.
"""

from __future__ import annotations

import re
import string

from gpupoolctl.hw.shown import shown

# Ranges are expanded eagerly; a typo like gpu[0:99999999] must fail, not eat the memory.
MAX_HOSTS_PER_NAME = 100_000


class HostRangeError(ValueError):
    """A malformed `[begin:end:step]` range; the caller adds file and line."""


def has_range(name: str) -> bool:
    # Ansible treats any '[' in an inventory host name as the start of a range.
    return "[" in name


def expand_host_range(name: str) -> list[str]:
    """Expand every `[begin:end(:step)]` in an inventory host name, in Ansible's order."""
    return _expand(name)


def _expand(name: str) -> list[str]:
    if not has_range(name):
        return [name]
    # Ansible splits at the first '[' and the first ']' wherever they are.
    marked = name.replace("[", "|", 1).replace("]", "|", 1)
    parts = marked.split("|")
    if len(parts) != 3:
        raise HostRangeError(f"host range in {shown(name)} must be closed by ']'")
    head, spec, tail = parts
    results: list[str] = []
    for item in _range_items(spec):
        results.extend(_expand(f"{head}{item}{tail}"))
        if len(results) > MAX_HOSTS_PER_NAME:
            raise HostRangeError(
                f"host range {shown(name)} expands to more than {MAX_HOSTS_PER_NAME} hosts"
            )
    return results


def _range_items(spec: str) -> list[str]:
    bounds = spec.split(":")
    if len(bounds) not in (2, 3):
        raise HostRangeError("host range must be begin:end or begin:end:step")
    begin, end = bounds[0], bounds[1]
    step_text = bounds[2] if len(bounds) == 3 else "1"
    if not begin:
        begin = "0"
    if not end:
        raise HostRangeError("host range must specify end value")
    width = 0
    if begin[0] == "0" and len(begin) > 1:
        width = len(begin)
        if width != len(end):
            raise HostRangeError("host range must specify equal-length begin and end formats")
    step = _to_int(step_text, "step")
    if step == 0:
        raise HostRangeError("host range step must not be zero")
    letters = _letter_span(begin, end)
    if letters is not None:
        first, last = letters
        if first > last:
            raise HostRangeError("host range must have begin <= end")
        return list(string.ascii_letters[first : last + 1 : step])
    start, stop = _to_int(begin, "begin"), _to_int(end, "end")
    if abs((stop - start) // step) > MAX_HOSTS_PER_NAME:
        raise HostRangeError(f"host range [{spec}] has more than {MAX_HOSTS_PER_NAME} values")
    # Like Ansible, a begin above end yields no host rather than an error.
    return [str(i).zfill(width) if width else str(i) for i in range(start, stop + 1, step)]


def _letter_span(begin: str, end: str) -> tuple[int, int] | None:
    # Ansible looks both bounds up with str.index in ascii_letters (a..z then A..Z).
    if begin in string.ascii_letters and end in string.ascii_letters:
        return string.ascii_letters.index(begin), string.ascii_letters.index(end)
    return None


def _to_int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HostRangeError(
            f"host range {what} {shown(text)} is not a number or a letter"
        ) from None


# A host entry may carry a port: `gpu01:2222`, `gpu[01:04]:2222`, `[2001:db8::1]:2222`.
_BRACKETED_PORT = re.compile(r"^\[(.+)\]:([0-9]+)$")
_HOST_PORT = re.compile(r"^((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)$")
_RANGE = r"\[(?:[a-z]:[a-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]"
_LABEL = rf"(?:\w|{_RANGE})(?:[\w-]|{_RANGE})*(?<![_-])"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$", re.I)
_HEX_RANGE = r"\[[0-9a-f]+:[0-9a-f]+(?::[0-9]+)?\]"
_IPV6_PART = rf"(?:[0-9a-f]{{1,4}}|{_HEX_RANGE})"
_IPV4_PART = r"(?:[01]?[0-9]{1,2}|2[0-4][0-9]|25[0-5]|\[[0-9]+:[0-9]+(?::[0-9]+)?\])"
_IPV4 = re.compile(rf"^(?:{_IPV4_PART}\.){{3}}{_IPV4_PART}$")


def _is_ipv6(text: str) -> bool:
    # Simplified from Ansible: hex groups (or hex ranges) joined by ':' with at most one '::'.
    if text.count("::") > 1 or ":" not in text:
        return False
    groups = [g for g in re.split(r"::?", text) if g]
    if not groups and text != "::":
        return False
    tail = groups[-1] if groups else ""
    if "." in tail:  # IPv4-in-IPv6 such as ::ffff:192.0.2.3
        if not _IPV4.match(tail):
            return False
        groups = groups[:-1]
    return all(re.fullmatch(_IPV6_PART, g, re.I) for g in groups)


def split_port(entry: str) -> tuple[str, int | None]:
    """Split `host:port` the way Ansible's inventory plugins do; no valid host, no split."""
    host, port = entry, None
    for pattern in (_BRACKETED_PORT, _HOST_PORT):
        m = pattern.match(host)
        if m:
            host, port = m.group(1), int(m.group(2))
    if _IPV4.match(host) or _is_ipv6(host) or _HOSTNAME.match(host):
        return host, port
    return entry, None
