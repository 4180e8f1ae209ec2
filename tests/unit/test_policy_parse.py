"""The pool policy file: every key and default, and each bad input as one line naming
file:line and what was expected."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpupoolctl.errors import SourceError
from gpupoolctl.policy import ElasticRule, load_policy, parse_policy

ROOT = Path(__file__).resolve().parents[2]

FULL = """\
version: 1
elastic:
  enabled: true
  min-idle: 1h30m
  max-cards-per-pass: 8
  batch-window: 45
  backoff: 2d
  rules:
    - hosts: h100
      profiles: [1g.10gb, 2g.20gb, 3g.40gb, 7g.80gb]
      keep-whole: 2
    - vendor: AMD
      model: MI300X
      amd-modes: [SPX/NPS1, cpx/nps4]
    - model: L40S
      enabled: false
    - hosts: [sg-dgx*, "gpu[01-04]"]
      vendor: nvidia
"""


def error_of(text: str, source: str = "pool.yaml") -> SourceError:
    with pytest.raises(SourceError) as info:
        parse_policy(text, source)
    message = str(info.value)
    assert "\n" not in message, message
    return info.value


def elastic(body: str) -> str:
    return "version: 1\nelastic:\n" + textwrap.indent(textwrap.dedent(body), "  ")


def test_every_key_parses() -> None:
    policy = parse_policy(FULL, "pool.yaml")
    assert policy.source == "pool.yaml"
    e = policy.elastic
    assert e.enabled is True
    assert (e.min_idle_s, e.max_cards_per_pass, e.batch_window_s, e.backoff_s) == (
        5400.0,
        8,
        45.0,
        172800.0,
    )
    assert e.rules == (
        ElasticRule(
            line=9,
            hosts="h100",
            profiles=("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"),
            keep_whole=2,
        ),
        ElasticRule(line=12, vendor="amd", model="MI300X", amd_modes=("spx/nps1", "cpx/nps4")),
        ElasticRule(line=15, model="L40S", enabled=False),
        ElasticRule(line=17, hosts="sg-dgx*,gpu[01-04]", vendor="nvidia"),
    )


def test_a_written_section_is_on_with_the_default_limits() -> None:
    e = parse_policy(elastic("rules:\n  - vendor: nvidia\n")).elastic
    assert e.enabled is True
    assert (e.min_idle_s, e.max_cards_per_pass, e.batch_window_s, e.backoff_s) == (
        300.0,
        4,
        30.0,
        900.0,
    )
    assert e.rules == (ElasticRule(line=4, vendor="nvidia"),)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# only a comment\n",
        "---\n",
        "~\n",
        "version: 1\n",
        "version: '1'\n",
        "version: 1\nelastic:\n",
    ],
    ids=["empty", "comment", "document-marker", "null", "version", "version-text", "null-section"],
)
def test_a_file_that_says_nothing_is_a_static_policy(text: str) -> None:
    policy = parse_policy(text, "pool.yaml")
    assert policy.source == "pool.yaml"
    assert policy.elastic.enabled is False and policy.elastic.rules == ()


def test_enabled_false_keeps_the_rules_but_matches_nothing() -> None:
    policy = parse_policy(elastic("enabled: false\nrules:\n  - vendor: nvidia\n"))
    assert policy.elastic.enabled is False
    assert len(policy.elastic.rules) == 1
    assert policy.elastic.rule_for("h", "nvidia", "H100", lambda p, h: True) is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("1h30m", 5400.0), ("90", 90.0),
     ("0", 0.0), ("2.5", 2.5), ("0.5m", 30.0), ("1d2h", 93600.0), ("' 5M '", 300.0)],
)  # fmt: skip
def test_durations(value: str, seconds: float) -> None:
    assert parse_policy(elastic(f"min-idle: {value}\n")).elastic.min_idle_s == seconds


def test_merge_keys_share_rule_parts() -> None:
    text = elastic(
        """\
        rules:
          - &h100 {hosts: h100, profiles: [1g.10gb]}
          - <<: *h100
            keep-whole: 1
        """
    )
    first, second = parse_policy(text).elastic.rules
    assert first.profiles == second.profiles == ("1g.10gb",)
    assert (second.line, second.keep_whole) == (5, 1)


def test_profiles_are_checked_against_the_named_model_and_canonical() -> None:
    rules = parse_policy(
        elastic("rules:\n  - model: A100\n    profiles: [1g.5gb, 3c.3g.20gb]\n")
    ).elastic.rules
    assert rules[0].profiles == ("1g.5gb", "3g.20gb")  # a full-GI CI names its GI


# (text, line, words): the message must say what was wrong and what was expected.
BAD = {
    "version-missing": (
        "elastic:\n  enabled: true\n",
        1,
        "missing 'version'; expected 'version: 1'",
    ),
    "version-2": (
        "version: 2\n",
        1,
        "version: 2 is not supported; expected 1",
    ),
    "version-true": (
        "version: true\n",
        1,
        "version: True is not supported; expected 1",
    ),
    "version-v1": (
        "# c\nversion: v1\n",
        2,
        "version: 'v1' is not supported",
    ),
    "not-a-mapping": (
        "- a\n- b\n",
        1,
        "expected a mapping with version: 1",
    ),
    "unknown-section": (
        "version: 1\nelastc: {}\n",
        2,
        "unknown section 'elastc' (did you mean 'elastic'?); known: version, elastic, health, "
        "admins, teams, windows",
    ),
    "teams-list": (
        "version: 1\nteams:\n  - ml\n",
        3,
        "teams: expected a mapping of team name -> {members, default, quota}",
    ),
    "windows-mapping": (
        "version: 1\nelastic: {}\nwindows: {day: 1}\n",
        3,
        "windows: expected a list of windows (- name: ..., timezone: ...)",
    ),
    "health-key": (
        "version: 1\n\nhealth: {lost-after: 5m}\n",
        3,
        "health: unknown key 'lost-after'; known keys: node-dead-after, return-to-service",
    ),
    "health-dead-after-short": (
        "version: 1\nhealth:\n  node-dead-after: 1s\n",
        3,
        "health.node-dead-after: '1s' is too short; expected at least 5s",
    ),
    "health-dead-after-bad": (
        "version: 1\nhealth:\n  node-dead-after: soon\n",
        3,
        "health.node-dead-after: bad duration 'soon'",
    ),
    "health-dead-after-long": (
        "version: 1\nhealth:\n  node-dead-after: 2d\n",
        3,
        "health.node-dead-after: '2d' is too long; expected at most 1d",
    ),
    "health-return": (
        "version: 1\nhealth:\n  return-to-service: never\n",
        3,
        "health.return-to-service: 'never'; expected auto or manual",
    ),
    "health-list": (
        "version: 1\nhealth: [a]\n",
        2,
        "health: expected a mapping of node-dead-after, return-to-service",
    ),
    "duplicate": (
        "version: 1\nelastic: {}\nelastic: {}\n",
        3,
        "duplicate key 'elastic'",
    ),
    "section-list": (
        "version: 1\nelastic: [a]\n",
        2,
        "elastic: expected a mapping of enabled, min-idle",
    ),
    "section-key": (
        elastic("enabled: true\nmin_idle: 5m\n"),
        4,
        "elastic: unknown key 'min_idle' (did you mean 'min-idle'?); known keys: enabled, min-idle",
    ),
    "enabled-text": (
        elastic("enabled: yes please\n"),
        3,
        "elastic.enabled: expected true or false, got 'yes please'",
    ),
    "duration-unit": (
        elastic("min-idle: 5x\n"),
        3,
        "elastic.min-idle: bad duration '5x'; expected 30s, 5m, 1h, 1h30m",
    ),
    "duration-order": (
        elastic("backoff: 30m1h\n"),
        3,
        "elastic.backoff: bad duration '30m1h'",
    ),
    "duration-negative": (
        elastic("batch-window: -5\n"),
        3,
        "elastic.batch-window: -5 is not a duration",
    ),
    "duration-huge": (
        elastic("backoff: 1000d\n"),
        3,
        "elastic.backoff: '1000d' is too long; expected at most 7d",
    ),
    "duration-bigint": (
        elastic("min-idle: " + "9" * 400 + "\n"),
        3,
        "elastic.min-idle: 9999",
    ),
    "duration-nan": (
        elastic("min-idle: .nan\n"),
        3,
        "elastic.min-idle: nan is not a duration",
    ),
    "duration-inf": (
        elastic("min-idle: .inf\n"),
        3,
        "elastic.min-idle: inf is too long",
    ),
    "duration-bool": (
        elastic("min-idle: true\n"),
        3,
        "elastic.min-idle: expected a duration",
    ),
    "duration-list": (
        elastic("min-idle: [5m]\n"),
        3,
        "expected a duration (30s, 5m",
    ),
    "per-pass-zero": (
        elastic("max-cards-per-pass: 0\n"),
        3,
        "elastic.max-cards-per-pass: 0 is out of range; expected 1 to 1024",
    ),
    "per-pass-float": (
        elastic("max-cards-per-pass: 2.5\n"),
        3,
        "expected a whole number from 1 to 1024, got 2.5",
    ),
    "per-pass-huge": (
        elastic("max-cards-per-pass: 99999999999999999999\n"),
        3,
        "out of range; expected 1 to 1024",
    ),
    "rules-mapping": (
        elastic("rules: {hosts: h100}\n"),
        3,
        "elastic.rules: expected a list of rules",
    ),
    "rule-scalar": (
        elastic("rules:\n  - h100\n"),
        4,
        "elastic rule 1: expected a mapping of hosts, vendor",
    ),
    "rule-key": (
        elastic("rules:\n  - hosts: h100\n  - vendor: amd\n    amd_modes: [spx/nps1]\n"),
        6,
        "elastic rule 2: unknown key 'amd_modes' (did you mean 'amd-modes'?); known keys: hosts",
    ),
    "vendor": (
        elastic("rules:\n  - vendor: intel\n"),
        4,
        "elastic rule 1: unknown vendor 'intel'; expected nvidia or amd",
    ),
    "vendor-typo": (
        elastic("rules:\n  - vendor: nvidea\n"),
        4,
        "unknown vendor 'nvidea' (did you mean 'nvidia'?)",
    ),
    "model-empty": (
        elastic("rules:\n  - model: ''\n"),
        4,
        "elastic rule 1: model: expected a part of a GPU model",
    ),
    "model-long": (
        elastic("rules:\n  - model: " + "x" * 300 + "\n"),
        4,
        "model: 300 characters; expected at most 200",
    ),
    "model-no-mig": (
        elastic("rules:\n  - model: L40S\n"),
        4,
        "the catalog's L40S has no MIG profiles or AMD modes, so there is nothing to re-cut "
        "it into; expected enabled: false",
    ),
    "rule-enabled": (
        elastic("rules:\n  - model: H100\n    enabled: 1\n"),
        5,
        "elastic rule 1.enabled: expected true or false, got 1",
    ),
    "hosts-empty": (
        elastic("rules:\n  - hosts: ''\n"),
        4,
        "elastic rule 1: hosts: expected a host pattern",
    ),
    "hosts-empty-list": (
        elastic("rules:\n  - hosts: []\n"),
        4,
        "hosts: expected a host pattern such as h100",
    ),
    "hosts-number": (
        elastic("rules:\n  - hosts:\n    - h100\n    - 7\n"),
        6,
        "hosts: expected a host pattern such as h100, sg-dgx*, gpu[01-04] (or a list of "
        "them), got 7",
    ),
    "hosts-file": (
        elastic("rules:\n  - hosts: 'h100:!@drained.txt'\n"),
        4,
        "hosts: '!@drained.txt' reads a file",
    ),
    "hosts-regex": (
        elastic("rules:\n  - hosts: '~sg-(dgx'\n"),
        4,
        "hosts: bad regex '~sg-(dgx'",
    ),
    "hosts-long": (
        elastic("rules:\n  - hosts: " + "a" * 2000 + "\n"),
        4,
        "hosts: a pattern of 2000 characters; at most 1024",
    ),
    "profile-malformed": (
        elastic("rules:\n  - vendor: nvidia\n    profiles:\n      - 1g.10gb\n      - 1g10gb\n"),
        7,
        "elastic rule 1: profiles: malformed MIG profile '1g10gb'",
    ),
    "profile-unknown": (
        elastic("rules:\n  - profiles: [9g.90gb]\n"),
        4,
        "profiles: 9g.90gb is not a MIG profile of any catalog model; known: 1g.5gb",
    ),
    "profile-of-other-model": (
        elastic("rules:\n  - model: H100\n    profiles: [1g.5gb]\n"),
        5,
        "profiles: 1g.5gb is not a MIG profile of the catalog's H100; known: 1g.10gb",
    ),
    "profile-ci": (
        elastic("rules:\n  - profiles: [1c.3g.40gb]\n"),
        4,
        "1c.3g.40gb is a compute-instance profile; expected the GPU-instance profile it "
        "lives in (3g.40gb)",
    ),
    "profile-twice": (
        elastic("rules:\n  - profiles: [1g.10gb, 1g.10gb]\n"),
        4,
        "1g.10gb is listed twice",
    ),
    "profile-empty-list": (
        elastic("rules:\n  - profiles: []\n"),
        4,
        "profiles: an empty list allows nothing",
    ),
    "profile-number": (
        elastic("rules:\n  - profiles: [7]\n"),
        4,
        "profiles: expected MIG GPU-instance profiles such as 1g.10gb, 3g.40gb, got 7",
    ),
    "profiles-for-amd": (
        elastic("rules:\n  - vendor: amd\n    profiles: [1g.10gb]\n"),
        5,
        "profiles are NVIDIA MIG profiles but the rule selects vendor amd; expected amd-modes",
    ),
    "modes-for-nvidia": (
        elastic("rules:\n  - vendor: nvidia\n    amd-modes: [spx/nps1]\n"),
        5,
        "amd-modes are AMD partition modes but the rule selects vendor nvidia; expected profiles",
    ),
    "mode-malformed": (
        elastic("rules:\n  - amd-modes: [spx]\n"),
        4,
        "amd-modes: malformed AMD mode 'spx'; expected compute/memory",
    ),
    "mode-unknown-name": (
        elastic("rules:\n  - amd-modes: [xpx/nps1]\n"),
        4,
        "malformed AMD mode 'xpx/nps1'",
    ),
    "mode-no-product": (
        elastic("rules:\n  - amd-modes:\n      - spx/nps1\n      - spx/nps4\n"),
        6,
        "amd-modes: spx/nps4 is not allowed on any AMD product; known: spx/nps1",
    ),
    "mode-twice": (
        elastic("rules:\n  - amd-modes: [cpx/nps4, CPX/NPS4]\n"),
        4,
        "cpx/nps4 is listed twice",
    ),
    "keep-whole-negative": (
        elastic("rules:\n  - hosts: h100\n    keep-whole: -1\n"),
        5,
        "elastic rule 1: keep-whole: -1 is out of range; expected 0 to 64",
    ),
    "keep-whole-text": (
        elastic("rules:\n  - hosts: h100\n    keep-whole: two\n"),
        5,
        "keep-whole: expected a whole number from 0 to 64, got 'two'",
    ),
    "too-many-rules": (
        elastic("rules:\n" + "  - {vendor: nvidia}\n" * 1001),
        4,
        "elastic.rules: 1001 rules; expected at most 1000",
    ),
    "bad-yaml": (
        elastic("rules: [\n"),
        4,
        "not valid YAML",
    ),
    "tab": (
        "version: 1\nelastic:\n\tenabled: true\n",
        3,
        "not valid YAML",
    ),
    "bad-tag": (
        elastic("max-cards-per-pass: !!int x\n"),
        3,
        "bad value: 'x' is not a valid int",
    ),
}


@pytest.mark.parametrize(("text", "line", "words"), list(BAD.values()), ids=list(BAD))
def test_each_bad_input_is_one_line_at_its_line(text: str, line: int, words: str) -> None:
    exc = error_of(text)
    assert (exc.path, exc.line) == ("pool.yaml", line), str(exc)
    assert str(exc).startswith(f"pool.yaml:{line}: "), str(exc)
    assert words in str(exc), str(exc)


def test_the_first_bad_key_in_file_order_is_named() -> None:
    exc = error_of("version: 1\nwindow: {}\nteam: {}\n")
    assert exc.line == 2 and "'window'" in str(exc)


def test_load_reads_a_file_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(FULL)
    assert load_policy(path).source == str(path)
    assert len(load_policy(str(path)).elastic.rules) == 4
    path.write_text("version: 1\nelastic:\n  backoff: soon\n")
    with pytest.raises(SourceError) as info:
        load_policy(path)
    assert str(info.value).startswith(f"{path}:3: elastic.backoff: bad duration 'soon'")


def test_load_refuses_a_folder_and_bytes_that_are_not_text(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="is a folder"):
        load_policy(tmp_path)
    (tmp_path / "pool.yaml").write_bytes(b"version: 1\n\xff\n")
    with pytest.raises(SourceError) as info:
        load_policy(tmp_path / "pool.yaml")
    assert info.value.line == 2 and "not UTF-8" in str(info.value)


def test_the_bundled_example_is_valid_and_says_what_the_brief_asks() -> None:
    policy = load_policy(ROOT / "playbooks" / "pool.yaml")
    rules = {rule.hosts: rule for rule in policy.elastic.rules}
    assert policy.elastic.enabled is True
    assert set(rules) == {"h100", "a100", "mi300x", "l40s"}
    assert rules["h100"].keep_whole == 1 and rules["h100"].profiles
    assert rules["a100"].enabled and rules["a100"].profiles
    assert rules["mi300x"].enabled and rules["mi300x"].amd_modes
    assert rules["l40s"].enabled is False


def test_health_section_values_and_defaults() -> None:
    assert parse_policy("version: 1\n", "pool.yaml").health.node_dead_after_s == 90
    policy = parse_policy(
        "version: 1\nhealth:\n  node-dead-after: 2m\n  return-to-service: manual\n", "pool.yaml"
    )
    assert policy.health.node_dead_after_s == 120
    assert policy.health.return_to_service == "manual"
    assert policy.as_dict()["health"] == {"node_dead_after_s": 120, "return_to_service": "manual"}
    assert parse_policy("version: 1\nhealth:\n", "pool.yaml").health.node_dead_after_s == 90
