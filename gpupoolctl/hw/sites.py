"""What links the sites of a pool: the inventory var `gpupool_site_links`.

    all:
      vars:
        gpupool_site_links:
          - {sites: [singapore, dubai], gbps: 10, rtt_ms: 75}

One entry per pair of sites (the order of the two names does not matter): the bandwidth of
the link between them in Gb/s (10^9 bits per second) and its round-trip time in
milliseconds. Nothing here measures a WAN: a real fleet's figures are what its operator
writes down. Stdlib only (remote/ and the CLI both read it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpupoolctl.hw.entries import entry_problem
from gpupoolctl.hw.shown import shown

VAR = "gpupool_site_links"
_KEYS = ("sites", "gbps", "rtt_ms")
MAX_LINKS = 1000  # a pool has a handful of sites; this bounds what a bad file can cost


@dataclass(frozen=True)
class SiteLink:
    sites: tuple[str, str]  # sorted, so that (a, b) and (b, a) are the same link
    gbps: float
    rtt_ms: float

    def joins(self, a: str, b: str) -> bool:
        return self.sites == tuple(sorted((a, b)))

    def to_dict(self) -> dict[str, Any]:
        return {"sites": list(self.sites), "gbps": self.gbps, "rtt_ms": self.rtt_ms}


class SiteLinkError(ValueError):
    """gpupool_site_links is malformed; the message says where and what, in one line."""


def parse_site_links(value: Any) -> tuple[SiteLink, ...]:
    """Validate the var's value (None: no links). Raises SiteLinkError."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SiteLinkError(
            f"{VAR} must be a list of {{sites: [a, b], gbps: N, rtt_ms: N}}, "
            f"got {type(value).__name__}"
        )
    if len(value) > MAX_LINKS:
        raise SiteLinkError(f"{VAR} has {len(value)} entries, more than {MAX_LINKS}")
    links: list[SiteLink] = []
    seen: dict[tuple[str, str], int] = {}
    for index, entry in enumerate(value):
        where = f"{VAR}[{index}]"
        problem = entry_problem(where, entry, _KEYS, _KEYS)
        if problem:
            raise SiteLinkError(problem)
        sites = entry["sites"]
        if (
            not isinstance(sites, list)
            or len(sites) != 2
            or not all(isinstance(s, str) and s.strip() for s in sites)
        ):
            raise SiteLinkError(f"{where}: sites must be two site names, got {shown(sites)}")
        a, b = (s.strip() for s in sites)
        if a == b:
            raise SiteLinkError(f"{where}: sites names {shown(a)} twice: a link joins two sites")
        pair = (a, b) if a <= b else (b, a)
        if pair in seen:
            raise SiteLinkError(
                f"{where}: {shown(pair[0])}<->{shown(pair[1])} is already given "
                f"in {VAR}[{seen[pair]}]"
            )
        seen[pair] = index
        gbps = _positive(where, "gbps", entry["gbps"])
        rtt_ms = _positive(where, "rtt_ms", entry["rtt_ms"], zero_ok=True)
        links.append(SiteLink(pair, gbps, rtt_ms))
    return tuple(links)


def _positive(where: str, key: str, value: Any, zero_ok: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SiteLinkError(f"{where}: {key} must be a number, got {shown(value)}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero_ok):
        floor = "0 or more" if zero_ok else "more than 0"
        raise SiteLinkError(f"{where}: {key} must be {floor}, got {shown(value)}")
    return number


def link_between(links: tuple[SiteLink, ...], a: str, b: str) -> SiteLink | None:
    for link in links:
        if link.joins(a, b):
            return link
    return None
