"""Baseline comparison: what regresses, what does not, and tolerance parsing."""

from __future__ import annotations

import copy

import pytest

from gpupoolctl.errors import ExitCode, GpupoolError, UsageError
from gpupoolctl.stress.compare import (
    TOLERANCE_KEYS,
    Comparison,
    ComparisonRow,
    NotComparable,
    Tolerances,
    compare,
    format_tolerances,
    parse_tolerances,
    row_dict,
)
from gpupoolctl.stress.model import Distribution, KneePoint, Knees, LevelResult, RunResult

LEVELS = (1, 2, 4, 8, 16, 32)


def dist(p95: float | None) -> Distribution:
    if p95 is None:
        return Distribution(0, None, None, None, None, None, None)
    return Distribution(10, p95 / 2, p95 / 2, p95 * 0.9, p95, p95 * 1.1, p95 * 1.2)


def level(n: float, throughput: float, p95: float | None = 0.2, failure_rate: float = 0.0):
    return LevelResult(
        level=n,
        model="closed",
        warmup_s=5.0,
        hold_s=30.0,
        window_s=30.0,
        submitted=100,
        completed=100,
        failed=0,
        dropped=0,
        throughput=throughput,
        failure_rate=failure_rate,
        queue_wait=dist(p95),
        turnaround=dist(1.0),
        phases={},
        harness_s=0.0,
    )


def run(
    throughputs: dict[float, float] | None = None,
    *,
    p95: dict[float, float | None] | None = None,
    failures: dict[float, float] | None = None,
    kneedle: float | None = 8,
    usl: float | None = 30.0,
    backend: str = "pool",
    workload: dict | None = None,
) -> RunResult:
    throughputs = throughputs or {n: 10.0 * n / (1 + 0.05 * (n - 1)) for n in LEVELS}
    p95 = p95 or {}
    failures = failures or {}
    return RunResult(
        scenario={"model": "closed", "workload": workload or {"kind": "sim", "args": {}}},
        levels=[level(n, x, p95.get(n, 0.2), failures.get(n, 0.0)) for n, x in throughputs.items()],
        knees=Knees(
            kneedle=KneePoint("kneedle", "diminishing returns", kneedle),
            usl=KneePoint("usl", "capacity peak", usl, note=None if usl else "sigma, kappa ~ 0"),
            latency=KneePoint("latency", "queue wait rises", 16),
        ),
        backend=backend,
        transport="local",
        tool_version="0.1.0",
        created="2025-06-01T12:00:00Z",
        host="admin-1",
        commit=None,
    )


def verdicts(result: Comparison, metric: str) -> dict[float | None, str]:
    return {row.level: row.verdict for row in result.rows if row.metric == metric}


def test_identical_runs_do_not_regress():
    base = run()
    result = compare(copy.deepcopy(base), base, Tolerances())
    assert not result.regressed
    assert result.regressions == [] and result.warnings == []
    assert {row.verdict for row in result.rows} == {"ok"}
    # Three metrics per level plus two knees.
    assert len(result.rows) == 3 * len(LEVELS) + 2
    row = next(r for r in result.rows if r.metric == "throughput" and r.level == 4)
    assert isinstance(row, ComparisonRow) and row.change == 0.0
    assert row.limit == pytest.approx(row.baseline * 0.9)
    as_dict = row_dict(row)
    assert list(as_dict) == ["metric", "level", "baseline", "current", "change", "limit", "verdict"]
    assert as_dict["metric"] == "throughput" and as_dict["level"] == 4


def test_fifteen_percent_throughput_drop_on_one_level_regresses_naming_it():
    base = run()
    current = run({n: x * (0.85 if n == 8 else 1.0) for n, x in base_throughputs(base).items()})
    result = compare(current, base, Tolerances())
    assert result.regressed
    assert verdicts(result, "throughput") == {n: ("regressed" if n == 8 else "ok") for n in LEVELS}
    assert len(result.regressions) == 1
    assert "throughput at level 8" in result.regressions[0] and "15" in result.regressions[0]


def test_drop_within_tolerance_is_ok():
    base = run()
    current = run({n: x * 0.95 for n, x in base_throughputs(base).items()})
    assert not compare(current, base, Tolerances()).regressed


def base_throughputs(result: RunResult) -> dict[float, float]:
    return {lv.level: lv.throughput for lv in result.levels}


def test_p95_growth_below_the_absolute_floor_is_ok():
    # 10 ms -> 40 ms is +300 %, but only 30 ms more: tiny waits must not flap.
    base = run(p95={n: 0.010 for n in LEVELS})
    current = run(p95={n: 0.040 for n in LEVELS})
    result = compare(current, base, Tolerances())
    assert set(verdicts(result, "queue_wait.p95").values()) == {"ok"}
    assert not result.regressed


def test_p95_growth_above_both_limits_regresses():
    base = run(p95={n: 0.5 for n in LEVELS})
    current = run(p95={**{n: 0.5 for n in LEVELS}, 16: 1.0})
    result = compare(current, base, Tolerances())
    assert verdicts(result, "queue_wait.p95")[16] == "regressed"
    assert any("queue-wait p95 at level 16" in r for r in result.regressions)


def test_p95_missing_on_one_side_is_not_applicable():
    base = run()
    current = run(p95={2: None})
    result = compare(current, base, Tolerances())
    assert verdicts(result, "queue_wait.p95")[2] == "n/a"
    assert not result.regressed


def test_failure_rate_growth_beyond_one_point_regresses():
    base = run()
    current = run(failures={4: 0.005, 8: 0.03})
    result = compare(current, base, Tolerances())
    found = verdicts(result, "failure_rate")
    assert found[4] == "ok" and found[8] == "regressed"
    assert any("failure rate at level 8" in r for r in result.regressions)


def test_usl_peak_earlier_beyond_tolerance_regresses():
    result = compare(run(usl=20.0), run(usl=30.0), Tolerances())
    assert verdicts(result, "knee.usl") == {None: "regressed"}
    assert any("USL capacity peak" in r for r in result.regressions)
    assert not compare(run(usl=26.0), run(usl=30.0), Tolerances()).regressed


def test_kneedle_one_step_earlier_is_noise_two_steps_regress():
    one = compare(run(kneedle=4), run(kneedle=8), Tolerances())
    assert verdicts(one, "knee.kneedle") == {None: "ok"}
    two = compare(run(kneedle=2), run(kneedle=8), Tolerances())
    assert verdicts(two, "knee.kneedle") == {None: "regressed"}
    assert any("Kneedle" in r and "2 level steps" in r for r in two.regressions)
    row = next(r for r in two.rows if r.metric == "knee.kneedle")
    assert row.limit == 4  # the lowest level still within one step


@pytest.mark.parametrize(("side", "field"), [("current", "usl"), ("baseline", "kneedle")])
def test_knee_missing_on_one_side_is_not_comparable(side, field):
    missing = run(**{field: None})
    current, base = (missing, run()) if side == "current" else (run(), missing)
    result = compare(current, base, Tolerances())
    assert verdicts(result, f"knee.{field}") == {None: "n/a"}
    assert not result.regressed
    assert any("not comparable" in w and side.split()[0] in w for w in result.warnings)


def test_no_knees_at_all_is_not_comparable():
    current = run()
    current.knees = None
    result = compare(current, run(), Tolerances())
    assert verdicts(result, "knee.usl") == {None: "n/a"}
    assert verdicts(result, "knee.kneedle") == {None: "n/a"}
    assert not result.regressed


def test_improvements_never_fail():
    base = run(p95={n: 1.0 for n in LEVELS}, failures={n: 0.05 for n in LEVELS}, usl=20.0)
    current = run(
        {n: x * 2 for n, x in base_throughputs(base).items()},
        p95={n: 0.1 for n in LEVELS},
        kneedle=32,
        usl=60.0,
    )
    result = compare(current, base, Tolerances())
    assert not result.regressed
    assert {row.verdict for row in result.rows} == {"improved"}


def test_a_run_lacking_baseline_levels_fails_the_comparison_naming_them():
    base = run({1: 10.0, 2: 19.0, 4: 36.0})
    current = run({2: 19.0, 4: 36.0, 8: 60.0})
    result = compare(current, base, Tolerances())
    assert set(verdicts(result, "throughput")) == {2, 4}
    # Nothing got worse, yet level 1 was never looked at: the comparison did not hold.
    assert not result.regressed and result.failed
    [gap] = result.incomplete
    assert "missing from the current run: 1" in gap and "--allow-missing-levels" in gap
    # Levels the baseline never ran are only news.
    assert any("only in the current run" in w and "8" in w for w in result.warnings)


def test_allow_missing_levels_compares_what_there_is_with_a_warning():
    base = run({1: 10.0, 2: 19.0, 4: 36.0})
    current = run({2: 19.0, 4: 36.0})
    result = compare(current, base, Tolerances(), allow_missing_levels=True)
    assert not result.failed and result.incomplete == []
    assert any("missing from the current run: 1" in w for w in result.warnings)


def test_a_level_the_run_measured_nothing_at_counts_as_missing():
    base = run({1: 10.0, 2: 19.0, 4: 36.0})
    current = run({1: 10.0, 2: 19.0, 4: 0.107})
    empty = current.levels[2]
    empty.submitted = empty.completed = empty.failed = 0  # a hold shorter than a job
    result = compare(current, base, Tolerances())
    assert set(verdicts(result, "throughput")) == {1, 2}  # its 0.107 jobs/s is no drop
    assert result.failed and not result.regressed
    assert any("measured nothing at: 4" in gap for gap in result.incomplete)


def test_no_common_level_is_a_harness_error():
    with pytest.raises(GpupoolError, match="no level in common") as caught:
        compare(run({1: 10.0, 2: 19.0}), run({4: 36.0, 8: 60.0}), Tolerances())
    assert caught.value.exit_code == ExitCode.ERROR


def test_different_backend_still_compares_with_a_warning():
    result = compare(run(backend="noop"), run(), Tolerances())
    assert any("different backend" in w for w in result.warnings)
    assert not result.failed
    assert len(result.rows) == 3 * len(LEVELS) + 2


def test_different_workloads_are_not_compared_unless_allowed():
    base = run(workload={"kind": "sim", "args": {"work_s": 1.0}})
    other = run(workload={"kind": "sleep", "args": {"seconds": 1}})
    with pytest.raises(NotComparable) as caught:
        compare(other, base, Tolerances())
    assert caught.value.exit_code == ExitCode.ERROR  # meaningless, not a regression
    message = str(caught.value)
    assert "baseline sim work_s=1.0" in message and "current sleep seconds=1" in message
    assert "--allow-other-workload" in message
    # Same kind, other arguments: still another workload (jobs of another length).
    longer = run(workload={"kind": "sim", "args": {"work_s": 2.0}})
    with pytest.raises(NotComparable, match=r"work_s=2\.0"):
        compare(longer, base, Tolerances())
    allowed = compare(other, base, Tolerances(), allow_other_workload=True)
    assert any("different workload" in w for w in allowed.warnings)
    assert len(allowed.rows) == 3 * len(LEVELS) + 2


def test_a_run_that_stopped_early_fails_the_comparison_unless_allowed():
    current = run()
    current.stopped_early = "thresholds broken at 2 levels in a row"
    result = compare(current, run(), Tolerances())
    assert result.failed and not result.regressed
    assert any("current run stopped early: thresholds broken" in g for g in result.incomplete)
    allowed = compare(current, run(), Tolerances(), allow_missing_levels=True)
    assert not allowed.failed and any("stopped early" in w for w in allowed.warnings)


def test_a_baseline_that_stopped_early_is_only_warned():
    base = run()
    base.stopped_early = "interrupted during level 32"
    result = compare(run(), base, Tolerances())
    assert not result.failed and any("baseline stopped early" in w for w in result.warnings)


def test_default_tolerances_are_used_when_none_given():
    base = run()
    current = run({n: x * 0.85 for n, x in base_throughputs(base).items()})
    assert compare(current, base).regressed


# -- tolerances text ------------------------------------------------------------------------


def test_parse_tolerances_defaults_and_overrides():
    assert parse_tolerances("") == Tolerances()
    parsed = parse_tolerances("throughput=5%, p95=50%,knee=1, p95_abs=20ms, kneedle=2")
    assert parsed.throughput == pytest.approx(0.05)
    assert parsed.p95 == pytest.approx(0.5)
    assert parsed.knee == pytest.approx(0.01)
    assert parsed.p95_abs_s == pytest.approx(0.02)
    assert parsed.kneedle_steps == 2
    assert parsed.failure_rate == Tolerances().failure_rate


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("failure_rate=2%", 0.02),
        ("failure_rate=2pp", 0.02),
        ("failure_rate=0.5", 0.005),
        ("failures=3%", 0.03),
    ],
)
def test_parse_failure_rate_points(text, value):
    assert parse_tolerances(text).failure_rate == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("throughput", "'throughput'"),
        ("latency=10%", "'latency=10%'"),
        ("throughput=fast", "throughput takes a percentage"),
        ("throughput=-5%", "'throughput=-5%'"),
        ("p95=10pp", "p95 takes a percentage"),
        ("p95_abs=5 minutes", "p95_abs takes a duration"),
        ("kneedle=1.5", "kneedle takes a whole number"),
        ("knee=10%,knee=20%", "knee is given twice"),
        ("failures=1%,failure_rate=2%", "failure_rate is given twice"),
    ],
)
def test_parse_tolerances_errors_name_the_item_and_valid_keys(text, named):
    with pytest.raises(UsageError) as caught:
        parse_tolerances(text)
    message = str(caught.value)
    assert named in message
    assert caught.value.exit_code == ExitCode.USAGE
    assert all(key in message for key in TOLERANCE_KEYS)


def test_format_tolerances_reads_back():
    custom = Tolerances(throughput=0.07, p95=0.3, p95_abs_s=0.1, failure_rate=0.02, knee=0.15)
    assert parse_tolerances(format_tolerances(custom)) == custom
    assert parse_tolerances(format_tolerances(Tolerances())) == Tolerances()


def test_knee_missing_on_both_sides_gives_the_reason_once():
    result = compare(run(usl=None), run(usl=None), Tolerances())
    [warning] = [w for w in result.warnings if "USL" in w]
    assert warning.count("sigma, kappa ~ 0") == 1
    assert "baseline or the current run" in warning
