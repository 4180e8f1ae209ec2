"""Knee detection on a stress ramp: three different points, each labelled as what it is.

- `kneedle`: where throughput gains per added level start to fall (diminishing returns).
- `usl_fit`: the capacity peak N* of a bounded Universal Scalability Law fit, with errors.
- `latency_knee`: where queue wait leaves its low-load baseline for good.

Diminishing returns come well before the capacity peak (about N*/2 on USL curves), so the
two must never be reported as one "knee". Every finder returns a KneePoint: a point, or
level None with a note saying why there is none. Numbers are plain floats (JSON-ready).
Levels may come in any order and repeated: they are sorted and repeats averaged, so the
answer never depends on the order of the input.

numpy, scipy and kneed are imported inside the functions: only the stress command pays
for them.
"""

from __future__ import annotations

import math
import statistics
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.stress.levels import MAX_CONCURRENCY
from gpupoolctl.stress.model import KneePoint, Knees, LevelResult

MODELS = ("closed", "open")

KNEEDLE_MEANING = "diminishing returns: throughput gains per added level start to fall here"
USL_MEANING = (
    "capacity peak: throughput is highest here and falls beyond (Universal Scalability Law fit)"
)
LATENCY_MEANING = "latency knee: queue wait leaves its low-load baseline here"

KNEEDLE_MIN_LEVELS = 3
USL_MIN_LEVELS = 5
LATENCY_MIN_LEVELS = 3

# Throughput that moves less than this fraction of its highest value is flat: a few
# percent is what one level's measurement noise amounts to.
FLAT_FRACTION = 0.05
# A fitted kappa is real only when its two-sided confidence interval at this level
# (Student t, n - 3 degrees of freedom) excludes 0.
KAPPA_CONFIDENCE = 0.95
# ... and when its crosstalk term moves the modelled throughput at the largest level
# measured by more than this fraction; below it the sweep cannot tell kappa from 0.
KAPPA_VISIBLE = 1e-3
EXTRAPOLATION_FACTOR = 2.0
POOR_FIT_R2 = 0.8
# A peak whose standard error exceeds this fraction of it gets a note.
UNCERTAIN_PEAK = 0.1
# Latency leaves its baseline above max(factor x baseline, baseline + margin seconds).
LATENCY_FACTOR = 2.0
LATENCY_MARGIN_S = 0.05
BASELINE_LEVELS = 3


# -- the model ----------------------------------------------------------------------------


def usl_throughput(n: float, lam: float, sigma: float, kappa: float) -> float:
    """X(N) = lam*N / (1 + sigma*(N-1) + kappa*N*(N-1)), the Universal Scalability Law."""
    return float(lam * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0)))


def usl_peak(sigma: float, kappa: float) -> float | None:
    """N* = sqrt((1-sigma)/kappa), where throughput peaks; None when kappa is 0 (no peak)."""
    if not kappa > 0.0 or not math.isfinite(kappa) or not math.isfinite(sigma):
        return None
    return math.sqrt(max(0.0, 1.0 - sigma) / kappa)


# -- input clean-up -----------------------------------------------------------------------


def _curve(
    levels: Sequence[float], values: Sequence[float | None], what: str
) -> tuple[list[float], list[float]]:
    """Sorted distinct levels and their values, duplicates averaged; levels whose value is
    missing or not finite (or whose mean is not) are left out. The result does not depend
    on the input order."""
    if len(levels) != len(values):
        raise UsageError(f"{len(levels)} levels but {len(values)} {what} values")
    pairs: dict[float, list[float]] = {}
    for level, value in zip(levels, values, strict=True):
        if value is None:
            continue
        x, y = float(level), float(value)
        if math.isfinite(x) and math.isfinite(y):
            pairs.setdefault(x, []).append(y)
    means = {x: _mean(pairs[x]) for x in sorted(pairs)}
    xs = [x for x, y in means.items() if y is not None]
    return xs, [means[x] for x in xs]


def _mean(values: list[float]) -> float | None:
    """The mean of a level's duplicates, the same in any order (fsum is exactly rounded;
    dividing first keeps huge values from overflowing the sum); None when even so it
    overflows (values near the float limit: not a measurement)."""
    try:
        mean = math.fsum(y / len(values) for y in values)
    except OverflowError:
        return None
    return mean if math.isfinite(mean) else None


def _fmt(x: float) -> str:
    return f"{x:g}"


# -- diminishing returns (Kneedle) ------------------------------------------------------


def kneedle(levels: Sequence[float], throughput: Sequence[float]) -> KneePoint:
    """Where throughput gains per added level start to fall, by Kneedle (Satopää et al.
    2011, via kneed) on the throughput curve, concave and increasing.

    Offline mode (online=False): it returns the FIRST knee the walk along the curve
    confirms, which is what "returns start to diminish" asks for. Online mode keeps
    walking and moves the answer to later knees, which on a ramp that goes past its peak
    drifts towards the peak, the USL point's job, not this one's.
    """
    xs, ys = _curve(levels, throughput, "throughput")
    extra: dict[str, Any] = {"levels_used": len(xs)}
    if len(xs) < KNEEDLE_MIN_LEVELS:
        return _none(
            "kneedle",
            KNEEDLE_MEANING,
            f"Kneedle needs at least {KNEEDLE_MIN_LEVELS} levels, got {len(xs)}",
            extra,
        )
    top = max(abs(y) for y in ys)
    if max(ys) - min(ys) <= FLAT_FRACTION * top:
        return _none(
            "kneedle",
            KNEEDLE_MEANING,
            f"throughput is flat (changes less than {FLAT_FRACTION:.0%} over the sweep): "
            "no diminishing returns to find",
            extra,
        )
    peak_index = ys.index(max(ys))
    if peak_index == 0 or ys[-1] <= ys[0]:
        return _none(
            "kneedle",
            KNEEDLE_MEANING,
            "throughput does not increase over the sweep (highest at the lowest level, or "
            "no higher at the end than at the start): no diminishing returns to find",
            extra,
        )

    from kneed import KneeLocator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        locator = KneeLocator(
            xs,
            ys,
            S=1.0,
            curve="concave",
            direction="increasing",
            interp_method="interp1d",
            online=False,
        )
    if locator.knee is None:
        return _none(
            "kneedle",
            KNEEDLE_MEANING,
            "Kneedle finds no knee: throughput grows about linearly over the sweep",
            extra,
        )
    level = float(locator.knee)
    return KneePoint(
        method="kneedle",
        meaning=KNEEDLE_MEANING,
        level=level,
        value=float(ys[xs.index(level)]),
        note=None,
        extra=extra,
    )


def _none(method: str, meaning: str, note: str, extra: dict[str, Any]) -> KneePoint:
    return KneePoint(method=method, meaning=meaning, level=None, note=note, extra=extra)


# -- capacity peak (Universal Scalability Law) ------------------------------------------

# Starting points for (sigma, kappa); lam starts at the best per-worker throughput seen.
# The first is the R usl package's; the others rescue fits that settle in a poor minimum.
_USL_STARTS = ((0.01, 1e-4), (0.1, 1e-2), (0.001, 1e-6))


def usl_fit(levels: Sequence[float], throughput: Sequence[float]) -> KneePoint:
    """The capacity peak N* = sqrt((1-sigma)/kappa) of a bounded least-squares fit of the
    Universal Scalability Law to throughput over concurrency (closed model only: `levels`
    are numbers of concurrent submitters).

    extra holds lambda, sigma, kappa with standard errors, R^2, the peak's propagated
    standard error (delta method) and its throughput, whenever the fit itself succeeded;
    a value that cannot be estimated is None.
    """
    all_xs, all_ys = _curve(levels, throughput, "throughput")
    # The law is defined for N >= 1 concurrent submitters and a throughput X >= 0, and a
    # closed ramp has at most MAX_CONCURRENCY submitters. Anything else (0 carries no
    # information about the curve's shape) is broken data; left in, it sent the solver
    # through thousands of ill-conditioned steps (25 s on 14 broken rows).
    kept = [
        (x, y)
        for x, y in zip(all_xs, all_ys, strict=True)
        if 1.0 <= x <= MAX_CONCURRENCY and y >= 0.0
    ]
    xs, ys = [x for x, _ in kept], [y for _, y in kept]
    extra: dict[str, Any] = {"levels_used": len(xs)}
    if len(xs) < USL_MIN_LEVELS:
        return _none(
            "usl",
            USL_MEANING,
            f"the USL fit needs at least {USL_MIN_LEVELS} levels, got {len(xs)}",
            extra,
        )
    if max(ys) <= 0.0:
        return _none("usl", USL_MEANING, "no throughput was measured at any level", extra)
    try:
        fitted = _fit_usl(xs, ys)
    except _NoFit as failure:
        return _none("usl", USL_MEANING, str(failure), extra)
    extra.update(fitted.extra())
    notes = list(fitted.notes)
    smallest, largest = xs[0], xs[-1]
    # R^2 says little about a flat curve: there is hardly any variance to explain
    flat = max(ys) - min(ys) <= FLAT_FRACTION * max(ys)
    if not flat and fitted.r2 is not None and fitted.r2 < POOR_FIT_R2:
        notes.append(
            f"the fit is poor (R^2 {fitted.r2:.2f} < {POOR_FIT_R2}): the curve does not "
            "follow the USL shape, so trust its parameters little"
        )
    if not fitted.has_peak(largest, len(xs)):
        if flat:
            why = (
                f"throughput is flat (changes less than {FLAT_FRACTION:.0%} over the sweep): "
                "at its limit from the lowest level, with no peak to place"
            )
        elif ys[-1] <= ys[0]:
            why = (
                "no capacity peak to place: throughput does not grow with concurrency over "
                "the sweep (no higher at the largest level than at the lowest), so the limit "
                "lies at or below the lowest level"
            )
        else:
            why = (
                "no capacity peak within reach: throughput still grows "
                "(contention-limited towards lam/sigma)"
            )
        return KneePoint("usl", USL_MEANING, None, None, "; ".join([why, *notes]), extra)
    peak = usl_peak(fitted.sigma, fitted.kappa)
    assert peak is not None  # has_peak guarantees kappa > 0
    extra["peak_err"] = fitted.peak_err()
    extra["peak_throughput"] = _finite(usl_throughput(peak, fitted.lam, fitted.sigma, fitted.kappa))
    if peak > EXTRAPOLATION_FACTOR * largest:
        notes.insert(0, f"extrapolated beyond the sweep (largest level {_fmt(largest)})")
    elif peak > largest:
        notes.insert(0, f"beyond the largest level measured ({_fmt(largest)})")
    elif peak < smallest:
        notes.insert(0, f"below the lowest level measured ({_fmt(smallest)})")
    peak_err = extra["peak_err"]
    if peak_err is None:
        notes.append("the peak's standard error could not be estimated")
    elif peak_err > UNCERTAIN_PEAK * peak:
        notes.append(f"uncertain: N* {peak:.3g} ± {peak_err:.2g} (one standard error)")
    return KneePoint(
        method="usl",
        meaning=USL_MEANING,
        level=peak,
        value=extra["peak_throughput"],
        note="; ".join(notes) or None,
        extra=extra,
    )


class _NoFit(Exception):
    """The USL fit produced nothing usable; the message says why."""


class _UslFit:
    """Fitted USL parameters with their standard errors (None when not estimable)."""

    def __init__(
        self,
        params: tuple[float, float, float],
        errors: tuple[float | None, float | None, float | None],
        sigma_kappa_cov: float | None,
        r2: float | None,
        notes: list[str],
    ) -> None:
        self.lam, self.sigma, self.kappa = params
        self.lam_err, self.sigma_err, self.kappa_err = errors
        self.sigma_kappa_cov = sigma_kappa_cov
        self.r2 = r2
        self.notes = notes

    def has_peak(self, largest: float, levels: int) -> bool:
        """Whether kappa is distinguishable from 0: it must be visible in the sweep (its
        crosstalk term moves X at the largest level by more than KAPPA_VISIBLE) and, when
        its error is known, its KAPPA_CONFIDENCE interval must exclude 0."""
        from scipy.special import stdtrit

        if not self.kappa > 0.0:
            return False
        crosstalk = self.kappa * largest * (largest - 1.0)
        rest = 1.0 + self.sigma * (largest - 1.0)
        if crosstalk <= KAPPA_VISIBLE * rest:
            return False
        if self.kappa_err is None:
            return True
        t = float(stdtrit(levels - 3, 0.5 + KAPPA_CONFIDENCE / 2.0))
        return self.kappa > t * self.kappa_err

    def peak_err(self) -> float | None:
        """Standard error of N* by the delta method from the (sigma, kappa) covariance."""
        peak = usl_peak(self.sigma, self.kappa)
        if (
            peak is None
            or peak == 0.0
            or self.sigma_err is None
            or self.kappa_err is None
            or self.sigma_kappa_cov is None
        ):
            return None
        d_sigma = -1.0 / (2.0 * self.kappa * peak)  # dN*/dsigma
        d_kappa = -peak / (2.0 * self.kappa)  # dN*/dkappa
        variance = (
            d_sigma**2 * self.sigma_err**2
            + d_kappa**2 * self.kappa_err**2
            + 2.0 * d_sigma * d_kappa * self.sigma_kappa_cov
        )
        return math.sqrt(variance) if variance >= 0.0 and math.isfinite(variance) else None

    def extra(self) -> dict[str, Any]:
        """The fitted parameters; the peak's fields stay None until a peak is reported.
        A fit to absurd input (a throughput near the float limit) may overflow: None then,
        as for an error that could not be estimated, so the result stays plain JSON."""
        return {
            "lambda": _finite(self.lam),
            "sigma": _finite(self.sigma),
            "kappa": _finite(self.kappa),
            "lambda_err": _optional_finite(self.lam_err),
            "sigma_err": _optional_finite(self.sigma_err),
            "kappa_err": _optional_finite(self.kappa_err),
            "r2": _optional_finite(self.r2),
            "peak_err": None,
            "peak_throughput": None,
        }


def _fit_usl(xs: list[float], ys: list[float]) -> _UslFit:
    """Bounded least squares (trf) from a few starting points, keeping the best; raises
    _NoFit when none converges. scipy's warnings become notes, never stderr."""
    import numpy as np
    from scipy.optimize import OptimizeWarning, curve_fit

    def model(n: Any, lam: Any, sigma: Any, kappa: Any) -> Any:
        return lam * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))

    # Fit throughput scaled to a peak of 1: the solver's tolerances then mean the same for
    # 0.1 jobs/s as for 10,000 (unscaled, tiny rates stop it short of the optimum).
    scale = max(ys)
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float) / scale
    with np.errstate(all="ignore"):  # start at the best per-worker throughput, as R's usl
        lam0 = min(max(float(np.max(y / x)), 1e-9), 1e300)
    best: tuple[float, Any, Any, list[warnings.WarningMessage]] | None = None
    failures: list[str] = []
    for sigma0, kappa0 in _USL_STARTS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                params, cov = curve_fit(
                    model,
                    x,
                    y,
                    p0=(lam0, sigma0, kappa0),
                    bounds=((1e-12, 0.0, 0.0), (np.inf, 1.0, 1.0)),
                    method="trf",
                    x_scale="jac",
                    maxfev=5000,
                )
            except (RuntimeError, ValueError, FloatingPointError) as error:
                failures.append(str(error).strip().splitlines()[0] if str(error) else "")
                continue
            with np.errstate(all="ignore"):
                sse = float(np.sum((y - model(x, *params)) ** 2))
        if math.isfinite(sse) and (best is None or sse < best[0]):
            best = (sse, params, cov, list(caught))
    if best is None:
        why = next((f for f in failures if f), "no starting point converged")
        raise _NoFit(f"the USL fit did not converge ({why})")
    sse, params, cov, caught = best
    notes = _warning_notes(caught, OptimizeWarning)
    errors = [_finite(math.sqrt(v)) if v >= 0 else None for v in np.diag(cov)]
    if errors[0] is not None:
        errors[0] = _finite(errors[0] * scale)
    sigma_kappa_cov = _finite(float(cov[1, 2]))
    with np.errstate(all="ignore"):
        sst = float(np.sum((y - np.mean(y)) ** 2))
    r2 = 1.0 - sse / sst if sst > 0.0 else None  # scale-free: both sums are scaled alike
    return _UslFit(
        (float(params[0]) * scale, float(params[1]), float(params[2])),
        (errors[0], errors[1], errors[2]),
        sigma_kappa_cov if None not in errors else None,
        _finite(r2) if r2 is not None else None,
        notes,
    )


def _warning_notes(caught: list[warnings.WarningMessage], optimize_warning: type) -> list[str]:
    notes: list[str] = []
    for message in caught:
        if issubclass(message.category, optimize_warning):
            text = "the fit's parameter errors could not be estimated"
        elif issubclass(message.category, RuntimeWarning):
            text = "numerical trouble during the fit (overflow or division by zero)"
        else:
            text = f"fit warning: {str(message.message).strip().splitlines()[0]}"
        if text not in notes:
            notes.append(text)
    return notes


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _optional_finite(value: float | None) -> float | None:
    return None if value is None else _finite(value)


# -- latency knee ---------------------------------------------------------------------------


def latency_knee(levels: Sequence[float], latency: Sequence[float | None]) -> KneePoint:
    """The lowest level from which queue wait (p95 per level, seconds; None where a level
    has no data) stays above max(2 x baseline, baseline + 0.05 s) at every higher level.

    The baseline is the median of the lowest three levels with data (fewer on short
    sweeps, so that two levels are left to leave it), robust to one noisy level there.
    Requiring every higher level to stay above the limit keeps one spike from counting.
    """
    xs, ys = _curve(levels, latency, "latency")
    extra: dict[str, Any] = {"baseline": None, "limit": None, "levels_used": len(xs)}
    if len(xs) < LATENCY_MIN_LEVELS:
        return _none(
            "latency",
            LATENCY_MEANING,
            f"the latency knee needs at least {LATENCY_MIN_LEVELS} levels with queue-wait "
            f"data, got {len(xs)}",
            extra,
        )
    lowest = ys[: min(BASELINE_LEVELS, len(ys) - 2)]
    # median_low: of two values it takes the lower, so one spike never sets the baseline
    baseline = float(statistics.median_low(lowest))
    limit = max(LATENCY_FACTOR * baseline, baseline + LATENCY_MARGIN_S)
    limit = min(limit, sys.float_info.max)  # absurd input must not make it inf
    extra.update(baseline=baseline, limit=limit)
    start = len(ys)
    while start > 0 and ys[start - 1] > limit:
        start -= 1
    if start == len(ys):
        above = [_fmt(x) for x, y in zip(xs, ys, strict=True) if y > limit]
        if above:
            why = (
                f"queue wait rises above the limit at level(s) {', '.join(above)} but comes "
                "back below it at a higher level: no lasting knee"
            )
        else:
            why = "queue wait never leaves its low-load baseline over the sweep"
        return _none(
            "latency",
            LATENCY_MEANING,
            f"{why} (baseline {_fmt(baseline)} s, limit {_fmt(limit)} s)",
            extra,
        )
    note = None
    if start == len(ys) - 1:
        note = "only the highest level is above the limit: one more level would confirm it"
    return KneePoint(
        method="latency",
        meaning=LATENCY_MEANING,
        level=xs[start],
        value=ys[start],
        note=note,
        extra=extra,
    )


# -- all three ------------------------------------------------------------------------------


def find_knees(
    levels: Sequence[float],
    throughput: Sequence[float],
    queue_wait_p95: Sequence[float | None],
    model: str = "closed",
) -> Knees:
    """The three points of one ramp. `model` is "closed" (levels are concurrency) or
    "open" (levels are arrival rates; the USL fit does not apply)."""
    if model not in MODELS:
        raise UsageError(f"unknown load model {model!r}: expected one of {', '.join(MODELS)}")
    if model == "closed":
        usl = usl_fit(levels, throughput)
    else:
        usl = _none(
            "usl",
            USL_MEANING,
            "the USL fit needs a closed-model ramp (levels are concurrency)",
            {},
        )
    return Knees(
        kneedle=kneedle(levels, throughput),
        usl=usl,
        latency=latency_knee(levels, queue_wait_p95),
    )


def knees_from_results(results: Sequence[LevelResult]) -> Knees:
    """find_knees over a ramp's level results (throughput and queue-wait p95). Levels that
    measured nothing (LevelResult.measured) are left out: their throughput is only a share
    of jobs submitted during warm-up, not a rate the level achieved."""
    models = {result.model for result in results}
    if len(models) > 1:
        raise UsageError(f"a ramp mixes load models ({', '.join(sorted(models))})")
    used = [result for result in results if result.measured]
    return find_knees(
        [result.level for result in used],
        [result.throughput for result in used],
        [result.queue_wait.p95 for result in used],
        model=models.pop() if models else "closed",
    )
