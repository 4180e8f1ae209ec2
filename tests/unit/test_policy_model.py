"""The pool policy's values: which rule makes a card elastic (first match wins)."""

from __future__ import annotations

import fnmatch

from gpupoolctl.policy import ElasticPolicy, ElasticRule, PoolPolicy

GROUPS = {"h100": {"sg-dgx01", "sg-dgx02"}, "mi300x": {"dxb-mi300x-01"}}


def in_hosts(pattern: str, host: str) -> bool:
    """A stand-in for the caller's inventory: group names, else globs over host names."""
    return any(
        host in GROUPS.get(part, ()) or fnmatch.fnmatchcase(host, part)
        for part in pattern.split(",")
    )


def never(pattern: str, host: str) -> bool:
    raise AssertionError(f"in_hosts must not be asked ({pattern}, {host})")


def test_no_file_is_a_static_pool() -> None:
    policy = PoolPolicy()
    assert policy.source is None
    assert policy.elastic.enabled is False
    assert policy.elastic.rules == ()
    assert policy.elastic.rule_for("sg-dgx01", "nvidia", "NVIDIA H100 80GB HBM3", in_hosts) is None


def test_defaults_are_the_documented_ones() -> None:
    elastic = ElasticPolicy()
    assert (elastic.min_idle_s, elastic.max_cards_per_pass) == (300.0, 4)
    assert (elastic.batch_window_s, elastic.backoff_s) == (30.0, 900.0)
    rule = ElasticRule(line=3)
    assert (rule.hosts, rule.vendor, rule.model, rule.profiles, rule.amd_modes) == (None,) * 5
    assert rule.enabled is True and rule.keep_whole == 0


def test_first_matching_rule_wins() -> None:
    first = ElasticRule(line=5, hosts="h100", profiles=("1g.10gb",))
    second = ElasticRule(line=9, vendor="nvidia", profiles=("3g.40gb",))
    policy = ElasticPolicy(enabled=True, rules=(first, second))
    assert policy.rule_for("sg-dgx01", "nvidia", "NVIDIA H100 80GB HBM3", in_hosts) is first
    assert policy.rule_for("sg-a100-01", "nvidia", "NVIDIA A100-PCIE-40GB", in_hosts) is second
    assert policy.rule_for("dxb-mi300x-01", "amd", "AMD Instinct MI300X", in_hosts) is None


def test_a_matching_disabled_rule_hides_the_rules_after_it() -> None:
    off = ElasticRule(line=4, model="L40S", enabled=False)
    anything = ElasticRule(line=6)
    policy = ElasticPolicy(enabled=True, rules=(off, anything))
    assert policy.rule_for("dxb-l40s-01", "nvidia", "NVIDIA L40S", in_hosts) is None
    assert policy.rule_for("sg-dgx01", "nvidia", "NVIDIA H100", in_hosts) is anything


def test_a_disabled_section_matches_nothing() -> None:
    policy = ElasticPolicy(enabled=False, rules=(ElasticRule(line=4),))
    assert policy.rule_for("sg-dgx01", "nvidia", "NVIDIA H100", never) is None


def test_model_is_a_case_insensitive_part_and_vendor_is_exact() -> None:
    rule = ElasticRule(line=2, vendor="nvidia", model="h100")
    assert rule.matches("x", "NVIDIA", "NVIDIA H100 80GB HBM3", in_hosts)
    assert not rule.matches("x", "nvidia", "NVIDIA A100-PCIE-40GB", in_hosts)
    assert not rule.matches("x", "amd", "H100", in_hosts)
    # What a card does not say, a rule that asks for it cannot match.
    assert not rule.matches("x", None, "NVIDIA H100", in_hosts)
    assert not rule.matches("x", "nvidia", None, in_hosts)
    assert ElasticRule(line=2).matches("x", None, None, never)


def test_hosts_go_through_the_callers_resolver_last() -> None:
    asked: list[tuple[str, str]] = []

    def recording(pattern: str, host: str) -> bool:
        asked.append((pattern, host))
        return in_hosts(pattern, host)

    rule = ElasticRule(line=2, hosts="h100", vendor="nvidia")
    assert rule.matches("sg-dgx02", "nvidia", "H100", recording)
    assert not rule.matches("sg-a100-01", "nvidia", "A100", recording)
    assert not rule.matches("sg-dgx02", "amd", "MI300X", recording)  # vendor decided it
    assert asked == [("h100", "sg-dgx02"), ("h100", "sg-a100-01")]


def test_allows_profile_and_mode() -> None:
    rule = ElasticRule(line=1, profiles=("1g.10gb",), amd_modes=("cpx/nps4",))
    assert rule.allows_profile("1g.10gb") and not rule.allows_profile("3g.40gb")
    assert rule.allows_amd_mode("CPX", "NPS4") and not rule.allows_amd_mode("SPX", "NPS1")
    assert ElasticRule(line=1).allows_profile("7g.80gb")
    assert ElasticRule(line=1).allows_amd_mode("SPX", "NPS1")


def test_as_dict_is_plain_data() -> None:
    rule = ElasticRule(line=7, hosts="h100", profiles=("1g.10gb",), keep_whole=1)
    data = PoolPolicy("pool.yaml", ElasticPolicy(enabled=True, rules=(rule,))).as_dict()
    assert data["file"] == "pool.yaml"
    assert data["elastic"]["enabled"] is True
    assert data["elastic"]["rules"] == [
        {
            "line": 7,
            "hosts": "h100",
            "vendor": None,
            "model": None,
            "enabled": True,
            "profiles": ["1g.10gb"],
            "amd_modes": None,
            "keep_whole": 1,
        }
    ]
