"""The `windows:` section of a pool policy file: times of the week that replace teams'
quotas (scope by scope) and the elastic section. A list: the first active window wins.

windows:
  - name: singapore-day         # unique; a-z, 0-9, _ and -
    timezone: Asia/Singapore    # an IANA zone; local wall time, DST included
    days: mon-fri               # mon-fri, sat,sun, [mon, wed], daily (default); fri-mon wraps
    hours: "08:00-20:00"        # default 00:00-24:00; 20:00-08:00 crosses midnight
    teams:                      # team -> {quota}, the team named in teams:
      inference:
        quota: {site: singapore, nominal: {gpu-memory: 1200GiB}}
    elastic: {...}              # optional: the whole elastic section while active
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from gpupoolctl.errors import UsageError
from gpupoolctl.hw.shown import shown
from gpupoolctl.policy.elastic import parse_elastic
from gpupoolctl.policy.model import DAY_NAMES, ElasticPolicy, QuotaScope, TeamsPolicy, Window
from gpupoolctl.policy.quota import parse_quota
from gpupoolctl.policy.sections import section_keys
from gpupoolctl.policy.teams import name_of
from gpupoolctl.yamlsource import YamlSource, did_you_mean

WINDOW_KEYS = ("name", "timezone", "days", "hours", "teams", "elastic")
MAX_WINDOWS = 1000
MAX_DAY_ITEMS = 64
MAX_ZONE_TEXT = 64  # the longest IANA name is about 30 characters
DAY_FORMS = "mon-fri, sat,sun, a list such as [mon, wed], or daily"
HOUR_FORMS = "HH:MM-HH:MM from 00:00 to 24:00, such as 08:00-20:00 or 20:00-08:00"
_ZONE = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")
_HOURS = re.compile(r"(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})")
_MAX_TEXT = 200


def parse_windows(reader: YamlSource, node: yaml.Node, teams: TeamsPolicy) -> tuple[Window, ...]:
    """The section at `node`; teams a window names must be in `teams`."""
    if isinstance(node, yaml.ScalarNode) and reader.scalar(node) is None:
        return ()
    if not isinstance(node, yaml.SequenceNode):
        raise reader.fail(
            node,
            "windows: expected a list of windows (- name: ..., timezone: ...), "
            f"got {shown(reader.scalar(node))}",
        )
    if len(node.value) > MAX_WINDOWS:
        raise reader.fail(
            node, f"windows: {len(node.value)} windows; expected at most {MAX_WINDOWS}"
        )
    windows: list[Window] = []
    for number, item in enumerate(node.value, 1):
        window, name_node = _window(reader, item, number, teams)
        first = next((w for w in windows if w.name == window.name), None)
        if first is not None:
            raise reader.fail(
                name_node,
                f"window {window.name}: the name is taken by the window at line {first.line}; "
                "expected each window's name once",
            )
        windows.append(window)
    return tuple(windows)


def _window(
    reader: YamlSource, node: yaml.Node, number: int, teams: TeamsPolicy
) -> tuple[Window, yaml.Node]:
    """The window and its name's node (a second window of that name is refused there)."""
    keys = section_keys(reader, node, f"window {number}", WINDOW_KEYS)
    for required in ("name", "timezone"):
        if required not in keys:
            raise reader.fail(
                node,
                f"window {number}: missing {required}; expected name: NAME and "
                "timezone: ZONE (such as Asia/Singapore)",
            )
    name_node = keys["name"][1]
    with reader.at(name_node):
        name = name_of(reader.scalar(name_node), f"window {number}: name")
    what = f"window {name}"
    zone_node = keys["timezone"][1]
    with reader.at(zone_node):
        zone = timezone_name(reader.scalar(zone_node), f"{what}: timezone")
    days = frozenset(range(7))
    if "days" in keys:
        days = _days(reader, keys["days"][1], f"{what}: days")
    start, end = 0, 1440
    if "hours" in keys:
        hours_node = keys["hours"][1]
        with reader.at(hours_node):
            start, end = hours_of(reader.scalar(hours_node), f"{what}: hours")
    quotas: dict[str, tuple[QuotaScope, ...]] = {}
    if "teams" in keys:
        quotas = _teams(reader, keys["teams"][1], what, teams)
    elastic: ElasticPolicy | None = None
    elastic_node = keys["elastic"][1] if "elastic" in keys else None
    if elastic_node is not None and not (
        isinstance(elastic_node, yaml.ScalarNode) and reader.scalar(elastic_node) is None
    ):
        elastic = parse_elastic(reader, elastic_node)
    window = Window(
        name=name,
        line=node.start_mark.line + 1,
        timezone=zone,
        days=days,
        start_min=start,
        end_min=end,
        teams=quotas,
        elastic=elastic,
    )
    return window, name_node


def timezone_name(value: Any, what: str) -> str:
    """An IANA time zone that zoneinfo knows; UsageError naming `what`."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    expected = "an IANA time zone such as Asia/Singapore, Europe/Berlin or UTC"
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{what}: expected {expected}, got {shown(value)}")
    zone = value.strip()
    if len(zone) > MAX_ZONE_TEXT or not _ZONE.fullmatch(zone):
        raise UsageError(f"{what}: bad time zone {shown(value)}; expected {expected}")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise UsageError(f"{what}: unknown time zone {shown(zone)}; expected {expected}") from None
    return zone


def _days(reader: YamlSource, node: yaml.Node, what: str) -> frozenset[int]:
    if isinstance(node, yaml.MappingNode):
        raise reader.fail(node, f"{what}: expected {DAY_FORMS}, got a mapping")
    items = reader.items(node)
    if not items:
        raise reader.fail(node, f"{what}: an empty list selects no day; expected {DAY_FORMS}")
    if len(items) > MAX_DAY_ITEMS:
        raise reader.fail(
            node, f"{what}: {len(items)} entries; expected at most {MAX_DAY_ITEMS} ({DAY_FORMS})"
        )
    days: set[int] = set()
    for item in items:
        with reader.at(item):
            days |= days_of(reader.scalar(item), what)
    return frozenset(days)


def days_of(value: Any, what: str) -> frozenset[int]:
    """'mon-fri' -> {0..4}; 'sat,sun'; 'fri-mon' wraps; 'daily'; UsageError otherwise."""
    if not isinstance(value, str) or not value.strip() or len(value) > _MAX_TEXT:
        raise UsageError(f"{what}: expected {DAY_FORMS}, got {shown(value)}")
    days: set[int] = set()
    for part in value.lower().split(","):
        part = part.strip()
        if part == "daily":
            days.update(range(7))
            continue
        ends = [end.strip() for end in part.split("-")]
        if len(ends) > 2:
            raise UsageError(f"{what}: bad day range {shown(part)}; expected {DAY_FORMS}")
        first, last = (_day(end, what) for end in (ends[0], ends[-1]))
        days.update((first + step) % 7 for step in range((last - first) % 7 + 1))
    return frozenset(days)


def _day(text: str, what: str) -> int:
    if text in DAY_NAMES:
        return DAY_NAMES.index(text)
    raise UsageError(
        f"{what}: unknown day {shown(text)}{did_you_mean(text, (*DAY_NAMES, 'daily'))}; "
        f"expected {', '.join(DAY_NAMES)} (or {DAY_FORMS})"
    )


def hours_of(value: Any, what: str) -> tuple[int, int]:
    """'08:00-20:00' -> (480, 1200): minutes after local midnight, the end exclusive."""
    match = _HOURS.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise UsageError(f"{what}: expected {HOUR_FORMS} (quoted), got {shown(value)}")
    hh1, mm1, hh2, mm2 = (int(group) for group in match.groups())
    start, end = hh1 * 60 + mm1, hh2 * 60 + mm2
    if mm1 > 59 or mm2 > 59 or start >= 1440 or end > 1440:
        raise UsageError(f"{what}: {shown(value)} is not a time of day; expected {HOUR_FORMS}")
    if start == end:
        raise UsageError(
            f"{what}: {shown(value)} starts where it ends; expected a start and a different "
            "end (00:00-24:00 for the whole day)"
        )
    return start, end


def _teams(
    reader: YamlSource, node: yaml.Node, what: str, teams: TeamsPolicy
) -> dict[str, tuple[QuotaScope, ...]]:
    if isinstance(node, yaml.ScalarNode) and reader.scalar(node) is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise reader.fail(
            node,
            f"{what}: teams: expected a mapping of team -> {{quota: ...}}, "
            f"got {shown(reader.scalar(node))}",
        )
    known = [team.name for team in teams.teams]
    out: dict[str, tuple[QuotaScope, ...]] = {}
    for key, (key_node, value_node) in reader.mapping(
        node, f"{what}: teams", scalar_keys=True
    ).items():
        if key not in known:
            listed = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
            raise reader.fail(
                key_node,
                f"{what}: teams: no team {shown(key)} in teams:{did_you_mean(key, known)}; "
                + (f"known teams: {listed}" if known else "expected a teams: section naming it"),
            )
        label = f"{what}: team {key}"
        keys = section_keys(reader, value_node, label, ("quota",))
        if "quota" not in keys:
            raise reader.fail(value_node, f"{label}: missing quota; expected quota: {{...}}")
        out[key] = parse_quota(reader, keys["quota"][1], f"{label}: quota")
    return out
