"""The `teams:` and `admins:` sections of the pool policy file, and their quota scopes:
good files parse to the model's values, each bad input is one line at its line."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import SourceError
from gpupoolctl.policy import parse_policy
from gpupoolctl.policy.model import Admins, QuotaScope, Team
from gpupoolctl.policy.quota import memory_mib

GOOD = """\
version: 1
admins: [ops, group:gpuadmin]
teams:
  inference:
    members: [alice, bob, group:search]
    default: true
    quota:
      nominal: {gpu-memory: 1600GiB, cards: 4, 1g.10gb: 8}
      borrowing-limit: {gpu-memory: 800GiB}
      lending-limit: {gpu-memory: 400GiB}
  training:
    members: [carol]
    quota:
      - site: dubai
        nominal: {gpu-memory: 1000GiB}
      - vendor: AMD
        model: MI300X
        nominal: {gpu-memory: 1536GiB, CPX: 8, vf: 2, slices: 16}
        borrowing-limit: {gpu-memory: 0}
  research:
"""


def error_of(text: str) -> SourceError:
    with pytest.raises(SourceError) as info:
        parse_policy(text, "pool.yaml")
    assert "\n" not in str(info.value), str(info.value)
    return info.value


def test_a_good_file_gives_the_teams_and_admins() -> None:
    policy = parse_policy(GOOD, "pool.yaml")
    assert policy.admins == Admins(users=("ops",), groups=("gpuadmin",))
    inference, training, research = policy.teams.teams
    assert inference == Team(
        name="inference",
        line=4,
        users=("alice", "bob"),
        groups=("search",),
        default=True,
        quota=(
            QuotaScope(
                line=8,
                nominal={"gpu-memory": 1600 * 1024, "cards": 4, "1g.10gb": 8},
                borrowing_limit={"gpu-memory": 800 * 1024},
                lending_limit={"gpu-memory": 400 * 1024},
            ),
        ),
    )
    assert training == Team(
        name="training",
        line=11,
        users=("carol",),
        quota=(
            QuotaScope(line=14, site="dubai", nominal={"gpu-memory": 1000 * 1024}),
            QuotaScope(
                line=16,
                vendor="amd",
                model="MI300X",
                nominal={"gpu-memory": 1536 * 1024, "cpx": 8, "vf": 2, "slices": 16},
                borrowing_limit={"gpu-memory": 0},
            ),
        ),
    )
    assert research == Team(name="research", line=20)
    assert policy.teams.default_team() is inference
    assert policy.teams.teams_of("dan", frozenset({"search"})) == [inference]
    assert policy.admins.includes("ops", frozenset()) and not policy.admins.includes("bob", set())


def test_without_the_sections_nothing_changes() -> None:
    policy = parse_policy("version: 1\nteams:\nadmins:\nwindows:\n", "pool.yaml")
    assert not policy.teams.enabled and policy.admins == Admins() and policy.windows == ()


@pytest.mark.parametrize(
    ("text", "mib"),
    [("160GiB", 160 * 1024), ("160G", 160 * 1024), ("1.5TiB", 1536 * 1024), ("512MiB", 512),
     ("512 mib", 512), (160, 160 * 1024), (0.5, 512), (0, 0), ("10GB", 9537), ("1PiB", 2**30)],
)  # fmt: skip
def test_memory_sizes(text: object, mib: int) -> None:
    assert memory_mib(text, "x") == mib


def team(body: str) -> str:
    return "version: 1\nteams:\n  ml:\n" + "".join(f"    {line}\n" for line in body.splitlines())


# (text, line, words)
BAD = {
    "teams-number-name": (
        "version: 1\nteams:\n  7: {}\n",
        3,
        "teams: bad name '7'; expected a lower-case",
    ),
    "teams-upper-name": ("version: 1\nteams:\n  ML: {}\n", 3, "bad name 'ML'"),
    "teams-long-name": ("version: 1\nteams:\n  " + "a" * 64 + ": {}\n", 3, "bad name 'aaaa"),
    "teams-duplicate": (
        "version: 1\nteams:\n  ml: {}\n  cv: {}\n  ml: {}\n",
        5,
        "teams: duplicate key 'ml'",
    ),
    "teams-scalar": ("version: 1\nteams: 3\n", 2, "teams: expected a mapping of team name"),
    "team-list": (
        team("- members: [a]"),
        4,
        "team ml: expected a mapping of members, default, quota",
    ),
    "team-key": (team("member: [a]"), 4, "team ml: unknown key 'member' (did you mean 'members'?)"),
    "members-number": (
        team("members: [alice, 42]"),
        4,
        "team ml: members: expected user names or group:NAME (a Unix group), such as "
        "[alice, group:search], got 42",
    ),
    "members-space": (team("members: ['a b']"), 4, "bad member 'a b'"),
    "members-empty-group": (team("members: ['group:']"), 4, "bad member 'group:'"),
    "members-mapping": (team("members: {a: 1}"), 4, "members: expected a list of user names"),
    "members-twice": (team("members: [a, b, a]"), 4, "team ml: members: a is listed twice"),
    "default-text": (
        team("default: yes please"),
        4,
        "team ml: default: expected true or false, got 'yes please'",
    ),
    "two-defaults": (
        "version: 1\nteams:\n  a: {default: true}\n  b:\n    members: [x]\n    default: true\n",
        6,
        "team b: default: true, but team a (line 3) is the default already; "
        "expected at most one default team",
    ),
    "quota-text": (
        team("quota: lots"),
        4,
        "team ml: quota: expected a scope (nominal: {...}) or a list of scopes, got 'lots'",
    ),
    "quota-no-nominal": (
        team("quota:\n  borrowing-limit: {cards: 1}"),
        5,
        "team ml: quota: missing nominal",
    ),
    "scope-key": (
        team("quota: {nominal: {}, sites: x}"),
        4,
        "unknown key 'sites' (did you mean 'site'?)",
    ),
    "scope-in-list": (
        team("quota:\n  - site: x\n    nominal: {}\n  - 3"),
        7,
        "team ml: quota scope 2: expected a mapping of site, vendor",
    ),
    "scope-twice": (
        team("quota:\n  - {site: x, nominal: {}}\n  - {site: x, nominal: {cards: 1}}"),
        6,
        "team ml: quota scope 2: selects site x, as the scope at line 5 does",
    ),
    "vendor": (
        team("quota: {vendor: intel, nominal: {}}"),
        4,
        "unknown vendor 'intel'; expected nvidia or amd",
    ),
    "model-empty": (
        team("quota: {model: '', nominal: {}}"),
        4,
        "model: expected a part of a GPU model",
    ),
    "site-number": (
        team("quota: {site: 3, nominal: {}}"),
        4,
        "quota: site: expected a site name such as singapore, got 3",
    ),
    "site-long": (
        team("quota: {site: " + "s" * 201 + ", nominal: {}}"),
        4,
        "site: 201 characters; expected at most 200",
    ),
    "vector-list": (
        team("quota: {nominal: [1, 2]}"),
        4,
        "quota: nominal: expected a mapping of resource: amount",
    ),
    "resource": (
        team("quota:\n  nominal:\n    gpu-memroy: 1GiB"),
        6,
        "team ml: quota: nominal: unknown resource 'gpu-memroy' (did you mean 'gpu-memory'?); "
        "expected gpu-memory, cards, slices, a MIG GPU-instance profile (1g.10gb), "
        "an AMD compute mode (spx, dpx, tpx, qpx, cpx) or vf",
    ),
    "resource-profile": (team("quota: {nominal: {9g.9gb: 1}}"), 4, "unknown resource '9g.9gb'"),
    "resource-number-key": (team("quota: {nominal: {7: 1}}"), 4, "unknown resource '7'"),
    "resource-twice": (team("quota: {nominal: {cards: 1, CARDS: 2}}"), 4, "cards is given twice"),
    "cards-negative": (
        team("quota:\n  nominal:\n    cards: -1"),
        6,
        "nominal: cards: -1 is out of range; expected 0 to 1000000",
    ),
    "cards-float": (
        team("quota: {nominal: {cards: 1.5}}"),
        4,
        "cards: expected a whole number from 0 to 1000000",
    ),
    "cards-bool": (team("quota: {nominal: {cards: true}}"), 4, "got True"),
    "cards-huge": (
        team("quota: {nominal: {1g.10gb: 1000001}}"),
        4,
        "1g.10gb: 1000001 is out of range",
    ),
    "memory-unit": (
        team("quota: {nominal: {gpu-memory: 1 lots}}"),
        4,
        "gpu-memory: bad memory size '1 lots'; expected 160GiB, 1.5TiB, 512MiB, 160G",
    ),
    "memory-nan": (team("quota: {nominal: {gpu-memory: .nan}}"), 4, "nan is not a memory size"),
    "memory-negative": (team("quota: {nominal: {gpu-memory: -1}}"), 4, "-1 is not a memory size"),
    "memory-huge": (
        team("quota: {nominal: {gpu-memory: 2PiB}}"),
        4,
        "'2PiB' is too large; expected at most 1 PiB",
    ),
    "memory-very-huge": (
        team("quota: {nominal: {gpu-memory: " + "9" * 400 + "}}"),
        4,
        "is too large",
    ),
    "memory-inf": (team("quota: {nominal: {gpu-memory: .inf}}"), 4, "inf is too large"),
    "memory-bool": (team("quota: {nominal: {gpu-memory: no}}"), 4, "expected a memory size"),
    "lending-beyond-nominal": (
        team("quota:\n  nominal: {gpu-memory: 1}\n  lending-limit: {cards: 1}"),
        6,
        "team ml: quota: lending-limit names cards, which nominal does not; "
        "expected only resources nominal names (gpu-memory)",
    ),
    "borrowing-beyond-nominal": (
        team("quota:\n  nominal: {}\n  borrowing-limit: {cpx: 1}"),
        6,
        "borrowing-limit names cpx, which nominal does not",
    ),
    "admins-mapping": (
        "version: 1\nadmins: {ops: 1}\n",
        2,
        "admins: expected a list of user names",
    ),
    "admins-bool": (
        "version: 1\nadmins: [ops, true]\n",
        2,
        "admins: expected user names or group:NAME (a Unix group), such as "
        "[alice, group:search], got True",
    ),
}


@pytest.mark.parametrize(("text", "line", "words"), list(BAD.values()), ids=list(BAD))
def test_each_bad_input_is_one_line_at_its_line(text: str, line: int, words: str) -> None:
    exc = error_of(text)
    assert (exc.path, exc.line) == ("pool.yaml", line), str(exc)
    assert words in str(exc), str(exc)


def test_bounds_on_counts() -> None:
    many = "".join(f"  t{n}:\n" for n in range(1001))
    assert "1001 teams; expected at most 1000" in str(error_of("version: 1\nteams:\n" + many))
    members = ", ".join(f"u{n}" for n in range(1001))
    exc = error_of(team(f"members: [{members}]"))
    assert exc.line == 4 and "1001 entries; expected at most 1000" in str(exc)
    scopes = "".join(f"  - {{site: s{n}, nominal: {{}}}}\n" for n in range(65))
    exc = error_of(team("quota:\n" + scopes))
    assert exc.line == 5 and "65 scopes; expected at most 64" in str(exc)


# -- random documents: a policy or a SourceError at a line of the document ----------------

WORDS = ["inference", "training", "ml", "ML", "7", "", "gpu-memory", "cards", "slices",
         "1g.10gb", "cpx", "vf", "vendor", "site", "model", "nominal", "borrowing-limit",
         "lending-limit", "members", "default", "quota", "teams", "group:x", "group:", "alice",
         "a b", "160GiB", "1.5TiB", "1 lots", "mon-fri", "fri-mon", "sat,sun", "daily", "mon",
         "08:00-20:00", "20:00-08:00", "24:00-01:00", "08:00-08:00", "Asia/Singapore",
         "Europe/Berlin", "Mars/Base", "../etc", "name", "timezone", "days", "hours",
         "elastic", "enabled", "rules", "nvidia", "amd", "MI300X"]  # fmt: skip
SCALARS = st.one_of(
    st.sampled_from(WORDS),
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(WORDS), st.integers(0, 9)), inner, max_size=4),
    ),
    max_leaves=20,
)
TEAM = st.fixed_dictionaries(
    {},
    optional={
        "members": st.one_of(st.lists(st.sampled_from(WORDS), max_size=3), VALUES),
        "default": st.one_of(st.booleans(), VALUES),
        "quota": VALUES,
    },
)
WINDOW = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.sampled_from(["day", "night", "day", "Bad"]), VALUES),
        "timezone": st.one_of(st.sampled_from(["UTC", "Asia/Dubai", "Mars/Base"]), VALUES),
        "days": VALUES,
        "hours": VALUES,
        "teams": st.one_of(st.dictionaries(st.sampled_from(WORDS), VALUES, max_size=3), VALUES),
        "elastic": VALUES,
    },
)
# Near the format, so that many documents parse and the checks after parsing are reached.
AMOUNTS = st.one_of(
    st.sampled_from(["160GiB", "1.5TiB", "512MiB", "160G", "10GB", 0, 2.5]),
    st.integers(0, 10**7),
)
VECTOR = st.dictionaries(st.sampled_from(["gpu-memory", "cards", "1g.10gb", "cpx", "vf"]), AMOUNTS)
SCOPE = st.fixed_dictionaries(
    {"nominal": VECTOR},
    optional={
        "site": st.sampled_from(["singapore", "dubai"]),
        "vendor": st.sampled_from(["nvidia", "amd", "AMD"]),
        "borrowing-limit": VECTOR,
        "lending-limit": VECTOR,
    },
)
QUOTA = st.one_of(SCOPE, st.lists(SCOPE, max_size=3))
NEAR_TEAM = st.fixed_dictionaries(
    {},
    optional={
        "members": st.lists(st.sampled_from(["alice", "bob", "group:ml", "bad name"]), max_size=3),
        "default": st.booleans(),
        "quota": QUOTA,
    },
)
NEAR_WINDOW = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["day", "night", "weekend"]),
        "timezone": st.sampled_from(["UTC", "Asia/Dubai", "Europe/Berlin", "America/New_York"]),
    },
    optional={
        "days": st.sampled_from(["mon-fri", "fri-mon", "sat,sun", "daily", ["mon", "wed"]]),
        "hours": st.sampled_from(["08:00-20:00", "20:00-08:00", "00:00-24:00", "09:00-09:00"]),
        "teams": st.dictionaries(
            st.sampled_from(["inference", "training"]), st.fixed_dictionaries({"quota": QUOTA})
        ),
        "elastic": st.sampled_from([{"enabled": False}, {"rules": [{"vendor": "amd"}]}]),
    },
)
DOCUMENT = st.fixed_dictionaries(
    {"version": st.just(1)},
    optional={
        "admins": st.one_of(st.lists(st.sampled_from(["ops", "group:gpuadmin"])), VALUES),
        "teams": st.one_of(
            st.dictionaries(st.sampled_from(["inference", "training"]), NEAR_TEAM, max_size=2),
            st.dictionaries(st.sampled_from(WORDS), TEAM, max_size=3),
            VALUES,
        ),
        "windows": st.one_of(
            st.lists(NEAR_WINDOW, max_size=3), st.lists(WINDOW, max_size=3), VALUES
        ),
    },
)


@given(doc=DOCUMENT, flow=st.booleans())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_documents_parse_or_fail_at_a_line_of_the_document(doc: dict, flow: bool) -> None:
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=flow, width=60)
    try:
        policy = parse_policy(text, "pool.yaml")
    except SourceError as exc:
        message = str(exc)
        assert "\n" not in message, message
        assert exc.line is not None and 1 <= exc.line <= len(text.splitlines()), (message, text)
        return
    assert len(policy.teams.teams) <= 3 and len(policy.windows) <= 3
    assert sum(t.default for t in policy.teams.teams) <= 1
    names = {t.name for t in policy.teams.teams}
    scopes = [s for t in policy.teams.teams for s in t.quota]
    for window in policy.windows:
        assert set(window.teams) <= names and window.start_min != window.end_min
        scopes += [s for quota in window.teams.values() for s in quota]
    for scope in scopes:
        assert 1 <= scope.line <= len(text.splitlines())
        assert all(0 <= v <= 2**30 for v in scope.nominal.values())
        for limit in (scope.borrowing_limit, scope.lending_limit):
            assert set(limit or {}) <= set(scope.nominal)
