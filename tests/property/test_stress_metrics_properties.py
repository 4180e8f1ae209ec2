"""Properties of the stress numbers: histogram percentiles, merging, level summaries, error
normalisation, result-file round trips and tolerance text."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.stress.compare import Tolerances, format_tolerances, parse_tolerances
from gpupoolctl.stress.histogram import LatencyHistogram, distribution
from gpupoolctl.stress.metrics import normalize_error, summarize_level
from gpupoolctl.stress.model import (
    PHASES,
    Distribution,
    KneePoint,
    Knees,
    LevelResult,
    RunResult,
    Sample,
    ThresholdCheck,
)
from gpupoolctl.stress.result import dumps, from_dict, to_dict

REL = 1e-3  # HdrHistogram with 3 significant digits
US = 1e-6  # values are stored in whole microseconds

latencies = st.lists(
    st.floats(min_value=0.0, max_value=24 * 3600.0, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=200,
)


@given(latencies)
def test_distribution_stats_are_ordered_and_bounded(values):
    dist = distribution(values)
    stats = [dist.p50, dist.p90, dist.p95, dist.p99, dist.max]
    assert all(s is not None for s in stats)
    assert stats == sorted(stats)
    assert dist.max == max(values)
    assert dist.count == len(values)
    assert dist.mean is not None and min(values) <= dist.mean * (1 + 1e-12) + 1e-12
    assert dist.p50 is not None and dist.p50 >= min(values) * (1 - REL) - US


@given(latencies, st.sampled_from([50.0, 90.0, 95.0, 99.0]))
def test_percentile_is_a_recorded_value_within_precision(values, p):
    dist = distribution(values)
    got = dist.get(f"p{p:g}")
    assert got is not None
    ranked = sorted(values)
    # The nearest rank HdrHistogram uses, give or take one, and its bucket width.
    rank = max(1, int(p * len(ranked) / 100 + 0.5))
    lo, hi = ranked[max(0, rank - 2)], ranked[min(len(ranked) - 1, rank)]
    assert lo * (1 - REL) - US <= got <= hi * (1 + REL) + US


@settings(deadline=None)  # two large histograms: over 200 ms on a loaded CI machine
@given(latencies, latencies)
def test_merge_is_the_histogram_of_everything(first, second):
    merged = LatencyHistogram.decode(distribution(first).hist or "")
    merged.merge(LatencyHistogram.decode(distribution(second).hist or ""))
    together = LatencyHistogram()
    together.record_all(first + second)
    assert merged.count == together.count
    for p in (0.0, 50.0, 99.0, 100.0):
        assert merged.percentile(p) == together.percentile(p)


# -- level summaries ----------------------------------------------------------------------------

T0 = 1_000.0


@st.composite
def samples(draw) -> Sample:
    submitted = T0 + draw(st.floats(min_value=0, max_value=30))
    started = ended = None
    ok = False
    outcome = draw(st.sampled_from(["ok", "failed", "refused", "timed out", "in flight"]))
    if outcome in ("ok", "failed", "timed out"):
        started = submitted + draw(st.floats(min_value=0, max_value=5))
    if outcome in ("ok", "failed"):
        ended = started + draw(st.floats(min_value=0, max_value=5))
    ok = outcome == "ok"
    error = None if outcome in ("ok", "in flight") else f"{outcome} j-{draw(st.integers(0, 99))}"
    phases = draw(st.dictionaries(st.sampled_from(PHASES), st.floats(0, 10), max_size=4))
    return Sample(
        level=2,
        submitted=submitted,
        started=started,
        ended=ended,
        ok=ok,
        error=error,
        phases=phases,
        harness_s=draw(st.floats(0, 0.01)),
    )


def _summary(items: list[Sample]) -> LevelResult:
    return summarize_level(
        items, level=2, model="closed", warmup_s=10, hold_s=10, window=(T0 + 10, T0 + 20)
    )


@given(st.lists(samples(), max_size=60), st.randoms(use_true_random=False))
def test_summary_invariants_and_order_independence(items, rnd: random.Random):
    level = _summary(items)
    inside = [s for s in items if T0 + 10 <= s.submitted < T0 + 20]
    assert level.submitted == len(inside)
    assert level.completed + level.failed <= level.submitted
    assert 0.0 <= level.failure_rate <= 1.0
    # Each ok job adds at most one whole job; all ended inside count at least their share.
    ok = [s for s in items if s.ok and s.ended is not None]
    touching = [s for s in ok if s.ended >= T0 + 10 and s.submitted < T0 + 20]
    assert 0.0 <= level.throughput * level.window_s <= len(touching) + 1e-9
    assert sum(level.errors.values()) <= level.failed
    assert len(level.errors) <= 5
    assert set(level.phases) <= set(PHASES)
    assert level.queue_wait.count <= level.submitted
    shuffled = list(items)
    rnd.shuffle(shuffled)
    again = _summary(shuffled)
    assert (again.submitted, again.completed, again.failed, again.errors) == (
        level.submitted,
        level.completed,
        level.failed,
        level.errors,
    )
    assert again.queue_wait.p95 == level.queue_wait.p95


# -- error normalisation --------------------------------------------------------------------------


@given(st.text(max_size=300))
def test_normalize_error_is_idempotent_and_short(message):
    once = normalize_error(message)
    assert normalize_error(once) == once
    assert len(once) <= 200
    assert not any(ch.isdigit() and ch.isascii() for ch in once)


@given(st.integers(0, 10**9), st.integers(0, 10**9), st.floats(0, 1e6))
def test_messages_differing_only_in_numbers_normalise_alike(a, b, seconds):
    template = "job j-{} on node-{} timed out after {} s"
    assert normalize_error(template.format(a, b, seconds)) == normalize_error(
        template.format(7, 1, 600.0)
    )


# -- result files ---------------------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
maybe = st.none() | finite
words = st.text(max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | finite | words,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3),
    max_leaves=8,
)
counts = st.integers(min_value=0, max_value=10**9)
distributions = st.builds(
    Distribution,
    count=counts,
    mean=maybe,
    p50=maybe,
    p90=maybe,
    p95=maybe,
    p99=maybe,
    max=maybe,
    hist=st.none() | words,
)
level_results = st.builds(
    LevelResult,
    level=finite,
    model=st.sampled_from(["closed", "open"]),
    warmup_s=finite,
    hold_s=finite,
    window_s=finite,
    submitted=counts,
    completed=counts,
    failed=counts,
    dropped=counts,
    throughput=finite,
    failure_rate=finite,
    queue_wait=distributions,
    turnaround=distributions,
    phases=st.dictionaries(st.sampled_from(PHASES), finite),
    harness_s=finite,
    errors=st.dictionaries(words, counts, max_size=5),
    thresholds=st.lists(st.builds(ThresholdCheck, expr=words, value=maybe, ok=st.booleans())),
)
knee_points = st.builds(
    KneePoint,
    method=words,
    meaning=words,
    level=maybe,
    value=maybe,
    note=st.none() | words,
    extra=st.dictionaries(words, json_values, max_size=3),
)
run_results = st.builds(
    RunResult,
    scenario=st.dictionaries(words, json_values, max_size=4),
    levels=st.lists(level_results, max_size=4),
    knees=st.none() | st.builds(Knees, kneedle=knee_points, usl=knee_points, latency=knee_points),
    backend=words,
    transport=st.none() | words,
    tool_version=words,
    created=words,
    host=words,
    commit=st.none() | words,
    stopped_early=st.none() | words,
)


@settings(max_examples=150)
@given(run_results)
def test_result_round_trips_through_json(result):
    text = dumps(result)
    back = from_dict(json.loads(text), "run.json")
    assert back == result
    assert dumps(back) == text
    assert to_dict(back) == json.loads(text)


# -- tolerance text -------------------------------------------------------------------------

percents = st.integers(0, 500).map(lambda k: k / 100)


@given(
    st.builds(
        Tolerances,
        throughput=percents,
        p95=percents,
        p95_abs_s=st.integers(0, 10_000).map(lambda ms: ms / 1000),
        failure_rate=percents,
        knee=percents,
        kneedle_steps=st.integers(0, 10),
    )
)
def test_tolerances_text_round_trip(tolerances):
    assert parse_tolerances(format_tolerances(tolerances)) == tolerances
