"""The pool policy reader fed arbitrary YAML-ish text and damaged copies of the bundled
example: it answers a policy or one line naming the file (SourceError/UsageError), never
another exception, never a traceback, in bounded time."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.policy import PoolPolicy, load_policy, parse_policy
from tests.hostile import alias_bomb
from tests.property.test_bad_input_readers import HOSTILE, check, mutations

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "playbooks" / "pool.yaml").read_bytes()

FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

KEYS = ["version", "elastic", "enabled", "min-idle", "max-cards-per-pass", "batch-window",
        "backoff", "rules", "hosts", "vendor", "model", "profiles", "amd-modes", "keep-whole",
        "teams", "windows", "health", "node-dead-after", "return-to-service", "<<",
        "x"]  # fmt: skip
WORDS = ["1", "0", "-1", "1e400", ".nan", "true", "null", "~", "5m", "1h30m", "30m1h", "nvidia",
         "amd", "H100", "L40S", "1g.10gb", "1c.3g.40gb", "9g.9gb", "spx/nps1", "cpx/nps4",
         "spx/nps4", "h100", "'@f'", "'~('", "[]", "{}", "[1g.10gb, 2g.20gb]", "&a x", "*a",
         "!!int x", "'" + "9" * 300 + "'", "auto", "manual", "90s", "4s"]  # fmt: skip


def lines() -> st.SearchStrategy[str]:
    indent = st.sampled_from(["", "  ", "    ", "      ", "- ", "  - ", "    - ", "\t"])
    pair = st.tuples(indent, st.sampled_from(KEYS), st.sampled_from([": ", ":", " "]),
                     st.sampled_from([*WORDS, ""]))  # fmt: skip
    return st.one_of(pair.map("".join), st.text(max_size=20))


yamlish = st.lists(lines(), max_size=25).map(lambda parts: "\n".join(parts) + "\n")


# Documents with the file's own shape, each value good or bad: many parse, many do not.
VALUES = st.one_of(st.sampled_from([0, 1, 4, -1, 2.5, 10**30, True, None, "5m", "1h30m", "x",
                                    "2d", "8d", [], {}, "nvidia", "amd"]),
                   st.integers(-5, 2000), st.floats(allow_nan=True))  # fmt: skip
RULE = st.dictionaries(
    st.sampled_from(
        ["hosts", "vendor", "model", "enabled", "profiles", "amd-modes", "keep-whole", "hots"]
    ),
    st.one_of(
        VALUES,
        st.sampled_from(
            [
                "h100",
                ["a100", "sg-*"],
                "nvidia",
                "amd",
                "H100",
                "A100",
                "MI300X",
                "L40S",
                ["1g.10gb", "3g.40gb"],
                ["1g.5gb"],
                ["spx/nps1", "cpx/nps4"],
                ["spx/nps4"],
                "1g.10gb",
                False,
                2,
            ]
        ),
    ),
)
SECTION = st.fixed_dictionaries(
    {},
    optional={
        "enabled": st.one_of(st.booleans(), VALUES),
        "min-idle": VALUES,
        "max-cards-per-pass": VALUES,
        "batch-window": VALUES,
        "backoff": VALUES,
        "rules": st.one_of(st.lists(RULE, max_size=4), VALUES),
    },
)
DOCUMENT = st.fixed_dictionaries(
    {},
    optional={
        "version": st.sampled_from([1, 1, 1, 2, "1", "v1", None]),
        "elastic": st.one_of(SECTION, VALUES),
        "health": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "node-dead-after": VALUES,
                    "return-to-service": st.sampled_from(["auto", "manual", "never", 1, None]),
                },
            ),
            VALUES,
        ),
        "teams": st.just({}),
    },
)
shaped = DOCUMENT.map(lambda doc: yaml.safe_dump(doc, sort_keys=False))


def outcome(text: str) -> PoolPolicy | None:
    """The policy, or None after checking the error is one line naming the source."""
    try:
        return parse_policy(text, "pool.yaml")
    except (SourceError, UsageError) as exc:
        message = str(exc)
        assert "\n" not in message, message
        assert message.startswith("pool.yaml"), message
        return None


@given(text=st.one_of(shaped, yamlish))
@FUZZ
def test_yamlish_text_is_a_policy_or_one_line(text: str) -> None:
    policy = outcome(text)
    if policy is not None:
        # Whatever was accepted is within the documented bounds.
        e = policy.elastic
        assert 0 <= e.min_idle_s <= 7 * 86400 and 0 <= e.backoff_s <= 7 * 86400
        assert 0 <= e.batch_window_s <= 86400 and 1 <= e.max_cards_per_pass <= 1024
        assert all(0 <= rule.keep_whole <= 64 and rule.line >= 1 for rule in e.rules)
        h = policy.health
        assert 5 <= h.node_dead_after_s <= 86400 and h.return_to_service in ("auto", "manual")


@given(text=yamlish.map(lambda body: "version: 1\nelastic:\n  rules:\n" + body))
@FUZZ
def test_rule_bodies_are_a_policy_or_one_line(text: str) -> None:
    outcome(text)


@given(text=st.text(max_size=400))
@FUZZ
def test_any_text_is_a_policy_or_one_line(text: str) -> None:
    outcome(text)


@given(data=st.data())
@FUZZ
def test_damaged_copies_of_the_example_read_from_a_file(data: st.DataObject) -> None:
    check(load_policy, "pool.yaml", data.draw(mutations(EXAMPLE)))


@pytest.mark.parametrize("data", [*HOSTILE, alias_bomb()], ids=range(len(HOSTILE) + 1))
def test_each_hostile_document_is_one_line(data: bytes) -> None:
    check(load_policy, "pool.yaml", data)


def test_an_alias_bomb_under_elastic_is_refused_with_its_line() -> None:
    bomb = alias_bomb().decode().replace("all:\n  vars:\n", "version: 1\nelastic:\n  x:\n")
    with pytest.raises(SourceError) as info:
        parse_policy(bomb, "pool.yaml")
    assert "aliases expand to more than" in str(info.value)
    assert info.value.line is not None and info.value.line > 3
