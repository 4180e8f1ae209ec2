"""A ramp's own verdict: levels that measured nothing (a hold shorter than a job) and levels
where no job succeeded. Hand-built samples on a fixed clock: nothing here waits."""

from __future__ import annotations

import pytest

from gpupoolctl.stress import thresholds
from gpupoolctl.stress.histogram import distribution
from gpupoolctl.stress.knee import find_knees, knees_from_results
from gpupoolctl.stress.metrics import summarize_level
from gpupoolctl.stress.model import LevelResult, RunResult, Sample
from gpupoolctl.stress.report_text import level_rows
from gpupoolctl.stress.verdict import judge

T0 = 1_700_000_000.0
WARMUP, HOLD = 5.0, 3.0
WINDOW = (T0 + WARMUP, T0 + WARMUP + HOLD)
JOB_S = 8.6  # the default sim job on a 10 GB slice: longer than warm-up + hold


def closed_level(n: int, job_s: float) -> list[Sample]:
    """n closed-model submitters running `job_s` jobs back to back from T0."""
    samples = []
    for worker in range(n):
        at = T0 + 0.01 * worker
        while at < WINDOW[1]:
            samples.append(Sample(level=n, submitted=at, started=at, ended=at + job_s, ok=True))
            at += job_s
    return samples


def summarize(n: int, job_s: float, checks: list[str] | None = None) -> LevelResult:
    parsed = [thresholds.parse_threshold(text) for text in checks or []]
    return summarize_level(
        closed_level(n, job_s),
        level=n,
        model="closed",
        warmup_s=WARMUP,
        hold_s=HOLD,
        window=WINDOW,
        evaluate=lambda result: thresholds.evaluate(parsed, result),
    )


def failed_level(n: float, failed: int, error: str = "exit code <n>: no GPU here") -> LevelResult:
    return LevelResult(
        level=n,
        model="closed",
        warmup_s=0.0,
        hold_s=2.0,
        window_s=2.0,
        submitted=failed,
        completed=0,
        failed=failed,
        dropped=0,
        throughput=0.0,
        failure_rate=1.0,
        queue_wait=distribution([]),
        turnaround=distribution([0.1] * failed),
        phases={},
        harness_s=0.0,
        errors={error: failed},
    )


def ok_level(n: float) -> LevelResult:
    return LevelResult(
        level=n,
        model="closed",
        warmup_s=0.0,
        hold_s=2.0,
        window_s=2.0,
        submitted=10,
        completed=10,
        failed=0,
        dropped=0,
        throughput=5.0 * n,
        failure_rate=0.0,
        queue_wait=distribution([0.01] * 10),
        turnaround=distribution([0.2] * 10),
        phases={},
        harness_s=0.0,
    )


def run_of(levels: list[LevelResult]) -> RunResult:
    return RunResult(
        scenario={"name": "t", "model": "closed"},
        levels=levels,
        knees=knees_from_results(levels),
        backend="pool",
        transport="local",
        tool_version="0",
        created="2025-06-01T12:00:00Z",
        host="h",
        commit=None,
    )


# -- a hold shorter than a job ----------------------------------------------------------------


def test_a_hold_shorter_than_a_job_measures_nothing_and_its_thresholds_are_not_judged():
    level = summarize(1, JOB_S, ["failure_rate < 1%", "throughput >= 0.1/s"])
    # What the issue saw: nothing submitted in the window, yet a throughput (the share of the
    # warm-up job that overlapped it) that a threshold would have called "ok".
    assert (level.submitted, level.completed, level.failed) == (0, 0, 0)
    assert level.throughput == pytest.approx(HOLD / JOB_S / HOLD)
    assert not level.measured
    assert level.thresholds == []  # not judged, neither "ok" nor broken
    assert level_rows(run_of([level]))[0]["thresholds"] == "not judged: measured nothing"
    assert level_rows(run_of([level]))[0]["throughput"] == "-"
    # A job short enough to end in the window is measured and judged.
    short = summarize(1, 1.0, ["failure_rate < 1%"])
    assert short.measured and [c.ok for c in short.thresholds] == [True]


def test_levels_that_measured_nothing_are_left_out_of_the_knee_fits():
    measured = [summarize(n, 1.0) for n in (1, 2, 4, 8, 16)]
    empty = [summarize(n, JOB_S) for n in (32, 64)]
    assert all(lv.measured for lv in measured) and not any(lv.measured for lv in empty)
    knees = knees_from_results(measured + empty)
    alone = find_knees(
        [lv.level for lv in measured],
        [lv.throughput for lv in measured],
        [lv.queue_wait.p95 for lv in measured],
    )
    assert knees == alone
    # With too few measured levels the fits say how many they got: the measured ones only.
    few = knees_from_results([summarize(1, 1.0), summarize(2, 1.0), summarize(4, JOB_S)])
    assert "got 2" in (few.kneedle.note or "")


def test_a_level_that_measured_nothing_neither_breaks_a_streak_nor_extends_it():
    broken = summarize(1, 1.0, ["throughput > 100/s"])
    empty = summarize(2, JOB_S, ["throughput > 100/s"])
    assert not broken.thresholds_ok and empty.thresholds == []
    assert thresholds.broken_streak([broken, empty]) == 1
    assert thresholds.broken_streak([broken, empty, broken]) == 2


def test_a_run_where_no_level_measured_anything_is_a_harness_error():
    verdict = judge(run_of([summarize(n, JOB_S) for n in (1, 2, 4)]))
    assert verdict.error is not None and "no level measured anything" in verdict.error
    assert "hold" in verdict.error and verdict.unmeasured == [1, 2, 4]


def test_some_levels_that_measured_nothing_are_a_warning_naming_them():
    verdict = judge(run_of([summarize(1, 1.0), summarize(2, JOB_S), summarize(4, JOB_S)]))
    assert verdict.ok and verdict.unmeasured == [2, 4]
    [warning] = verdict.warnings
    assert "levels 2, 4 measured nothing" in warning and "knee fits" in warning


# -- no successful job ------------------------------------------------------------------------


def test_no_job_succeeding_at_any_level_is_a_harness_error_with_the_reason():
    verdict = judge(run_of([failed_level(1, 8), failed_level(2, 15)]))
    assert verdict.error is not None
    assert "no job succeeded at any level (23 failed)" in verdict.error
    assert "no GPU here (23x)" in verdict.error


def test_a_level_where_no_job_succeeded_fails_the_run_as_a_check():
    verdict = judge(run_of([ok_level(1), failed_level(2, 3, "timed out after <n>s")]))
    assert verdict.error is None and not verdict.ok
    [failure] = verdict.failures
    assert failure.startswith("level 2: no job succeeded (3 failed)")
    assert "timed out" in failure


def test_a_run_where_every_level_succeeded_is_ok():
    assert judge(run_of([ok_level(1), ok_level(2)])).ok


def test_the_html_report_says_which_levels_measured_nothing_and_why_the_run_failed():
    from gpupoolctl.stress.report_html import _verdict

    nothing = run_of([summarize(n, JOB_S, ["failure_rate < 1%"]) for n in (1, 2)])
    nothing.scenario["thresholds"] = ["failure_rate < 1%"]
    text = _verdict(nothing)
    assert text.startswith("No level measured anything")
    assert "Level 1, 2 measured nothing" in text and "No thresholds were set" not in text
    partly = run_of([summarize(1, 1.0, ["failure_rate < 1%"]), summarize(2, JOB_S)])
    partly.scenario["thresholds"] = ["failure_rate < 1%"]
    assert _verdict(partly).endswith("Every threshold held at every level judged.")
