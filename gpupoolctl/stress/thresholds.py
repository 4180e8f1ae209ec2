"""Pass/fail thresholds on a level's metrics: parse 'queue_wait.p95 < 5s', check a level.

A threshold is `<metric> <op> <value>[unit]`, in the spirit of k6's `p(95)<500`, with the
unit written out so nobody has to guess whether 500 meant seconds or milliseconds:

    queue_wait.p95 < 5s        durations (queue_wait.*, launch.*, turnaround.*, phase.*,
    turnaround.p99 <= 1500ms     harness): s, ms, us or m (minutes); a unit is required
    failure_rate < 1%          a percentage, or a fraction within 0..1 (0.01)
    throughput >= 2/s          jobs per second: /s or no unit
    dropped <= 0               counts (submitted, completed, failed, dropped, restarts,
    restarts < 5                 recovered, lost_nodes): no unit

Values are stored in the metric's own unit (seconds, a fraction, per second, a count), so
they compare directly with what `metrics.metric_value` returns.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.hw.shown import shown
from gpupoolctl.stress.model import COUNT_METRICS, METRICS, LevelResult, ThresholdCheck

OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

DURATION_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "m": 60.0}

_EXPR = re.compile(r"^\s*(?P<metric>[A-Za-z_][\w.]*)\s*(?P<op>[<>=!]+)\s*(?P<value>.*?)\s*$")
_VALUE = re.compile(r"^(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>\S*)$")
_FORMS = "write <metric> <op> <value>, e.g. 'queue_wait.p95 < 5s' or 'failure_rate < 1%'"

ValueOf = Callable[[LevelResult, str], float | None]


def metric_family(metric: str) -> str:
    """'duration', 'rate', 'throughput' or 'count': decides which units a value may carry."""
    if metric == "failure_rate":
        return "rate"
    if metric in ("throughput", "work_throughput"):
        return "throughput"
    if metric in COUNT_METRICS:
        return "count"
    family = metric.split(".", 1)[0]
    if metric == "harness" or family in ("queue_wait", "launch", "turnaround", "phase"):
        return "duration"
    raise KeyError(metric)


@dataclass(frozen=True)
class Threshold:
    """One parsed threshold. `value` is in the metric's unit; `expr` is the text as written;
    `source` is 'file:line' when it came from a scenario file (not part of equality, so a
    threshold re-read from a result file equals the original)."""

    metric: str
    op: str
    value: float
    expr: str
    source: str | None = field(default=None, compare=False)

    def holds(self, measured: float) -> bool:
        return OPS[self.op](measured, self.value)


class _Bad(Exception):
    """A threshold problem, before we know whether it came from a flag or a file."""


def parse_threshold(text: str, source: str | None = None) -> Threshold:
    """Parse 'metric op value[unit]'. A bad one is a UsageError, or a SourceError when
    `source` ('file' or 'file:line') says it came from a file; either names the bad part
    and lists what is valid."""
    try:
        return _parse(text, source)
    except _Bad as exc:
        message = f"bad threshold {shown(text.strip())}: {exc}"
        if source is None:
            raise UsageError(message) from None
        path, line = _split_source(source)
        raise SourceError(path, line, message) from None


def _split_source(source: str) -> tuple[str, int | None]:
    path, sep, line = source.rpartition(":")
    if sep and line.isdigit():
        return path, int(line)
    return source, None


def _parse(text: str, source: str | None) -> Threshold:
    if not isinstance(text, str) or not text.strip():
        raise _Bad(f"empty; {_FORMS}")
    match = _EXPR.match(text)
    if not match:
        raise _Bad(f"no comparison found; {_FORMS}")
    metric, op, value_text = match.group("metric", "op", "value")
    if metric not in METRICS:
        raise _Bad(f"unknown metric {shown(metric)}; valid: {', '.join(METRICS)}")
    if op not in OPS:
        raise _Bad(f"unknown comparison {shown(op)}; valid: {', '.join(OPS)}")
    value = _value(metric, value_text)
    return Threshold(metric=metric, op=op, value=value, expr=text.strip(), source=source)


def _value(metric: str, text: str) -> float:
    match = _VALUE.match(text)
    if not match:
        raise _Bad(f"bad value {shown(text)}: expected a number >= 0 with {_units_help(metric)}")
    number = float(match.group("number"))
    unit = match.group("unit")
    if not math.isfinite(number):
        raise _Bad(f"bad value {shown(text)}: too large")
    family = metric_family(metric)
    if family == "duration":
        if unit not in DURATION_UNITS:
            got = f"unit {shown(unit)}" if unit else "no unit"
            raise _Bad(f"{metric} is a duration: {got}; {_units_help(metric)}")
        return number * DURATION_UNITS[unit]
    if family == "rate":
        if unit == "%":
            if number > 100:
                raise _Bad(f"{metric} cannot be over 100% (got {shown(text)})")
            return number / 100
        if unit:
            raise _Bad(f"{metric}: unit {shown(unit)} does not fit; {_units_help(metric)}")
        if number > 1:
            raise _Bad(
                f"{metric}: {shown(text)} is over 1; write a percentage like {text}% or a fraction"
            )
        return number
    if family == "throughput":
        if unit not in ("", "/s"):
            raise _Bad(f"{metric}: unit {shown(unit)} does not fit; {_units_help(metric)}")
        return number
    if unit:
        raise _Bad(f"{metric} is a count: unit {shown(unit)} does not fit; {_units_help(metric)}")
    return number


def _units_help(metric: str) -> str:
    family = metric_family(metric)
    if family == "duration":
        return f"a unit, one of {', '.join(DURATION_UNITS)} (e.g. '{metric} < 5s')"
    if family == "rate":
        return f"'%' or no unit for a fraction 0..1 (e.g. '{metric} < 1%' or '{metric} < 0.01')"
    if family == "throughput":
        return f"'/s' or no unit, in jobs per second (e.g. '{metric} >= 2/s')"
    return f"no unit (a count, e.g. '{metric} <= 0')"


def evaluate(
    thresholds: Sequence[Threshold], level: LevelResult, value_of: ValueOf | None = None
) -> list[ThresholdCheck]:
    """Check each threshold on one level. A metric with no value (no job ended, say) or a
    non-finite one breaks its threshold and is reported with value None. A level that
    measured nothing (LevelResult.measured: a hold shorter than one job) is not judged at
    all: no checks. `value_of` defaults to `gpupoolctl.stress.metrics.metric_value`."""
    if not level.measured:
        return []
    if value_of is None:
        from gpupoolctl.stress.metrics import metric_value

        value_of = metric_value
    checks = []
    for threshold in thresholds:
        value = value_of(level, threshold.metric)
        if value is not None and not math.isfinite(value):
            value = None
        ok = value is not None and threshold.holds(value)
        checks.append(ThresholdCheck(expr=threshold.expr, value=value, ok=ok))
    return checks


def broken_streak(levels: Sequence[LevelResult]) -> int:
    """How many of the last levels in a row broke at least one threshold. Levels that
    measured nothing are not judged: they neither break a streak nor extend it."""
    streak = 0
    for level in reversed(levels):
        if not level.measured:
            continue
        if level.thresholds_ok:
            break
        streak += 1
    return streak
