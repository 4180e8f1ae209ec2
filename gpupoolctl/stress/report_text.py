"""A stress run for people on a terminal: per-level table rows, knee sentences, a text plot.

Everything here returns strings or rows; the CLI renders them. plotext is imported inside
`terminal_plot` only, so importing this module costs nothing at start-up.
"""

from __future__ import annotations

import math
import re
from typing import Any

from gpupoolctl.errors import GpupoolError, UsageError
from gpupoolctl.stress.formats import (
    MISSING,
    _is_number,
    format_duration,
    format_level,
    format_percent,
    format_rate,
)
from gpupoolctl.stress.model import KneePoint, Knees, LevelResult, RunResult

# Table columns for `level_rows` / `level_records`, in display order: key -> header.
LEVEL_COLUMNS: dict[str, str] = {
    "level": "level",
    "submitted": "submitted",
    "completed": "completed",
    "failed": "failed",
    "throughput": "jobs/s",
    "failure": "failed %",
    "queue_p50": "queue p50",
    "queue_p95": "queue p95",
    "queue_p99": "queue p99",
    "launch_p95": "launch p95",
    "turnaround_p95": "turnaround p95",
    "dominant": "most time in",
    "thresholds": "thresholds",
}

# Failures and recovery: shown after "failed %" only when some level has a non-zero value,
# so that a ramp without restarts or lost nodes reads as it always did.
RECOVERY_COLUMNS: dict[str, str] = {
    "restarts": "restarts",
    "recovered": "recovered",
    "lost_nodes": "lost nodes",
}


def shows_recovery(result: RunResult) -> bool:
    """Whether any level restarted a job, recovered one or lost a node."""
    return any(lv.restarts or lv.recovered or lv.lost_nodes for lv in result.levels)


def level_columns(result: RunResult) -> dict[str, str]:
    """The table's columns for this run: LEVEL_COLUMNS, with RECOVERY_COLUMNS after
    "failed %" when shows_recovery."""
    if not shows_recovery(result):
        return dict(LEVEL_COLUMNS)
    columns: dict[str, str] = {}
    for key, header in LEVEL_COLUMNS.items():
        columns[key] = header
        if key == "failure":
            columns.update(RECOVERY_COLUMNS)
    return columns


# The smallest plot that still shows two stacked curves with readable ticks.
MIN_PLOT_WIDTH = 40
MIN_PLOT_HEIGHT = 16


def _format_param(x: Any) -> str:
    """A fitted parameter such as sigma or kappa: 3 significant digits, plain when possible."""
    if not _is_number(x):
        return MISSING
    return f"{x:.3g}"


# -- table rows ------------------------------------------------------------------------------


def dominant_phase(level: LevelResult) -> tuple[str, float] | None:
    """The part of a job's time with the largest mean per job, and its share of the
    turnaround (of the parts' sum when the turnaround has no mean). None when none measured.

    The parts are bottleneck.time_split's: ledger, launch, queue, the run, split into
    compute, comm and run_other where the workload reported that split (they are parts of
    the run, never counted twice), and the reap after it."""
    from gpupoolctl.stress.bottleneck import time_split

    measured = time_split(level)
    if not measured:
        return None
    phase = max(measured, key=lambda p: measured[p])
    whole = level.turnaround.mean
    if not _is_number(whole) or whole is None or whole <= 0:
        whole = sum(v for v in measured.values() if v > 0)
    if whole <= 0:
        return phase, 0.0
    # Phases are means over the samples that measured them and the turnaround over those
    # that ended: they can disagree a little, so a share never reads above 100 %.
    return phase, min(1.0, max(0.0, measured[phase] / whole))


def _phase_label(phase: str) -> str:
    from gpupoolctl.stress.bottleneck import SHORT_WORDS

    return SHORT_WORDS.get(phase, phase)


_METRIC_NAME = re.compile(r"\s*([A-Za-z_][\w.]*)")


def _threshold_value_text(expr: str, value: float | None) -> str:
    """A measured threshold value in the unit its metric is read in."""
    if value is None:
        return "no value"
    match = _METRIC_NAME.match(expr)
    metric = match.group(1) if match else ""
    durations = ("queue_wait.", "launch.", "turnaround.", "phase.")
    if metric.startswith(durations) or metric == "harness":
        return format_duration(value)
    if metric == "failure_rate":
        return format_percent(value)
    if metric == "throughput":
        return f"{format_rate(value)} jobs/s"
    return format_level(value) if _is_number(value) else str(value)


NOT_MEASURED = "not judged: measured nothing"


def _thresholds_text(level: LevelResult) -> str:
    if not level.measured:
        return NOT_MEASURED
    if not level.thresholds:
        return MISSING
    broken = [t for t in level.thresholds if not t.ok]
    if not broken:
        return "ok"
    return "; ".join(f"{t.expr} ({_threshold_value_text(t.expr, t.value)})" for t in broken)


def level_rows(result: RunResult) -> list[dict[str, Any]]:
    """One row per level for a table people read: keys as level_columns(result), counts as
    ints, everything else as text ('41.2', '1.5%', '12 ms', 'run 81%', 'ok')."""
    keys = level_columns(result)
    rows = []
    for level in result.levels:
        phase = dominant_phase(level)
        row = {
            "restarts": level.restarts,
            "recovered": level.recovered,
            "lost_nodes": level.lost_nodes,
        }
        row.update(
            {
                "level": format_level(level.level),
                "submitted": level.submitted,
                "completed": level.completed,
                "failed": level.failed,
                # A level that measured nothing has only a share of warm-up jobs to show.
                "throughput": format_rate(level.throughput) if level.measured else MISSING,
                "failure": format_percent(level.measured_failure_rate),
                "queue_p50": format_duration(level.queue_wait.p50),
                "queue_p95": format_duration(level.queue_wait.p95),
                "queue_p99": format_duration(level.queue_wait.p99),
                "launch_p95": format_duration(level.launch.p95),
                "turnaround_p95": format_duration(level.turnaround.p95),
                "dominant": f"{_phase_label(phase[0])} {phase[1]:.0%}" if phase else MISSING,
                "thresholds": _thresholds_text(level),
            }
        )
        rows.append({key: row[key] for key in keys})
    return rows


def level_records(result: RunResult) -> list[dict[str, Any]]:
    """The same table as `level_rows` with plain numbers (seconds, fractions, jobs/s), for
    -o json/yaml of that table. The full flat export of a level is result.to_csv_rows."""
    records = []
    for level in result.levels:
        phase = dominant_phase(level)
        records.append(
            {
                "level": level.level,
                "submitted": level.submitted,
                "completed": level.completed,
                "failed": level.failed,
                "throughput": level.throughput if level.measured else None,
                "failure_rate": level.measured_failure_rate,
                "restarts": level.restarts,
                "recovered": level.recovered,
                "lost_nodes": level.lost_nodes,
                "queue_p50": level.queue_wait.p50,
                "queue_p95": level.queue_wait.p95,
                "queue_p99": level.queue_wait.p99,
                "launch_p95": level.launch.p95,
                "turnaround_p95": level.turnaround.p95,
                "dominant": phase[0] if phase else None,
                "dominant_share": phase[1] if phase else None,
                "measured": level.measured,
                "thresholds_ok": level.thresholds_ok,
                "thresholds_broken": [t.expr for t in level.thresholds if not t.ok],
            }
        )
    return records


# -- knees -----------------------------------------------------------------------------------


def _with_note(sentence: str, note: str | None) -> str:
    return f"{sentence} ({note})" if note else sentence


def _kneedle_line(point: KneePoint) -> str:
    label = "Diminishing returns (Kneedle)"
    if point.level is None:
        return f"{label}: none ({point.note or 'no knee found'})"
    sentence = f"{label}: level {format_level(point.level)}"
    if _is_number(point.value):
        sentence += f", {format_rate(point.value)} jobs/s"
    return _with_note(sentence, point.note)


def _usl_line(point: KneePoint) -> str:
    extra = point.extra
    fitted = ""
    if _is_number(extra.get("sigma")) or _is_number(extra.get("kappa")):
        fitted = (
            f"sigma {_format_param(extra.get('sigma'))}, kappa {_format_param(extra.get('kappa'))}"
        )
    if point.level is None:
        sentence = f"Capacity peak (USL fit): none ({point.note or 'no fit'})"
        return f"{sentence}; fitted {fitted}" if fitted else sentence
    label = "Capacity peak (USL fit"
    if _is_number(extra.get("r2")):
        label += f", R^2 {extra['r2']:.2f}"
    sentence = f"{label}): N* = {point.level:.1f}"
    if _is_number(extra.get("peak_err")) and not math.isinf(extra["peak_err"]):
        sentence += f" +/- {extra['peak_err']:.1f}"
    peak = point.value if _is_number(point.value) else extra.get("peak_throughput")
    if _is_number(peak):
        sentence += f", {format_rate(peak)} jobs/s"
    if fitted:
        sentence += f"; {fitted}"
    return _with_note(sentence, point.note)


def _latency_line(point: KneePoint) -> str:
    label = "Latency knee"
    if point.level is None:
        return f"{label}: none ({point.note or 'queue wait never left its baseline'})"
    baseline = point.extra.get("baseline")
    where = f"its {format_duration(baseline)}" if _is_number(baseline) else "its low-load"
    sentence = (
        f"{label}: queue wait p95 leaves {where} baseline at level {format_level(point.level)}"
    )
    if _is_number(point.value):
        sentence += f" ({format_duration(point.value)} there)"
    return _with_note(sentence, point.note)


def bottleneck_lines(result: RunResult) -> list[str]:
    """The bottleneck sentence and each part's share of a job's time at the knee; [] when
    no level measured anything."""
    from gpupoolctl.stress.bottleneck import KNEE_SOURCES, find_bottleneck

    found = find_bottleneck(result.levels, result.knees)
    if found is None:
        return []
    sentence = found.sentence[:1].upper() + found.sentence[1:]
    lines = [f"Bottleneck: {sentence}."]
    if found.shares_at_knee:
        where = KNEE_SOURCES.get(found.knee_source, found.knee_source)
        lines.append(
            f"Time per job at level {format_level(found.knee_level)} ({where}): "
            f"{found.shares_text()}"
        )
    return lines


def knee_lines(knees: Knees | None) -> list[str]:
    """One sentence per knee, each labelled as what it is, or saying why there is none."""
    if knees is None:
        return ["Knees: not analysed for this run (the result holds no knee analysis)."]
    return [_kneedle_line(knees.kneedle), _usl_line(knees.usl), _latency_line(knees.latency)]


# -- terminal plot ---------------------------------------------------------------------------


def _positions(levels: list[float]) -> tuple[list[float], list[float]]:
    """Level -> x position. Levels are usually geometric (1, 2, 4, ... 64), sometimes linear:
    evenly spaced ticks labelled by level read well for both, so the x axis is the level's
    rank, and a point between two levels (a fitted N*) is placed linearly between them."""
    return list(levels), [float(i) for i in range(len(levels))]


def _position_of(level: float, levels: list[float], ranks: list[float]) -> float | None:
    if not levels or level < levels[0] or level > levels[-1]:
        return None
    for i in range(1, len(levels)):
        if level <= levels[i]:
            low, high = levels[i - 1], levels[i]
            return ranks[i - 1] + (level - low) / (high - low) * (ranks[i] - ranks[i - 1])
    return ranks[0]


def _series(
    result: RunResult, levels: list[float], ranks: list[float], value: Any
) -> tuple[list[float], list[float]]:
    """(x, y) for one curve, leaving out levels with no value."""
    rank_of = dict(zip(levels, ranks, strict=True))
    xs, ys = [], []
    for level in result.levels:
        y = value(level)
        if _is_number(y) and not math.isinf(y):
            xs.append(rank_of[level.level])
            ys.append(float(y))
    return xs, ys


def _latency_unit(values: list[float]) -> tuple[float, str]:
    return (1e3, "ms") if max(values, default=0.0) < 1.0 else (1.0, "s")


def terminal_plot(
    result: RunResult,
    baseline: RunResult | None = None,
    *,
    width: int = 100,
    height: int = 32,
    color: bool = True,
) -> str:
    """Throughput and queue-wait p95 against level, stacked, as text `height` lines tall;
    the baseline as a second series, knee levels as labelled vertical lines.
    Written for plotext 6 (the figure/signal API)."""
    if width < MIN_PLOT_WIDTH or height < MIN_PLOT_HEIGHT:
        raise UsageError(
            f"plot size {width}x{height} is too small: "
            f"at least {MIN_PLOT_WIDTH} columns and {MIN_PLOT_HEIGHT} rows"
        )
    runs = [result] + ([baseline] if baseline is not None else [])
    levels = sorted({lv.level for run in runs for lv in run.levels})
    if not levels:
        return "(no levels measured: nothing to plot)"

    import plotext as plt

    if not callable(getattr(getattr(plt, "figure", None), "signal", None)):
        version = getattr(plt, "__version__", "unknown")
        raise GpupoolError(f"the terminal plot needs plotext 6 or later (found {version})")
    levels, ranks = _positions(levels)
    # Thin the tick labels so that they never run into each other.
    step = max(1, math.ceil(len(levels) * 6 / width))
    ticks = ranks[::step]
    tick_labels = [format_level(lv) for lv in levels[::step]]
    x_label = "level (arrivals/s)" if _model(result) == "open" else "level (concurrency)"

    queue_values = [
        lv.queue_wait.p95 for run in runs for lv in run.levels if _is_number(lv.queue_wait.p95)
    ]
    scale, unit = _latency_unit([float(v) for v in queue_values if v is not None])

    figure = plt.figure
    figure.clear()
    # The plot is text handed back to the caller: its size is what was asked, not the
    # terminal's (there may be no terminal at all).
    plt.terminal.limit(False, False)
    figure.subplots(2, 1)
    top, bottom = figure.subplot(1, 1), figure.subplot(2, 1)

    curves = (
        (top, "throughput", lambda lv: lv.throughput if lv.measured else None),
        (bottom, "queue wait p95", lambda lv: _scaled(lv.queue_wait.p95, scale)),
    )
    for plot, name, value in curves:
        for run, label, marker in ((result, name, "hd"), (baseline, "baseline", "braille")):
            if run is None:
                continue
            xs, ys = _series(run, levels, ranks, value)
            if xs:
                signal = plot.signal(xs, ys, marker=marker)
                signal.label(label)
                signal.lines()
                plot.draw(signal)
        plot.ruler("x").ticks(ticks, tick_labels)
        plot.label(x_label, axis="x")

    for plot, point, name, style in _knee_markers(result.knees):
        x = _position_of(point, levels, ranks)
        if x is not None:
            plot_for = top if plot == "throughput" else bottom
            plot_for.line(
                x, orientation="vertical", style=style, label=f"{name} @ {format_level(point)}"
            )

    top.title("Throughput (jobs/s)")
    top.label("jobs/s", axis="y")
    bottom.title(f"Queue wait p95 ({unit})")
    bottom.label(unit, axis="y")
    figure.plot_size(width, height)
    figure.theme("default" if color else "clear")
    text: str = figure.build().string(colorless=not color)
    figure.clear()
    return text


def _scaled(value: float | None, scale: float) -> float | None:
    return value * scale if _is_number(value) and value is not None else None


def _model(result: RunResult) -> str:
    if result.levels:
        return result.levels[0].model
    return str(result.scenario.get("model", "closed"))


def _knee_markers(knees: Knees | None) -> list[tuple[str, float, str, str]]:
    """(curve, level, name, line style) for each knee found: Kneedle and the USL peak belong
    to the throughput curve, the latency knee to the queue-wait curve."""
    if knees is None:
        return []
    found = (
        ("throughput", knees.kneedle, "kneedle", "dotted"),
        ("throughput", knees.usl, "USL N*", "heavy"),
        ("queue", knees.latency, "latency knee", "double"),
    )
    return [
        (curve, float(point.level), name, style)
        for curve, point, name, style in found
        if _is_number(point.level) and point.level is not None
    ]
