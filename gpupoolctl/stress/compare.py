"""Compare a stress run against a baseline run, level by level, with tolerances.

Only getting worse beyond a tolerance is a regression; getting better never fails a run.
Tolerances exist because repeated runs of the same code differ (noise, a busy node), and
the Kneedle knee in particular flips between neighbouring levels under a few percent of
noise, so it is allowed to move one level step before it counts.

A comparison also fails when it could not look at everything the baseline measured: a
baseline level the current run lacks (or measured nothing at), or a current run that
stopped early (`Comparison.incomplete`; a check that did not hold, exit 4), unless
`allow_missing_levels`. Runs of different workloads are not compared at all (NotComparable,
exit 1: the numbers measure different things), unless `allow_other_workload`.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from gpupoolctl.errors import GpupoolError, UsageError
from gpupoolctl.stress.model import KneePoint, LevelResult, RunResult

Verdict = Literal["ok", "regressed", "improved", "n/a"]


@dataclass(frozen=True)
class Tolerances:
    """How much worse a run may be than its baseline before it is a regression."""

    throughput: float = 0.10  # relative drop of throughput at a level
    p95: float = 0.25  # relative growth of queue-wait p95 at a level ...
    p95_abs_s: float = 0.05  # ... and at least this many seconds, so tiny waits do not flap
    failure_rate: float = 0.01  # absolute growth of the failure rate (0.01 = 1 point)
    knee: float = 0.20  # relative drop of the USL capacity peak N*
    kneedle_steps: int = 1  # level steps the Kneedle knee may move down


# Text key -> (field, kind). Percent kinds read "10%" or "10" as 0.10.
_KEYS: dict[str, tuple[str, str]] = {
    "throughput": ("throughput", "percent"),
    "p95": ("p95", "percent"),
    "p95_abs": ("p95_abs_s", "duration"),
    "failure_rate": ("failure_rate", "points"),
    "knee": ("knee", "percent"),
    "kneedle": ("kneedle_steps", "steps"),
}
_ALIASES = {"failures": "failure_rate"}
TOLERANCE_KEYS: tuple[str, ...] = tuple(_KEYS)
_KIND_HELP = {
    "percent": "a percentage like 10%",
    "points": "percentage points like 1%",
    "duration": "a duration like 0.05s or 50ms",
    "steps": "a whole number of level steps",
}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_DURATION_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}


def parse_tolerances(text: str, base: Tolerances | None = None) -> Tolerances:
    """Tolerances from "throughput=10%,p95=25%,knee=20%" style text; keys not given keep
    their value in `base` (the defaults when None). Percentages may omit the "%"
    ("knee=20" is 20 %). Keys: throughput, p95 (relative growth), p95_abs (seconds, or
    ms/us), failure_rate or failures (percentage points), knee (USL peak, relative),
    kneedle (level steps). Anything else -> UsageError naming the bad item and the valid keys."""
    result = base if base is not None else Tolerances()
    seen: set[str] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = (s.strip() for s in item.partition("="))
        key = _ALIASES.get(key, key)
        if not sep or key not in _KEYS:
            raise _bad(item, "expected KEY=VALUE")
        if key in seen:
            raise _bad(item, f"{key} is given twice")
        seen.add(key)
        name, kind = _KEYS[key]
        parsed = _parse_value(value, kind)
        if parsed is None:
            raise _bad(item, f"{key} takes {_KIND_HELP[kind]}")
        result = replace(result, **{name: parsed})
    return result


def _bad(item: str, why: str) -> UsageError:
    return UsageError(f"bad tolerance {item!r}: {why}; valid keys: {', '.join(TOLERANCE_KEYS)}")


def _parse_value(text: str, kind: str) -> float | int | None:
    text = text.strip().lower()
    if kind == "steps":
        return int(text) if text.isdigit() else None
    if kind == "duration":
        match = re.fullmatch(_NUMBER + r"\s*(s|ms|us)?", text)
        return float(match[1]) * _DURATION_UNITS[match[2] or ""] if match else None
    match = re.fullmatch(_NUMBER + r"\s*(%|pp)?", text)
    if not match or (match[2] == "pp" and kind != "points"):
        return None
    return float(match[1]) / 100


def format_tolerances(tolerances: Tolerances) -> str:
    """The text parse_tolerances reads back to the same Tolerances."""
    parts = []
    for key, (name, kind) in _KEYS.items():
        value = getattr(tolerances, name)
        if kind == "steps":
            parts.append(f"{key}={value}")
        elif kind == "duration":
            parts.append(f"{key}={value:g}s")
        else:
            parts.append(f"{key}={value * 100:g}%")
    return ",".join(parts)


class ComparisonRow(NamedTuple):
    """One metric compared: at one level, or run-wide (level None) for the knees.
    `limit` is the value past which it counts as a regression (None when there is none);
    `change` is (current - baseline) / baseline, None when the baseline is 0 or absent."""

    metric: str
    level: float | None
    baseline: float | None
    current: float | None
    change: float | None
    limit: float | None
    verdict: Verdict


def row_dict(row: ComparisonRow) -> dict[str, Any]:
    """A row as a plain dict (for -o json/yaml/csv)."""
    return dict(row._asdict())


class NotComparable(GpupoolError):
    """The two runs cannot be compared at all (a harness error, exit 1, not a regression)."""


@dataclass
class Comparison:
    rows: list[ComparisonRow] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)  # one sentence each
    warnings: list[str] = field(default_factory=list)
    # What the baseline measured that the current run did not let us compare: one sentence
    # each (levels it lacks, an early stop). Fails the comparison like a regression.
    incomplete: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    @property
    def failed(self) -> bool:
        """A regression, or a comparison that could not cover the baseline (exit 4)."""
        return self.regressed or bool(self.incomplete)


def compare(
    current: RunResult,
    baseline: RunResult,
    tolerances: Tolerances | None = None,
    *,
    allow_missing_levels: bool = False,
    allow_other_workload: bool = False,
) -> Comparison:
    """Compare `current` with `baseline` on the levels both measured (a level that measured
    nothing counts as absent). Runs of different workloads -> NotComparable unless
    `allow_other_workload`; baseline levels missing from the current run, or a current run
    that stopped early -> `incomplete` unless `allow_missing_levels` (then warnings). No
    level in common -> NotComparable (a harness error, exit 1, not a regression)."""
    tol = tolerances if tolerances is not None else Tolerances()
    out = Comparison()
    workload = _workload_difference(baseline, current)
    if workload is not None:
        if not allow_other_workload:
            raise NotComparable(
                f"the runs are of different workloads ({workload}): a comparison would be "
                "meaningless; pass --allow-other-workload to compare them anyway"
            )
        out.warnings.append(f"different workload, compared anyway: {workload}")
    base_levels = {_key(lv.level): lv for lv in baseline.levels if lv.measured}
    cur_levels = {_key(lv.level): lv for lv in current.levels if lv.measured}
    common = sorted(base_levels.keys() & cur_levels.keys())
    if not common:
        raise NotComparable(
            f"no level in common between the current run (measured levels "
            f"{_levels(cur_levels)}) and the baseline (measured levels {_levels(base_levels)}); "
            "nothing to compare"
        )
    out.warnings.extend(_differences(current, baseline, base_levels, cur_levels))
    gaps = _gaps(current, baseline, base_levels, cur_levels)
    if allow_missing_levels:
        out.warnings.extend(f"{gap} (allowed)" for gap in gaps)
    else:
        out.incomplete.extend(
            f"{gap}; pass --allow-missing-levels to compare what there is" for gap in gaps
        )
    for key in common:
        base, cur = base_levels[key], cur_levels[key]
        _throughput(out, base, cur, tol)
        _queue_wait(out, base, cur, tol)
        _failure_rate(out, base, cur, tol)
    _usl(out, baseline, current, tol)
    _kneedle(out, baseline, current, tol)
    return out


# -- per level -----------------------------------------------------------------------------


def _lower_is_worse(b: float, c: float, tolerance: float) -> tuple[float, Verdict]:
    """For a value where less is worse: the limit below which it regressed, and the verdict
    (more than `tolerance` above the baseline is an improvement)."""
    limit = b * (1 - tolerance)
    if c < limit:
        return limit, "regressed"
    if c > b * (1 + tolerance):
        return limit, "improved"
    return limit, "ok"


def _throughput(out: Comparison, base: LevelResult, cur: LevelResult, tol: Tolerances) -> None:
    b, c = base.throughput, cur.throughput
    limit, verdict = _lower_is_worse(b, c, tol.throughput)
    if verdict == "regressed":
        out.regressions.append(
            f"throughput at level {_g(cur.level)} fell {_pct(_drop(b, c))} "
            f"(baseline {_g(b)} jobs/s, now {_g(c)}; allowed drop {_pct(tol.throughput)})"
        )
    out.rows.append(ComparisonRow("throughput", cur.level, b, c, _change(b, c), limit, verdict))


def _queue_wait(out: Comparison, base: LevelResult, cur: LevelResult, tol: Tolerances) -> None:
    b, c = base.queue_wait.p95, cur.queue_wait.p95
    metric = "queue_wait.p95"
    if b is None or c is None:
        out.rows.append(ComparisonRow(metric, cur.level, b, c, None, None, "n/a"))
        return
    limit = max(b * (1 + tol.p95), b + tol.p95_abs_s)
    verdict: Verdict = "ok"
    if c > limit:
        verdict = "regressed"
        out.regressions.append(
            f"queue-wait p95 at level {_g(cur.level)} grew from {_s(b)} to {_s(c)} "
            f"(allowed +{_pct(tol.p95)} and at least +{_s(tol.p95_abs_s)})"
        )
    elif c < min(b * (1 - tol.p95), b - tol.p95_abs_s):
        verdict = "improved"
    out.rows.append(ComparisonRow(metric, cur.level, b, c, _change(b, c), limit, verdict))


def _failure_rate(out: Comparison, base: LevelResult, cur: LevelResult, tol: Tolerances) -> None:
    b, c = base.failure_rate, cur.failure_rate
    limit = b + tol.failure_rate
    verdict: Verdict = "ok"
    if c > limit:
        verdict = "regressed"
        out.regressions.append(
            f"failure rate at level {_g(cur.level)} rose from {_pct(b)} to {_pct(c)} "
            f"(allowed +{tol.failure_rate * 100:g} points)"
        )
    elif c < b - tol.failure_rate:
        verdict = "improved"
    out.rows.append(ComparisonRow("failure_rate", cur.level, b, c, _change(b, c), limit, verdict))


# -- knees ---------------------------------------------------------------------------------


def _knee_levels(
    out: Comparison, name: str, base: KneePoint | None, cur: KneePoint | None
) -> tuple[float, float] | None:
    """Both knees' levels, or None after noting why they cannot be compared."""
    b = base.level if base is not None else None
    c = cur.level if cur is not None else None
    if b is not None and c is not None:
        return b, c
    missing = [
        (side, point.note if point is not None else None)
        for side, point, level in (("baseline", base, b), ("current run", cur, c))
        if level is None
    ]
    if len(missing) == 2 and missing[0][1] == missing[1][1]:
        missing = [("baseline or the current run", missing[0][1])]  # say the reason once
    sides = [f"none in the {side}" + (f" ({note})" if note else "") for side, note in missing]
    out.warnings.append(f"{name} not comparable: {'; '.join(sides)}")
    return None


def _not_comparable(metric: str, base: KneePoint | None, cur: KneePoint | None) -> ComparisonRow:
    return ComparisonRow(
        metric, None, base.level if base else None, cur.level if cur else None, None, None, "n/a"
    )


def _usl(out: Comparison, baseline: RunResult, current: RunResult, tol: Tolerances) -> None:
    base = baseline.knees.usl if baseline.knees else None
    cur = current.knees.usl if current.knees else None
    levels = _knee_levels(out, "USL capacity peak", base, cur)
    if levels is None:
        out.rows.append(_not_comparable("knee.usl", base, cur))
        return
    b, c = levels
    limit, verdict = _lower_is_worse(b, c, tol.knee)
    if verdict == "regressed":
        out.regressions.append(
            f"USL capacity peak moved earlier, from {_g(b)} to {_g(c)} "
            f"({_pct(_drop(b, c))} lower; allowed {_pct(tol.knee)})"
        )
    out.rows.append(ComparisonRow("knee.usl", None, b, c, _change(b, c), limit, verdict))


def _kneedle(out: Comparison, baseline: RunResult, current: RunResult, tol: Tolerances) -> None:
    base = baseline.knees.kneedle if baseline.knees else None
    cur = current.knees.kneedle if current.knees else None
    levels = _knee_levels(out, "Kneedle knee", base, cur)
    if levels is None:
        out.rows.append(_not_comparable("knee.kneedle", base, cur))
        return
    b, c = levels
    # Steps are counted on the baseline's level grid: the levels in [c, b) or [b, c).
    grid = sorted({lv.level for lv in baseline.levels} | {b})
    at_b, at_c = bisect.bisect_left(grid, b), bisect.bisect_left(grid, c)
    lowest_ok = at_b - tol.kneedle_steps
    limit = grid[lowest_ok] if lowest_ok >= 0 else None
    verdict: Verdict = "ok"
    if at_b - at_c > tol.kneedle_steps:
        verdict = "regressed"
        out.regressions.append(
            f"Kneedle knee (diminishing returns) moved from level {_g(b)} to {_g(c)}, "
            f"{at_b - at_c} level steps earlier (allowed {tol.kneedle_steps})"
        )
    elif at_c - at_b > tol.kneedle_steps:
        verdict = "improved"
    out.rows.append(ComparisonRow("knee.kneedle", None, b, c, _change(b, c), limit, verdict))


# -- helpers -------------------------------------------------------------------------------


def _workload_difference(baseline: RunResult, current: RunResult) -> str | None:
    """How the two runs' workloads differ (kind or arguments), or None when they do not
    (or a run does not say)."""
    b, c = baseline.scenario.get("workload"), current.scenario.get("workload")
    if b is None or c is None or b == c:
        return None
    return f"baseline {_workload_text(b)}, current {_workload_text(c)}"


def _workload_text(workload: Any) -> str:
    if not isinstance(workload, dict):
        return _brief(workload)
    args = workload.get("args")
    shown = ""
    if isinstance(args, dict):
        shown = " " + " ".join(f"{k}={v}" for k, v in sorted(args.items()) if v is not None)
    text = f"{workload.get('kind')}{shown.rstrip()}"
    return text if len(text) <= 80 else text[:77] + "..."


def _differences(
    current: RunResult,
    baseline: RunResult,
    base_levels: dict[float, LevelResult],
    cur_levels: dict[float, LevelResult],
) -> list[str]:
    """Why the comparison may not be like for like (compared anyway)."""
    found = []
    for what, b, c in (
        ("backend", baseline.backend, current.backend),
        ("transport", baseline.transport, current.transport),
        ("load model", baseline.scenario.get("model"), current.scenario.get("model")),
    ):
        if b is not None and c is not None and b != c:
            found.append(f"different {what}: baseline {_brief(b)}, current {_brief(c)}")
    only_cur = sorted(cur_levels.keys() - base_levels.keys())
    if only_cur:
        found.append(f"levels only in the current run, not compared: {_levels(only_cur)}")
    unmeasured = sorted(_key(lv.level) for lv in baseline.levels if not lv.measured)
    if unmeasured:
        found.append(
            f"levels the baseline measured nothing at, not compared: {_levels(unmeasured)}"
        )
    if baseline.stopped_early:
        found.append(f"the baseline stopped early: {baseline.stopped_early}")
    return found


def _gaps(
    current: RunResult,
    baseline: RunResult,
    base_levels: dict[float, LevelResult],
    cur_levels: dict[float, LevelResult],
) -> list[str]:
    """What the baseline measured that the current run gives nothing to compare with."""
    found = []
    ran = {_key(lv.level) for lv in current.levels}
    missing = sorted(base_levels.keys() - cur_levels.keys())
    absent = [k for k in missing if k not in ran]
    empty = [k for k in missing if k in ran]
    if absent:
        found.append(f"baseline levels missing from the current run: {_levels(absent)}")
    if empty:
        found.append(f"baseline levels the current run measured nothing at: {_levels(empty)}")
    if current.stopped_early:
        found.append(f"the current run stopped early: {current.stopped_early}")
    return found


def _key(level: float) -> float:
    # Levels come from the same scenario syntax; rounding absorbs float noise in rates.
    return round(float(level), 9)


def _levels(levels: Any) -> str:
    return ", ".join(_g(level) for level in sorted(levels)) or "none"


def _change(b: float, c: float) -> float | None:
    return (c - b) / b if b else None


def _drop(b: float, c: float) -> float | None:
    return (b - c) / b if b else None


def _g(value: float) -> str:
    return f"{value:.4g}"


def _pct(fraction: float | None) -> str:
    return "?" if fraction is None else f"{fraction * 100:.3g}%"


def _s(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = [
    "TOLERANCE_KEYS",
    "Comparison",
    "ComparisonRow",
    "NotComparable",
    "Tolerances",
    "compare",
    "format_tolerances",
    "parse_tolerances",
    "row_dict",
]
