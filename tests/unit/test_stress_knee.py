"""Knee detection: Kneedle (diminishing returns), USL capacity peak, latency knee."""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict

import numpy as np
import pytest

from gpupoolctl.errors import UsageError
from gpupoolctl.stress import knee
from gpupoolctl.stress.knee import (
    find_knees,
    kneedle,
    knees_from_results,
    latency_knee,
    usl_fit,
    usl_peak,
    usl_throughput,
)
from gpupoolctl.stress.model import Distribution, KneePoint, LevelResult

# (lambda, sigma, kappa), grid: three peaks in different places
CURVES = {
    "peak-31": ((100.0, 0.05, 0.001), [1, 2, 4, 8, 16, 24, 32, 48, 64]),
    "peak-8": ((50.0, 0.1, 0.9 / 64), list(range(1, 17))),
    "peak-60": ((20.0, 0.05, 0.95 / 3600), [1, 2, 4, 8, 16, 32, 64, 128]),
}
USL_EXTRA = {
    "lambda",
    "sigma",
    "kappa",
    "sigma_err",
    "kappa_err",
    "r2",
    "peak_err",
    "peak_throughput",
    "levels_used",
}


def exact(params: tuple[float, float, float], grid: list[int]) -> list[float]:
    return [usl_throughput(n, *params) for n in grid]


def noisy(params: tuple[float, float, float], grid: list[int], seed: int) -> list[float]:
    """3 % multiplicative Gaussian noise, seeded."""
    rng = np.random.default_rng(seed)
    return [x * (1.0 + 0.03 * rng.standard_normal()) for x in exact(params, grid)]


def numbers_are_plain(point: KneePoint) -> None:
    for value in (point.level, point.value, *point.extra.values()):
        assert value is None or type(value) in (float, int), (value, type(value))
    json.dumps(asdict(point), allow_nan=False)


# -- the model ------------------------------------------------------------------------------


def test_usl_model_and_its_peak():
    assert usl_throughput(1, 100.0, 0.05, 0.001) == pytest.approx(100.0)
    # 100*32 / (1 + 0.05*31 + 0.001*32*31)
    assert usl_throughput(32, 100.0, 0.05, 0.001) == pytest.approx(3200 / 3.542)
    assert usl_peak(0.05, 0.001) == pytest.approx(30.822, abs=1e-3)
    assert usl_peak(0.05, 0.0) is None
    assert usl_peak(1.0, 0.01) == 0.0
    peak = usl_peak(0.05, 0.001)
    assert peak is not None
    top = usl_throughput(peak, 100.0, 0.05, 0.001)
    assert top > usl_throughput(peak * 0.9, 100.0, 0.05, 0.001)
    assert top > usl_throughput(peak * 1.1, 100.0, 0.05, 0.001)


# -- USL capacity peak --------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CURVES))
def test_usl_recovers_the_peak_of_exact_curves(name):
    params, grid = CURVES[name]
    truth = usl_peak(params[1], params[2])
    point = usl_fit(grid, exact(params, grid))
    assert point.method == "usl"
    assert point.meaning.startswith("capacity peak")
    assert point.level == pytest.approx(truth, rel=0.02)
    assert point.note is None
    assert point.extra.keys() >= USL_EXTRA
    assert point.extra["levels_used"] == len(grid)
    assert point.extra["sigma"] == pytest.approx(params[1], rel=0.02)
    assert point.extra["kappa"] == pytest.approx(params[2], rel=0.02)
    assert point.extra["r2"] > 0.999
    assert point.value == pytest.approx(usl_throughput(truth, *params), rel=0.01)
    numbers_are_plain(point)


@pytest.mark.parametrize("name", sorted(CURVES))
def test_usl_peak_under_noise(name):
    # Observed with 50 seeds: 50/50 within 15 % for peak-31 and peak-8, 49/50 for peak-60.
    params, grid = CURVES[name]
    truth = usl_peak(params[1], params[2])
    assert truth is not None
    close = 0
    for seed in range(50):
        point = usl_fit(grid, noisy(params, grid, seed))
        assert point.method == "usl"
        assert point.meaning.startswith("capacity peak")
        if point.level is not None and abs(point.level - truth) <= 0.15 * truth:
            close += 1
    assert close >= 45


@pytest.mark.parametrize("name", sorted(CURVES))
def test_diminishing_returns_come_before_the_peak(name):
    params, grid = CURVES[name]
    throughput = exact(params, grid)
    returns = kneedle(grid, throughput)
    peak = usl_fit(grid, throughput)
    assert returns.method == "kneedle"
    assert returns.meaning.startswith("diminishing returns")
    assert returns.level is not None and peak.level is not None
    assert returns.level < peak.level
    assert returns.level in grid  # Kneedle answers with a measured level
    assert returns.value == throughput[grid.index(int(returns.level))]
    numbers_are_plain(returns)


def test_usl_needs_five_levels():
    grid = [1, 2, 4, 8]
    point = usl_fit(grid, exact((100.0, 0.05, 0.001), grid))
    assert point.level is None
    assert point.note == "the USL fit needs at least 5 levels, got 4"


def test_usl_counts_distinct_positive_levels():
    # five entries, but only four distinct levels above 0
    point = usl_fit([0, 1, 2, 2, 4, 8], [0.0, 100.0, 190.0, 195.0, 350.0, 600.0])
    assert point.level is None
    assert point.note == "the USL fit needs at least 5 levels, got 4"


def test_pure_amdahl_has_no_peak_but_keeps_its_parameters():
    params, grid = (100.0, 0.05, 0.0), CURVES["peak-31"][1]
    point = usl_fit(grid, exact(params, grid))
    assert point.level is None and point.value is None
    assert point.note is not None
    assert point.note.startswith(
        "no capacity peak within reach: throughput still grows "
        "(contention-limited towards lam/sigma)"
    )
    assert point.extra["lambda"] == pytest.approx(100.0, rel=1e-3)
    assert point.extra["sigma"] == pytest.approx(0.05, rel=1e-3)
    assert point.extra["kappa"] == pytest.approx(0.0, abs=1e-9)
    assert point.extra["peak_err"] is None and point.extra["peak_throughput"] is None
    numbers_are_plain(point)


def test_noisy_amdahl_rarely_invents_a_peak():
    params, grid = (100.0, 0.05, 0.0), CURVES["peak-31"][1]
    # Observed: 2 of 50 seeds report a peak (beyond the sweep, with an uncertainty note).
    invented = [usl_fit(grid, noisy(params, grid, seed)) for seed in range(50)]
    peaks = [point for point in invented if point.level is not None]
    assert len(peaks) <= 5
    for point in peaks:
        assert point.note  # never an unqualified peak


def test_a_linear_curve_has_no_peak_and_no_knee():
    grid = [1, 2, 4, 8, 16, 32]
    throughput = [10.0 * n for n in grid]
    assert usl_fit(grid, throughput).level is None
    point = kneedle(grid, throughput)
    assert point.level is None
    assert point.note == "Kneedle finds no knee: throughput grows about linearly over the sweep"


def test_a_peak_far_beyond_the_sweep_is_reported_as_extrapolated():
    grid = [1, 2, 4, 8, 16, 32]
    params = (10.0, 0.02, 0.95 / 10_000)  # N* about 98.5
    point = usl_fit(grid, exact(params, grid))
    assert point.level == pytest.approx(usl_peak(0.02, 0.95 / 10_000), rel=0.02)
    assert point.note is not None
    assert point.note.startswith("extrapolated beyond the sweep (largest level 32)")


def test_a_peak_just_beyond_the_sweep_says_so():
    grid = [1, 2, 4, 8, 16, 24]  # N* about 30.8: beyond 24, within twice that
    point = usl_fit(grid, exact((100.0, 0.05, 0.001), grid))
    assert point.level == pytest.approx(30.82, rel=0.02)
    assert point.note == "beyond the largest level measured (24)"


def test_a_poor_fit_is_reported_with_a_note():
    grid = [1, 2, 3, 4, 5, 6, 7, 8]
    zigzag = [10.0, 40.0, 12.0, 38.0, 11.0, 39.0, 12.0, 40.0]
    point = usl_fit(grid, zigzag)
    assert point.extra["r2"] < 0.8
    assert point.note is not None and "the fit is poor (R^2 " in point.note


def test_flat_throughput_has_no_peak():
    grid = [1, 2, 4, 8, 16, 32]
    point = usl_fit(grid, [50.0, 50.5, 49.8, 50.2, 50.0, 49.9])
    assert point.level is None
    assert point.note is not None and point.note.startswith("throughput is flat")
    assert "sigma" in point.extra  # the fit is still shown


def test_no_throughput_at_all():
    point = usl_fit([1, 2, 4, 8, 16], [0.0] * 5)
    assert point.level is None
    assert point.note == "no throughput was measured at any level"


def test_a_fit_that_does_not_converge_becomes_a_note(monkeypatch):
    import scipy.optimize

    def refuse(*args, **kwargs):
        raise RuntimeError("Optimal parameters not found: maxfev reached")

    monkeypatch.setattr(scipy.optimize, "curve_fit", refuse)
    params, grid = CURVES["peak-31"]
    point = usl_fit(grid, exact(params, grid))
    assert point.level is None
    assert point.note == (
        "the USL fit did not converge (Optimal parameters not found: maxfev reached)"
    )


def test_scipy_warnings_become_notes_not_stderr(monkeypatch):
    import scipy.optimize

    real = scipy.optimize.curve_fit

    def warn_then_fit(*args, **kwargs):
        warnings.warn(
            "Covariance could not be estimated", scipy.optimize.OptimizeWarning, stacklevel=2
        )
        params, _ = real(*args, **kwargs)
        return params, np.full((3, 3), np.inf)

    monkeypatch.setattr(scipy.optimize, "curve_fit", warn_then_fit)
    params, grid = CURVES["peak-31"]
    with warnings.catch_warnings(record=True) as leaked:
        warnings.simplefilter("always")
        point = usl_fit(grid, exact(params, grid))
    assert leaked == []
    assert point.level == pytest.approx(30.82, rel=0.02)
    assert point.note is not None
    assert "the fit's parameter errors could not be estimated" in point.note
    assert "the peak's standard error could not be estimated" in point.note
    assert point.extra["kappa_err"] is None and point.extra["peak_err"] is None
    numbers_are_plain(point)


@pytest.mark.parametrize("name", sorted(CURVES))
def test_peak_error_matches_the_spread_over_seeds(name):
    # The delta-method error of one fit should describe how N* scatters between runs.
    # Observed (100 seeds, spread / median error): 1.30 / 1.03, 0.22 / 0.19, 3.5 / 2.1.
    params, grid = CURVES[name]
    fits = [usl_fit(grid, noisy(params, grid, seed)) for seed in range(50)]
    peaks = [point.level for point in fits if point.level is not None]
    errors = [point.extra["peak_err"] for point in fits if point.extra["peak_err"]]
    assert len(peaks) >= 45 and len(errors) >= 45
    spread = float(np.std(peaks))
    assert 0.5 * spread < float(np.median(errors)) < 2.0 * spread


# -- Kneedle ------------------------------------------------------------------------------


def test_kneedle_on_the_reference_curve_is_sixteen():
    params, grid = CURVES["peak-31"]
    assert kneedle(grid, exact(params, grid)).level == 16.0


def test_kneedle_flat_curve():
    point = kneedle([1, 2, 4, 8, 16], [100.0, 101.0, 99.0, 100.5, 100.0])
    assert point.level is None
    assert point.note is not None and point.note.startswith("throughput is flat")


def test_kneedle_retrograde_from_the_start():
    point = kneedle([1, 2, 4, 8, 16], [100.0, 90.0, 70.0, 50.0, 20.0])
    assert point.level is None
    assert point.note is not None and "does not increase" in point.note


def test_kneedle_needs_three_distinct_levels():
    point = kneedle([1, 2, 2, 1], [10.0, 20.0, 21.0, 11.0])
    assert point.level is None
    assert point.note == "Kneedle needs at least 3 levels, got 2"


# -- latency knee -------------------------------------------------------------------------

GRID = [1, 2, 4, 8, 16, 32, 64]


def test_latency_hockey_stick():
    wait = [0.02, 0.021, 0.019, 0.02, 0.35, 0.9, 2.0]
    point = latency_knee(GRID, wait)
    assert point.method == "latency"
    assert point.meaning.startswith("latency knee")
    assert point.level == 16.0
    assert point.value == 0.35
    assert point.extra["baseline"] == pytest.approx(0.02)
    assert point.extra["limit"] == pytest.approx(0.07)  # baseline + 0.05 s beats 2x
    assert point.note is None
    numbers_are_plain(point)


def test_latency_limit_is_twice_a_large_baseline():
    point = latency_knee(GRID, [1.0, 1.0, 1.0, 1.5, 2.5, 4.0, 8.0])
    assert point.extra["limit"] == pytest.approx(2.0)
    assert point.level == 16.0


def test_one_spike_at_a_low_level_is_not_the_knee():
    wait = [0.02, 0.9, 0.02, 0.02, 0.02, 0.02, 0.02]
    point = latency_knee(GRID, wait)
    assert point.level is None
    assert point.note is not None and "level(s) 2" in point.note
    assert point.extra["baseline"] == pytest.approx(0.02)


def test_a_spike_before_the_real_knee_is_skipped():
    wait = [0.02, 0.02, 0.6, 0.02, 0.4, 0.8, 1.5]
    assert latency_knee(GRID, wait).level == 16.0


def test_a_spike_at_the_lowest_level_does_not_set_the_baseline():
    wait = [0.8, 0.02, 0.02, 0.02, 0.4, 0.8, 1.5]
    point = latency_knee(GRID, wait)
    assert point.extra["baseline"] == pytest.approx(0.02)
    assert point.level == 16.0


def test_latency_that_never_leaves_its_baseline():
    point = latency_knee(GRID, [0.02, 0.025, 0.03, 0.02, 0.04, 0.03, 0.05])
    assert point.level is None
    assert point.note is not None
    assert point.note.startswith("queue wait never leaves its low-load baseline")


def test_latency_levels_without_data_are_skipped():
    wait = [0.02, None, 0.02, None, 0.5, None, 0.9]
    point = latency_knee(GRID, wait)
    assert point.level == 16.0
    assert point.extra["levels_used"] == 4


def test_latency_needs_three_levels_with_data():
    point = latency_knee([1, 2, 4], [0.02, None, 0.5])
    assert point.level is None
    assert point.note == "the latency knee needs at least 3 levels with queue-wait data, got 2"


def test_latency_knee_at_the_last_level_asks_for_confirmation():
    point = latency_knee(GRID, [0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.5])
    assert point.level == 64.0
    assert point.note is not None and "one more level" in point.note


# -- find_knees ---------------------------------------------------------------------------


def test_find_knees_closed_model():
    params, grid = CURVES["peak-31"]
    wait = [0.02, 0.02, 0.02, 0.02, 0.03, 0.3, 0.6, 1.2, 2.5]
    found = find_knees(grid, exact(params, grid), wait)
    assert (found.kneedle.method, found.usl.method, found.latency.method) == (
        "kneedle",
        "usl",
        "latency",
    )
    assert found.kneedle.level == 16.0
    assert found.usl.level == pytest.approx(30.82, rel=0.02)
    assert found.latency.level == 24.0


def test_find_knees_open_model_has_no_usl_point():
    params, grid = CURVES["peak-31"]
    found = find_knees(grid, exact(params, grid), [0.02] * len(grid), model="open")
    assert found.usl.level is None
    assert found.usl.note == "the USL fit needs a closed-model ramp (levels are concurrency)"
    assert found.kneedle.level == 16.0


def test_unsorted_levels_and_duplicates_are_averaged():
    params, grid = CURVES["peak-31"]
    throughput = exact(params, grid)
    wait = [0.02, 0.02, 0.02, 0.02, 0.3, 0.5, 0.9, 1.5, 3.0]
    # each level twice, 5 % above and below its value, in a shuffled order
    order = np.random.default_rng(3).permutation(2 * len(grid))
    pairs = [(n, x * 1.05, w) for n, x, w in zip(grid, throughput, wait, strict=True)]
    pairs += [(n, x * 0.95, w) for n, x, w in zip(grid, throughput, wait, strict=True)]
    shuffled = [pairs[i] for i in order]
    found = find_knees([p[0] for p in shuffled], [p[1] for p in shuffled], [p[2] for p in shuffled])
    reference = find_knees(grid, throughput, wait)
    assert found.kneedle.level == reference.kneedle.level
    assert found.usl.level == pytest.approx(reference.usl.level, rel=1e-6)
    assert found.latency.level == reference.latency.level == 16.0
    assert found.usl.extra["levels_used"] == len(grid)


def test_bad_arguments_are_typed_errors():
    with pytest.raises(UsageError, match="unknown load model"):
        find_knees([1, 2, 3], [1.0, 2.0, 3.0], [0.1, 0.1, 0.1], model="poisson")
    with pytest.raises(UsageError, match="3 levels but 2 throughput values"):
        kneedle([1, 2, 3], [1.0, 2.0])
    with pytest.raises(UsageError, match="3 levels but 1 latency values"):
        latency_knee([1, 2, 3], [0.1])


def test_non_finite_measurements_are_left_out():
    params, grid = CURVES["peak-31"]
    throughput = exact(params, grid)
    point = usl_fit([*grid, 96], [*throughput, float("nan")])
    assert point.extra["levels_used"] == len(grid)
    assert point.level == pytest.approx(30.82, rel=0.02)


def level_result(level: float, throughput: float, p95: float | None, model: str) -> LevelResult:
    wait = Distribution(count=10, mean=p95, p50=p95, p90=p95, p95=p95, p99=p95, max=p95)
    return LevelResult(
        level=level,
        model=model,
        warmup_s=1.0,
        hold_s=10.0,
        window_s=10.0,
        submitted=10,
        completed=10,
        failed=0,
        dropped=0,
        throughput=throughput,
        failure_rate=0.0,
        queue_wait=wait,
        turnaround=wait,
        phases={},
        harness_s=0.0,
    )


def test_knees_from_level_results():
    params, grid = CURVES["peak-31"]
    wait = [0.02, 0.02, 0.02, 0.02, 0.4, 0.5, 0.9, 1.5, 3.0]
    results = [
        level_result(n, x, w, "closed")
        for n, x, w in zip(grid, exact(params, grid), wait, strict=True)
    ]
    found = knees_from_results(results)
    assert found.usl.level == pytest.approx(30.82, rel=0.02)
    assert found.latency.level == 16.0
    results.append(level_result(128, 1.0, 1.0, "open"))
    with pytest.raises(UsageError, match="mixes load models"):
        knees_from_results(results)


def test_heavy_modules_load_only_when_used():
    assert "KneeLocator" not in vars(knee)
    assert "curve_fit" not in vars(knee)


def test_throughput_that_does_not_grow_is_not_called_still_growing() -> None:
    # A harness-bound curve (GIL, one core): noisy, highest at the lowest level.
    levels = [1, 2, 4, 8, 16]
    throughput = [130_000.0, 72_000.0, 74_000.0, 145_000.0, 106_000.0]
    point = usl_fit(levels, throughput)
    assert point.level is None
    assert point.note is not None and "does not grow with concurrency" in point.note
    assert "still grows" not in point.note
