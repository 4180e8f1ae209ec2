"""The `windows:` section of the pool policy file: parsing (one line at its line for each
bad input), Window.active at boundaries in several time zones and across DST changes, and
what is in force at a time (quota_in_force, elastic_in_force)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupoolctl.errors import SourceError
from gpupoolctl.policy import load_policy, parse_policy
from gpupoolctl.policy.model import (
    ElasticPolicy,
    ElasticRule,
    PoolPolicy,
    QuotaScope,
    Team,
    Window,
)

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024

GOOD = """\
version: 1
teams:
  inference: {members: [alice]}
  training: {members: [carol]}
windows:
  - name: singapore-day
    timezone: Asia/Singapore
    days: mon-fri
    hours: "08:00-20:00"
    teams:
      inference:
        quota: {nominal: {gpu-memory: 2400GiB}}
      training:
        quota:
          - site: dubai
            nominal: {gpu-memory: 100GiB}
    elastic:
      enabled: true
      rules: [{vendor: nvidia}]
  - name: night
    timezone: Europe/Berlin
    days: [fri-mon, wed]
    hours: 20:00-08:00
  - name: always
    timezone: UTC
"""


def error_of(text: str) -> SourceError:
    with pytest.raises(SourceError) as info:
        parse_policy(text, "pool.yaml")
    assert "\n" not in str(info.value), str(info.value)
    return info.value


def test_a_good_file_gives_the_windows() -> None:
    day, night, always = parse_policy(GOOD, "pool.yaml").windows
    assert day == Window(
        name="singapore-day",
        line=6,
        timezone="Asia/Singapore",
        days=frozenset(range(5)),
        start_min=8 * 60,
        end_min=20 * 60,
        teams={
            "inference": (QuotaScope(line=12, nominal={"gpu-memory": 2400 * GIB}),),
            "training": (QuotaScope(line=15, site="dubai", nominal={"gpu-memory": 100 * GIB}),),
        },
        elastic=ElasticPolicy(enabled=True, rules=(ElasticRule(line=19, vendor="nvidia"),)),
    )
    assert night == Window(
        name="night",
        line=20,
        timezone="Europe/Berlin",
        days=frozenset({4, 5, 6, 0, 2}),
        start_min=20 * 60,
        end_min=8 * 60,
    )
    assert always == Window(name="always", line=24, timezone="UTC")
    assert night.hours_text() == "20:00-08:00" and always.hours_text() == "00:00-24:00"


@pytest.mark.parametrize(
    ("days", "expected"),
    [("mon-fri", {0, 1, 2, 3, 4}), ("'sat,sun'", {5, 6}), ("[mon, wed]", {0, 2}),
     ("daily", set(range(7))), ("fri-mon", {4, 5, 6, 0}), ("sun-sun", {6}), ("MON", {0}),
     ("' tue - thu , sat '", {1, 2, 3, 5}), ("[sat-sun, mon]", {5, 6, 0}),
     ("sun-sat", set(range(7)))],
)  # fmt: skip
def test_day_forms(days: str, expected: set[int]) -> None:
    text = f"version: 1\nwindows:\n  - {{name: w, timezone: UTC, days: {days}}}\n"
    assert parse_policy(text).windows[0].days == frozenset(expected)


@pytest.mark.parametrize(
    ("hours", "minutes"),
    [("'08:00-20:00'", (480, 1200)), ("00:00-24:00", (0, 1440)), ("'20:00-08:00'", (1200, 480)),
     ("'8:30 - 9:15'", (510, 555)), ("23:59-00:00", (1439, 0)), ("00:00-00:01", (0, 1))],
)  # fmt: skip
def test_hour_forms(hours: str, minutes: tuple[int, int]) -> None:
    text = f"version: 1\nwindows:\n  - name: w\n    timezone: UTC\n    hours: {hours}\n"
    window = parse_policy(text).windows[0]
    assert (window.start_min, window.end_min) == minutes


def win(body: str, teams: str = "teams:\n  ml: {}\n  cv: {}\n") -> str:
    lines = "".join(f"    {line}\n" for line in body.splitlines())
    return f"version: 1\n{teams}windows:\n  - name: w\n    timezone: UTC\n{lines}"


# (text, line, words). win(...) puts the body's first line at line 8 (6 with teams="").
BAD = {
    "not-a-list": ("version: 1\nwindows: {name: w}\n", 2, "windows: expected a list of windows"),
    "item-scalar": (
        "version: 1\nwindows:\n  - day\n",
        3,
        "window 1: expected a mapping of name, timezone",
    ),
    "no-name": (
        "version: 1\nwindows:\n  - timezone: UTC\n",
        3,
        "window 1: missing name; expected name: NAME",
    ),
    "no-zone": ("version: 1\nwindows:\n  - name: w\n", 3, "window 1: missing timezone"),
    "key": (win("hour: '08:00-09:00'"), 8, "window 1: unknown key 'hour' (did you mean 'hours'?)"),
    "name-number": (
        "version: 1\nwindows:\n  - {name: 7, timezone: UTC}\n",
        3,
        "window 1: name: bad name 7; expected a lower-case letter",
    ),
    "name-upper": ("version: 1\nwindows:\n  - {name: Day, timezone: UTC}\n", 3, "bad name 'Day'"),
    "name-twice": (
        "version: 1\nwindows:\n  - {name: d, timezone: UTC}\n  - timezone: UTC\n    name: d\n",
        5,
        "window d: the name is taken by the window at line 3; expected each",
    ),
    "zone-unknown": (
        "version: 1\nwindows:\n  - name: w\n    timezone: Mars/Base\n",
        4,
        "window w: timezone: unknown time zone 'Mars/Base'; expected an IANA time zone",
    ),
    "zone-path": (
        "version: 1\nwindows:\n  - {name: w, timezone: ../../etc/passwd}\n",
        3,
        "bad time zone",
    ),
    "zone-absolute": (
        "version: 1\nwindows:\n  - {name: w, timezone: /etc/localtime}\n",
        3,
        "bad time zone",
    ),
    "zone-number": (
        "version: 1\nwindows:\n  - {name: w, timezone: 8}\n",
        3,
        "timezone: expected an IANA",
    ),
    "zone-long": (
        "version: 1\nwindows:\n  - {name: w, timezone: " + "A" * 65 + "}\n",
        3,
        "bad time zone",
    ),
    "days-unknown": (
        win("days: mon-fir"),
        8,
        "window w: days: unknown day 'fir' (did you mean 'fri'?); "
        "expected mon, tue, wed, thu, fri, sat, sun",
    ),
    "days-empty": (win("days: []"), 8, "days: an empty list selects no day"),
    "days-range3": (win("days: mon-wed-fri"), 8, "bad day range 'mon-wed-fri'"),
    "days-mapping": (win("days: {mon: 1}"), 8, "days: expected mon-fri"),
    "days-bool": (
        win("days: [mon, no]"),
        8,
        "days: expected mon-fri, sat,sun, a list such as [mon, wed], or daily, got False",
    ),
    "days-many": (
        win("days: [" + ", ".join(["mon"] * 65) + "]"),
        8,
        "65 entries; expected at most 64",
    ),
    "hours-int": (
        win("hours: 20:00"),
        8,
        "window w: hours: expected HH:MM-HH:MM from 00:00 to 24:00",
    ),
    "hours-text": (win("hours: morning"), 8, "got 'morning'"),
    "hours-25": (win("hours: 08:00-25:00"), 8, "'08:00-25:00' is not a time of day"),
    "hours-60": (win("hours: 08:60-10:00"), 8, "is not a time of day"),
    "hours-start-24": (win("hours: 24:00-08:00"), 8, "is not a time of day"),
    "hours-equal": (
        win("hours: 08:00-08:00"),
        8,
        "window w: hours: '08:00-08:00' starts where it ends",
    ),
    "teams-unknown": (
        win("teams:\n  mll:\n    quota: {nominal: {}}"),
        9,
        "window w: teams: no team 'mll' in teams: (did you mean 'ml'?); known teams: ml, cv",
    ),
    "teams-none": (
        win("teams:\n  ml: {quota: {nominal: {}}}", teams=""),
        6,
        "no team 'ml' in teams:; expected a teams: section naming it",
    ),
    "teams-list": (
        win("teams: [ml]"),
        8,
        "window w: teams: expected a mapping of team -> {quota: ...}",
    ),
    "team-no-quota": (win("teams:\n  ml: {}"), 9, "window w: team ml: missing quota"),
    "team-null": (win("teams:\n  ml:"), 9, "window w: team ml: expected a mapping of quota"),
    "team-key": (
        win("teams:\n  ml: {quotas: {}}"),
        9,
        "unknown key 'quotas' (did you mean 'quota'?)",
    ),
    "team-quota-bad": (
        win("teams:\n  ml:\n    quota:\n      nominal: {gpus: 1}"),
        11,
        "window w: team ml: quota: nominal: unknown resource 'gpus'",
    ),
    "elastic-bad": (
        win("elastic:\n  rules:\n    - keep-whole: 99"),
        10,
        "elastic rule 1: keep-whole: 99 is out of range",
    ),
    "elastic-list": (win("elastic: [1]"), 8, "elastic: expected a mapping of enabled"),
}


@pytest.mark.parametrize(("text", "line", "words"), list(BAD.values()), ids=list(BAD))
def test_each_bad_input_is_one_line_at_its_line(text: str, line: int, words: str) -> None:
    exc = error_of(text)
    assert (exc.path, exc.line) == ("pool.yaml", line), str(exc)
    assert words in str(exc), str(exc)


def test_at_most_1000_windows() -> None:
    many = "".join(f"  - {{name: w{n}, timezone: UTC}}\n" for n in range(1001))
    exc = error_of("version: 1\nwindows:\n" + many)
    assert exc.line == 3 and "1001 windows; expected at most 1000" in str(exc)


def test_an_empty_window_elastic_keeps_the_files_own() -> None:
    window = parse_policy(win("elastic:")).windows[0]
    assert window.elastic is None


# -- Window.active -------------------------------------------------------------------------


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def window(zone: str, days: set[int], start: int, end: int) -> Window:
    return Window(
        name="w", line=1, timezone=zone, days=frozenset(days), start_min=start, end_min=end
    )


def test_singapore_working_day_boundaries() -> None:
    day = window("Asia/Singapore", {0, 1, 2, 3, 4}, 8 * 60, 20 * 60)
    assert utc(2026, 3, 2).weekday() == 0  # a Monday; 08:00 in Singapore is 00:00 UTC
    assert not day.active(utc(2026, 3, 1, 23, 59, 59))
    assert day.active(utc(2026, 3, 2, 0, 0))
    assert day.active(utc(2026, 3, 2, 11, 59, 59))
    assert not day.active(utc(2026, 3, 2, 12, 0))  # 20:00: the end is exclusive
    # Saturday 08:00 Singapore is Saturday 00:00 UTC: not a working day.
    assert not day.active(utc(2026, 3, 7, 0, 0))
    # Friday 19:00 Singapore = Friday 11:00 UTC; a naive UTC reading would say otherwise.
    assert day.active(utc(2026, 3, 6, 11, 0))


def test_a_night_crossing_midnight_belongs_to_the_day_it_starts() -> None:
    friday_night = window("Asia/Dubai", {4}, 20 * 60, 8 * 60)  # Dubai is UTC+4
    assert not friday_night.active(utc(2026, 3, 6, 15, 59))  # Fri 19:59
    assert friday_night.active(utc(2026, 3, 6, 16, 0))  # Fri 20:00
    assert friday_night.active(utc(2026, 3, 6, 20, 0))  # Sat 00:00
    assert friday_night.active(utc(2026, 3, 7, 3, 59))  # Sat 07:59
    assert not friday_night.active(utc(2026, 3, 7, 4, 0))  # Sat 08:00
    assert not friday_night.active(utc(2026, 3, 6, 3, 0))  # Fri 07:00: Thursday's night
    assert not friday_night.active(utc(2026, 3, 7, 16, 0))  # Sat 20:00


def test_a_wrapped_day_range_covers_the_weekend() -> None:
    policy = parse_policy(
        "version: 1\nwindows:\n  - {name: w, timezone: UTC, days: fri-mon, hours: 09:00-10:00}\n"
    )
    (w,) = policy.windows
    hits = [d for d in range(7) if w.active(utc(2026, 3, 2, 9, 30) + timedelta(days=d))]
    assert hits == [0, 4, 5, 6]  # Mon, Fri, Sat, Sun


def test_berlin_spring_forward_2026_03_29() -> None:
    # 02:00 CET becomes 03:00 CEST (01:00 UTC): local 02:00-03:00 does not exist that day.
    sunday = {6}
    early = window("Europe/Berlin", sunday, 1 * 60, 3 * 60)
    assert early.active(utc(2026, 3, 29, 0, 59))  # 01:59 CET
    assert not early.active(utc(2026, 3, 29, 1, 0))  # 03:00 CEST
    office = window("Europe/Berlin", {5, 0}, 8 * 60, 20 * 60)
    assert office.active(utc(2026, 3, 28, 7, 0))  # Sat 08:00 CET is 07:00 UTC
    assert not office.active(utc(2026, 3, 28, 6, 59))
    assert office.active(utc(2026, 3, 30, 6, 0))  # Mon 08:00 CEST is 06:00 UTC
    assert not office.active(utc(2026, 3, 30, 5, 59))
    assert office.active(utc(2026, 3, 30, 17, 59)) and not office.active(utc(2026, 3, 30, 18, 0))


def test_berlin_fall_back_2026_10_25() -> None:
    # 03:00 CEST becomes 02:00 CET (01:00 UTC): local 02:00-03:00 happens twice.
    twice = window("Europe/Berlin", {6}, 2 * 60, 3 * 60)
    assert not twice.active(utc(2026, 10, 24, 23, 59))  # 01:59 CEST
    assert twice.active(utc(2026, 10, 25, 0, 0))  # 02:00 CEST
    assert twice.active(utc(2026, 10, 25, 1, 30))  # 02:30 CET, the second time
    assert not twice.active(utc(2026, 10, 25, 2, 0))  # 03:00 CET
    night = window("Europe/Berlin", {5}, 22 * 60, 6 * 60)  # Saturday night, an hour longer
    assert night.active(utc(2026, 10, 24, 20, 0))  # Sat 22:00 CEST
    assert night.active(utc(2026, 10, 25, 4, 59))  # Sun 05:59 CET
    assert not night.active(utc(2026, 10, 25, 5, 0))


def test_new_york_office_hours_across_both_changes() -> None:
    office = window("America/New_York", {0, 1, 2, 3, 4}, 9 * 60, 17 * 60)
    # Before 2026-03-08 New York is UTC-5, after it UTC-4.
    assert office.active(utc(2026, 3, 6, 14, 0)) and not office.active(utc(2026, 3, 6, 13, 59))
    assert office.active(utc(2026, 3, 9, 13, 0)) and not office.active(utc(2026, 3, 9, 12, 59))
    assert not office.active(utc(2026, 3, 9, 21, 0)) and office.active(utc(2026, 3, 9, 20, 59))
    # Back to UTC-5 on 2026-11-01 (a Sunday).
    assert office.active(utc(2026, 11, 2, 14, 0)) and not office.active(utc(2026, 11, 2, 13, 59))
    assert not office.active(utc(2026, 11, 1, 15, 0))  # Sunday


# -- what is in force ----------------------------------------------------------------------

SG = QuotaScope(line=1, site="singapore", nominal={"gpu-memory": 600 * GIB})
DXB = QuotaScope(line=2, site="dubai", nominal={"gpu-memory": 700 * GIB})
TEAM = Team(name="ml", line=1, quota=(SG, DXB))


def scoped(site: str | None, gib: int, line: int) -> QuotaScope:
    return QuotaScope(line=line, site=site, nominal={"gpu-memory": gib * GIB})


def test_quota_in_force_replaces_scopes_by_selector_and_the_first_window_wins() -> None:
    first = Window(
        name="first", line=10, timezone="UTC", start_min=0, end_min=720,
        teams={"ml": (scoped("singapore", 1100, 11),)},
    )  # fmt: skip
    second = Window(
        name="second", line=20, timezone="UTC",
        teams={"ml": (scoped("singapore", 50, 21), scoped("dubai", 1500, 22), scoped(None, 9, 23))},
    )  # fmt: skip
    idle = Window(
        name="idle", line=30, timezone="UTC", days=frozenset({6}),
        teams={"ml": (scoped("dubai", 1, 31),)},
    )  # fmt: skip
    policy = PoolPolicy(teams=None, windows=(idle, first, second))  # type: ignore[arg-type]
    morning = utc(2026, 3, 2, 9)  # a Monday: idle is not active
    in_force = policy.quota_in_force(TEAM, morning)
    assert [s.line for s in in_force] == [11, 22, 23]  # first's singapore, second's dubai, added
    evening = utc(2026, 3, 2, 13)  # first has ended
    assert [s.line for s in policy.quota_in_force(TEAM, evening)] == [21, 22, 23]
    sunday = [s.line for s in policy.quota_in_force(TEAM, utc(2026, 3, 8, 13))]
    assert sunday == [21, 31, 23]  # idle is active on Sundays and comes first: its dubai
    alone = PoolPolicy(windows=(idle,))
    assert alone.quota_in_force(TEAM, morning) == (SG, DXB)
    other = Team(name="other", line=2, quota=(SG,))
    assert policy.quota_in_force(other, morning) == (SG,)


def test_elastic_in_force_is_the_first_active_windows() -> None:
    base = ElasticPolicy(enabled=True)
    off, on = ElasticPolicy(enabled=False), ElasticPolicy(enabled=True, max_cards_per_pass=1)
    late = Window(name="late", line=1, timezone="UTC", start_min=12 * 60, end_min=1440)
    plain = Window(name="plain", line=2, timezone="UTC")  # no elastic of its own
    night = Window(name="night", line=3, timezone="UTC", elastic=off)
    any_time = Window(name="any", line=4, timezone="UTC", elastic=on)
    policy = PoolPolicy(elastic=base, windows=(late, plain, night, any_time))
    assert policy.elastic_in_force(utc(2026, 3, 2, 13)) is off
    assert (
        PoolPolicy(elastic=base, windows=(any_time, night)).elastic_in_force(utc(2026, 3, 2)) is on
    )
    assert PoolPolicy(elastic=base, windows=(late,)).elastic_in_force(utc(2026, 3, 2, 1)) is base


def test_the_shares_example_moves_quota_between_day_and_night() -> None:
    policy = load_policy(ROOT / "playbooks" / "shares.yaml")
    inference, training = policy.teams.teams
    assert {w.timezone for w in policy.windows} == {"Asia/Singapore", "Asia/Dubai"}

    def singapore(team: Team, now: datetime) -> int:
        scope = next(s for s in policy.quota_in_force(team, now) if s.site == "singapore")
        return scope.nominal["gpu-memory"] // GIB

    weekday_noon = utc(2026, 3, 4, 4)  # Wednesday 12:00 in Singapore
    weekday_night = utc(2026, 3, 4, 16)  # Thursday 00:00 in Singapore
    assert singapore(inference, weekday_noon) > singapore(training, weekday_noon)
    assert singapore(training, weekday_night) > singapore(inference, weekday_night)
    assert policy.elastic_in_force(weekday_night) is not policy.elastic
    assert policy.elastic_in_force(weekday_noon) is policy.elastic
    # The quotas of each site's windows fit the site (Singapore ~1434 GiB, Dubai ~1876 GiB).
    capacity = {"singapore": 1434, "dubai": 1876}
    for now in (utc(2026, 3, 2) + timedelta(minutes=30 * n) for n in range(2 * 24 * 7)):
        for site, gib in capacity.items():
            total = 0
            for team in (inference, training):
                total += sum(
                    s.nominal["gpu-memory"] // GIB
                    for s in policy.quota_in_force(team, now)
                    if s.site == site
                )
            assert total <= gib, (now, site, total)
