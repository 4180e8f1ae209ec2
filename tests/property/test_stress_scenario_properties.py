"""Properties of the scenario parsers: level ranges, the list form's round trip, thresholds
and the scenario's dict round trip; arbitrary text only ever gives a UsageError."""

from __future__ import annotations

import json
import math
from itertools import pairwise

from hypothesis import assume, given
from hypothesis import strategies as st

from gpupoolctl.errors import UsageError
from gpupoolctl.stress.model import METRICS
from gpupoolctl.stress.scenario import (
    MAX_LEVELS,
    RequestShape,
    Scenario,
    Workload,
    check_levels,
    format_levels,
    parse_levels,
    scenario_from_dict,
)
from gpupoolctl.stress.thresholds import (
    DURATION_UNITS,
    OPS,
    metric_family,
    parse_threshold,
)

positive = st.floats(min_value=0.001, max_value=1000, allow_nan=False, allow_infinity=False)


def text_of(value: float) -> str:
    return repr(float(value))


@given(start=positive, span=st.floats(min_value=0, max_value=1000), factor=st.floats(1.01, 10))
def test_geometric_levels(start: float, span: float, factor: float) -> None:
    stop = start + span
    try:
        levels = parse_levels(f"{text_of(start)}..{text_of(stop)}x{text_of(factor)}")
    except UsageError as exc:
        assert "at most 64" in str(exc) or "too small" in str(exc)
        return
    assert levels[0] == start
    assert 1 <= len(levels) <= MAX_LEVELS
    assert all(b > a for a, b in pairwise(levels))
    assert all(0 < v <= stop for v in levels)
    # The range ends at the last grid value that does not pass stop.
    assert levels[-1] * factor > stop * (1 - 1e-9)


@given(start=positive, span=st.floats(min_value=0, max_value=1000), step=positive)
def test_linear_levels(start: float, span: float, step: float) -> None:
    stop = start + span
    try:
        levels = parse_levels(f"{text_of(start)}..{text_of(stop)}+{text_of(step)}")
    except UsageError as exc:
        assert "at most 64" in str(exc) or "too small" in str(exc)
        return
    assert levels[0] == start
    assert 1 <= len(levels) <= MAX_LEVELS
    assert all(b > a for a, b in pairwise(levels))
    assert all(0 < v <= stop for v in levels)
    assert levels[-1] + step > stop * (1 - 1e-9)
    if len(levels) > 1:
        gaps = [b - a for a, b in pairwise(levels)]
        assert all(math.isclose(g, step, rel_tol=1e-6, abs_tol=1e-9) for g in gaps)


@given(
    start=st.integers(1, 64),
    stop=st.integers(1, 1024),
    factor=st.integers(2, 8),
    closed=st.booleans(),
)
def test_integer_ranges_suit_the_closed_model(
    start: int, stop: int, factor: int, closed: bool
) -> None:
    assume(start <= stop)
    form = f"{start}..{stop}x{factor}" if closed else f"{start}..{stop}+{factor}"
    try:
        levels = parse_levels(form)
    except UsageError as exc:
        assert "at most 64" in str(exc)
        return
    assert check_levels(levels, "closed") == levels
    assert levels[0] == start


@given(st.lists(positive, min_size=1, max_size=MAX_LEVELS, unique=True))
def test_format_then_parse_gives_the_list_back(values: list[float]) -> None:
    levels = tuple(sorted(values))
    assert parse_levels(format_levels(levels)) == levels


@given(st.text(max_size=40))
def test_parse_levels_only_raises_usage_errors(text: str) -> None:
    try:
        levels = parse_levels(text)
    except UsageError:
        return
    assert 1 <= len(levels) <= MAX_LEVELS
    assert levels[0] > 0 and all(b > a for a, b in pairwise(levels))


@given(st.text(max_size=40))
def test_parse_threshold_only_raises_usage_errors(text: str) -> None:
    try:
        threshold = parse_threshold(text)
    except UsageError:
        return
    assert threshold.metric in METRICS and threshold.op in OPS
    assert threshold.value >= 0


def _unit_for(metric: str) -> st.SearchStrategy[tuple[str, float]]:
    family = metric_family(metric)
    if family == "duration":
        return st.sampled_from(sorted(DURATION_UNITS.items()))
    if family == "rate":
        return st.sampled_from([("%", 0.01), ("", 1.0)])
    if family == "throughput":
        return st.sampled_from([("/s", 1.0), ("", 1.0)])
    return st.just(("", 1.0))


@given(data=st.data(), metric=st.sampled_from(METRICS), op=st.sampled_from(list(OPS)))
def test_threshold_values_scale_by_unit(data: st.DataObject, metric: str, op: str) -> None:
    unit, scale = data.draw(_unit_for(metric))
    top = 1.0 if (metric_family(metric) == "rate" and unit == "") else 100.0
    number = data.draw(st.floats(min_value=0, max_value=top, allow_nan=False))
    threshold = parse_threshold(f"{metric} {op} {number!r}{unit}")
    assert (threshold.metric, threshold.op) == (metric, op)
    assert math.isclose(threshold.value, number * scale, rel_tol=1e-12, abs_tol=1e-15)
    measured = data.draw(st.floats(min_value=0, max_value=1e4, allow_nan=False))
    assert threshold.holds(measured) == OPS[op](measured, threshold.value)


scenarios = st.builds(
    Scenario,
    name=st.text(alphabet="abcdefgh-", min_size=1, max_size=12),
    model=st.just("closed"),
    levels=st.lists(st.integers(1, 1024), min_size=1, max_size=10, unique=True).map(
        lambda v: tuple(sorted(v))
    ),
    warmup_s=st.floats(0, 60),
    hold_s=st.floats(0.1, 600),
    drain_s=st.floats(0, 600),
    job_timeout_s=st.floats(3601, 86400),
    workload=st.one_of(
        st.builds(Workload, st.just("sim"), st.fixed_dictionaries({"work_s": st.floats(0.1, 10)})),
        st.builds(
            Workload,
            st.just("cmd"),
            st.fixed_dictionaries(
                {
                    "argv": st.builds(
                        lambda head, rest: [head, *rest],
                        st.text(alphabet="abc-'", min_size=1),
                        st.lists(st.text(alphabet="abc -'\"$"), max_size=3),
                    )
                }
            ),
        ),
    ),
    requests=st.lists(
        st.builds(
            RequestShape,
            weight=st.floats(0.1, 100),
            gpus=st.integers(1, 8),
            mem=st.sampled_from([None, "10G", "20GiB"]),
            priority=st.sampled_from(["low", "normal", "high", "0", "100"]),
            same_node=st.booleans(),
        ),
        min_size=1,
        max_size=4,
    ).map(tuple),
    thresholds=st.lists(
        st.sampled_from(["queue_wait.p95 < 5s", "failure_rate < 1%", "throughput >= 2/s"]),
        max_size=3,
    ).map(lambda exprs: tuple(parse_threshold(e) for e in exprs)),
    stop_after_breaks=st.integers(1, 64),
    seed=st.integers(0, 2**32),
    policy=st.sampled_from(["best-fit", "spread", "topology"]),
    poll_s=st.floats(0.01, 60),
)


@given(scenarios)
def test_scenario_dict_round_trip(scenario: Scenario) -> None:
    data = json.loads(json.dumps(scenario.to_dict()))
    assert scenario_from_dict(data) == scenario
