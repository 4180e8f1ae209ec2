"""A stress run as one self-contained HTML page: run details, the curves as inline SVG,
the knee sentences and the per-level table. No network: no external CSS, JS or fonts.

matplotlib is imported inside the functions (object API, no pyplot, no backend switch),
so importing this module costs nothing at start-up.
"""

from __future__ import annotations

import html
import io
import itertools
import math
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupoolctl.stress.formats import MISSING, format_level
from gpupoolctl.stress.model import PHASES, Knees, LevelResult, RunResult
from gpupoolctl.stress.report_text import (
    NOT_MEASURED,
    knee_lines,
    level_columns,
    level_rows,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Fixed salt: matplotlib derives SVG ids from it, so the same result gives the same page.
_SVG_RC = {"svg.hashsalt": "gpupoolctl-stress", "svg.fonttype": "none"}
# Text stays text (fonttype none): smaller, selectable, and the page names no font file.
_SVG_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}

_CURRENT = "#1f77b4"
_BASELINE = "#7f7f7f"
_KNEE_STYLES = {  # name -> (colour, line style)
    "kneedle": ("#2ca02c", ":"),
    "USL N*": ("#d62728", "--"),
    "latency knee": ("#9467bd", "-."),
}
_PHASE_COLOURS = {
    "ledger": "#8c564b",
    "launch": "#ff7f0e",
    "queue": "#bcbd22",
    "run": "#1f77b4",
    "compute": "#1f77b4",
    "run_other": "#aec7e8",
    "comm": "#ff9896",  # communication the workload did not attribute to a link class
    "comm:nvlink": "#9467bd",
    "comm:xgmi": "#c5b0d5",
    "comm:pcie": "#e377c2",
    "comm:nic": "#d62728",
    "comm:wan": "#7f7f7f",
    "reap": "#98df8a",
}
_OTHER_LINK_COLOUR = "#17becf"

_CSS = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 72em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
th { background: #f3f3f3; } td.text { text-align: left; }
td.broken { color: #b00; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 0.1em 1em; }
dl.meta dt { font-weight: bold; } dl.meta dd { margin: 0; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.9em; color: #555; }
.note { color: #555; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(x: Any) -> float | None:
    if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


# -- figures ---------------------------------------------------------------------------------


def _geometric(levels: list[float]) -> bool:
    """Levels that grow by a roughly constant factor (1, 2, 4, ...) read best on a log2 x
    axis; linear steps (1, 9, 17, ...) on a linear one, where log would squash the top."""
    if len(levels) < 3 or levels[0] <= 0:
        return False
    ratios = [b / a for a, b in itertools.pairwise(levels)]
    return min(ratios) >= 1.4 and max(ratios) / min(ratios) <= 1.5


def _level_axis(ax: Axes, levels: list[float], label: str) -> None:
    from matplotlib.ticker import NullLocator

    if _geometric(levels):
        ax.set_xscale("log", base=2)
    ax.set_xticks(levels, labels=[format_level(lv) for lv in levels])
    ax.xaxis.set_minor_locator(NullLocator())
    if len(levels) > 12:
        ax.tick_params(axis="x", labelrotation=90)
    ax.set_xlabel(label)
    ax.grid(True, alpha=0.3)


def _xy(result: RunResult, value: Callable[[LevelResult], Any]) -> tuple[list[float], list[float]]:
    """One curve's points; levels without a value are left out (not drawn as zero)."""
    xs, ys = [], []
    for level in result.levels:
        y = _number(value(level))
        if y is not None:
            xs.append(level.level)
            ys.append(y)
    return xs, ys


def _knee_levels(knees: Knees | None, names: tuple[str, ...]) -> Iterator[tuple[str, float]]:
    if knees is None:
        return
    points = {"kneedle": knees.kneedle, "USL N*": knees.usl, "latency knee": knees.latency}
    for name in names:
        level = _number(points[name].level)
        if level is not None:
            yield name, level


def _mark_knees(ax: Axes, knees: Knees | None, names: tuple[str, ...], top: float) -> None:
    """Vertical lines at the knees within reach of the plot (a USL peak far beyond the sweep
    would squash the measured curve; the knee sentences still give it)."""
    for name, level in _knee_levels(knees, names):
        if level <= 2 * top:
            colour, style = _KNEE_STYLES[name]
            ax.axvline(
                level, color=colour, linestyle=style, linewidth=1.2, label=f"{name} {level:g}"
            )


def _usl_curve(knees: Knees | None, low: float, high: float) -> tuple[list[float], list[float]]:
    """The fitted USL throughput over [low, high], when the fit left its parameters."""
    if knees is None:
        return [], []
    extra = knees.usl.extra
    lam, sigma, kappa = (_number(extra.get(k)) for k in ("lambda", "sigma", "kappa"))
    if lam is None or sigma is None or kappa is None or high <= low:
        return [], []
    from gpupoolctl.stress.knee import usl_throughput

    steps = 200
    ratio = high / low if low > 0 else 0.0
    if ratio > 0:  # geometric spacing: smooth on a log axis too
        xs = [low * ratio ** (i / steps) for i in range(steps + 1)]
    else:
        xs = [low + (high - low) * i / steps for i in range(steps + 1)]
    return xs, [float(usl_throughput(x, lam, sigma, kappa)) for x in xs]


def _throughput_figure(result: RunResult, baseline: RunResult | None, x_label: str) -> Figure:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4.2), layout="constrained")
    ax = figure.add_subplot()
    levels = _all_levels(result, baseline)
    xs, ys = _xy(result, _throughput)
    ax.plot(xs, ys, "o-", color=_CURRENT, label="throughput")
    if baseline is not None:
        bx, by = _xy(baseline, _throughput)
        ax.plot(bx, by, "o--", color=_BASELINE, alpha=0.8, label="baseline")
    top = levels[-1]
    usl_high = top
    usl_peak = _number(result.knees.usl.level) if result.knees else None
    if usl_peak is not None and usl_peak <= 2 * top:
        usl_high = max(top, usl_peak * 1.1)
    ux, uy = _usl_curve(result.knees, levels[0], usl_high)
    if ux:
        ax.plot(ux, uy, "-", color=_KNEE_STYLES["USL N*"][0], alpha=0.5, label="USL fit")
    _mark_knees(ax, result.knees, ("kneedle", "USL N*"), top)
    _level_axis(ax, levels, x_label)
    ax.set_ylabel("jobs/s")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput (jobs ended ok per second)")
    ax.legend(fontsize="small")
    return figure


def _throughput(level: LevelResult) -> float | None:
    """None where the level measured nothing (its figure is a share of warm-up jobs)."""
    return level.throughput if level.measured else None


def _latency_figure(result: RunResult, baseline: RunResult | None, x_label: str) -> Figure:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4.2), layout="constrained")
    ax = figure.add_subplot()
    levels = _all_levels(result, baseline)
    curves = (
        ("queue wait p50", lambda lv: lv.queue_wait.p50, "o-", 0.5),
        ("queue wait p95", lambda lv: lv.queue_wait.p95, "o-", 1.0),
        ("queue wait p99", lambda lv: lv.queue_wait.p99, "o-", 0.5),
        ("launch p95", lambda lv: lv.launch.p95, "^-", 0.8),
        ("turnaround p95", lambda lv: lv.turnaround.p95, "s-", 1.0),
    )
    colours = ("#6baed6", _CURRENT, "#08519c", "#2ca02c", "#ff7f0e")
    for (label, value, style, alpha), colour in zip(curves, colours, strict=True):
        xs, ys = _xy(result, value)
        ax.plot(xs, ys, style, color=colour, alpha=alpha, label=label)
    if baseline is not None:
        bx, by = _xy(baseline, lambda lv: lv.queue_wait.p95)
        ax.plot(bx, by, "o--", color=_BASELINE, alpha=0.8, label="baseline queue wait p95")
        bx, by = _xy(baseline, lambda lv: lv.turnaround.p95)
        ax.plot(bx, by, "s--", color=_BASELINE, alpha=0.5, label="baseline turnaround p95")
    _mark_knees(ax, result.knees, ("latency knee",), levels[-1])
    _level_axis(ax, levels, x_label)
    ax.set_ylabel("seconds")
    ax.set_ylim(bottom=0)
    ax.set_title("Queue wait (for a slice), launch and turnaround")
    ax.legend(fontsize="small")
    return figure


def _failure_figure(result: RunResult, baseline: RunResult | None, x_label: str) -> Figure:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 3.2), layout="constrained")
    ax = figure.add_subplot()
    levels = _all_levels(result, baseline)
    xs, ys = _xy(result, _failed_percent)
    ax.plot(xs, ys, "o-", color="#d62728", label="failed %")
    if baseline is not None:
        bx, by = _xy(baseline, _failed_percent)
        ax.plot(bx, by, "o--", color=_BASELINE, alpha=0.8, label="baseline")
    _level_axis(ax, levels, x_label)
    ax.set_ylabel("% of jobs that ended")
    ax.set_ylim(bottom=0, top=max([5.0, *ys, *(by if baseline is not None else [])]) * 1.1)
    ax.set_title("Failure rate")
    ax.legend(fontsize="small")
    return figure


def _failed_percent(level: LevelResult) -> float | None:
    rate = level.measured_failure_rate
    return None if rate is None else rate * 100


def _stack(level: LevelResult) -> dict[str, float]:
    """Where a job's time went at `level`, as parts that do not overlap (mean seconds per
    job): ledger, launch, queue, then the run (compute, communication by link class and
    the rest of the run where the workload split it, else the run whole), then the reap
    (the wait for the job's end to be noticed)."""
    from gpupoolctl.stress.bottleneck import link_split, time_split

    out: dict[str, float] = {}
    for part, seconds in time_split(level).items():
        links = link_split(level) if part == "comm" else {}
        if links:
            out.update({f"comm:{link}": value for link, value in links.items()})
        else:
            out[part] = seconds
    return out


def _stack_label(part: str) -> str:
    from gpupoolctl.stress.bottleneck import LINK_WORDS, SHORT_WORDS

    if part.startswith("comm:"):
        link = part.split(":", 1)[1]
        words = LINK_WORDS.get(link)
        return f"comm, {link}" + (f" ({words})" if words else "")
    return SHORT_WORDS.get(part, part)


def _phase_figure(result: RunResult) -> Figure | None:
    """Where a job's time went per level: mean seconds per part, stacked."""
    stacks = [_stack(lv) for lv in result.levels]
    order = ["ledger", "launch", "queue", "compute"]
    order += sorted({p for st in stacks for p in st if p.startswith("comm:")}, key=_link_rank)
    order += ["comm", "run_other", "run", "reap"]
    parts = [p for p in order if any(_number(st.get(p)) for st in stacks)]
    if not parts:
        return None
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 3.8), layout="constrained")
    ax = figure.add_subplot()
    # Bars at evenly spaced positions labelled by level: bar widths on a log axis would vary.
    positions = list(range(len(result.levels)))
    bottoms = [0.0] * len(positions)
    for part in parts:
        heights = [_number(st.get(part)) or 0.0 for st in stacks]
        colour = _PHASE_COLOURS.get(part, _OTHER_LINK_COLOUR)
        ax.bar(positions, heights, bottom=bottoms, color=colour, label=_stack_label(part))
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_xticks(positions, labels=[format_level(lv.level) for lv in result.levels])
    ax.set_xlabel("level")
    ax.set_ylabel("mean seconds per job")
    ax.set_title("Where the time went")
    # Legend top-down in the order the segments are stacked.
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize="small")
    return figure


def _link_rank(part: str) -> tuple[int, str]:
    from gpupoolctl.stress.model import LINK_CLASSES

    link = part.split(":", 1)[1]
    return (LINK_CLASSES.index(link) if link in LINK_CLASSES else len(LINK_CLASSES), link)


def _all_levels(result: RunResult, baseline: RunResult | None) -> list[float]:
    runs = [result] + ([baseline] if baseline is not None else [])
    return sorted({lv.level for run in runs for lv in run.levels})


_SVG_ID = re.compile(r'\bid="([^"]+)"')
_SVG_REF = re.compile(r'(href="#|url\(#)([^")]+)')


def _svg(figure: Figure, prefix: str) -> str:
    """The figure as an <svg> element to inline: no XML prologue or DOCTYPE (which names a
    URL), and ids prefixed so that figures on one page never share one."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata=_SVG_METADATA)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    text = _SVG_ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = _SVG_REF.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", text)
    return text.strip()


def _figures(result: RunResult, baseline: RunResult | None) -> list[tuple[str, str, str]]:
    """(key, caption, svg) for each figure there is data for."""
    import matplotlib

    if not result.levels:
        return []
    model = result.levels[0].model
    x_label = "level (arrivals/s)" if model == "open" else "level (concurrent submitters)"
    out = []
    with matplotlib.rc_context(_SVG_RC):
        built = (
            ("throughput", _throughput_figure(result, baseline, x_label)),
            ("latency", _latency_figure(result, baseline, x_label)),
            ("failures", _failure_figure(result, baseline, x_label)),
            ("phases", _phase_figure(result)),
        )
        for key, figure in built:
            if figure is not None:
                out.append((key, _CAPTIONS[key], _svg(figure, f"fig-{key}")))
    return out


_CAPTIONS = {
    "throughput": "Throughput against level, with the fitted USL curve and the knees",
    "latency": "Queue wait (p50, p95, p99) and turnaround p95 against level",
    "failures": "Failure rate against level",
    "phases": "Mean time per job in each phase, per level (the run split into compute, "
    "communication by link class and the rest where the workload reported it)",
}


# -- page ------------------------------------------------------------------------------------


def _workload_text(workload: Any) -> str:
    if isinstance(workload, dict) and "kind" in workload:
        args = workload.get("args") or {}
        if isinstance(args, dict) and args:
            return f"{workload['kind']} ({', '.join(f'{k}={v}' for k, v in args.items())})"
        return str(workload["kind"])
    return MISSING if workload is None else str(workload)


def _meta(result: RunResult) -> list[tuple[str, str]]:
    scenario = result.scenario
    levels = ", ".join(format_level(lv.level) for lv in result.levels) or MISSING
    return [
        ("Scenario", str(scenario.get("name") or MISSING)),
        ("Model", str(scenario.get("model") or MISSING)),
        ("Levels", levels),
        ("Workload", _workload_text(scenario.get("workload"))),
        ("Backend", result.backend),
        ("Transport", result.transport or MISSING),
        ("Host", result.host),
        ("Tool version", result.tool_version),
        ("Commit", result.commit or MISSING),
        ("Date", result.created),
    ]


def _baseline_meta(baseline: RunResult) -> str:
    name = baseline.scenario.get("name") or "unnamed scenario"
    commit = f", commit {baseline.commit}" if baseline.commit else ""
    return f"{name}, run {baseline.created} on {baseline.host}{commit}"


def _table(result: RunResult) -> str:
    columns = level_columns(result)
    head = "".join(f"<th>{_e(h)}</th>" for h in columns.values())
    body = []
    for row in level_rows(result):
        cells = []
        for key in columns:
            value = row[key]
            css = ["text"] if key in ("dominant", "thresholds") else []
            if key == "thresholds" and value not in ("ok", MISSING, NOT_MEASURED):
                css.append("broken")
            cls = f' class="{" ".join(css)}"' if css else ""
            cells.append(f"<td{cls}>{_e(value)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n"
        + "\n".join(body)
        + "\n</tbody>\n</table>"
    )


def _verdict(result: RunResult) -> str:
    from gpupoolctl.stress.verdict import judge

    verdict = judge(result)
    sentences = [verdict.error] if verdict.error else []
    sentences += verdict.failures
    if verdict.unmeasured:
        levels = ", ".join(format_level(level) for level in verdict.unmeasured)
        sentences.append(
            f"Level {levels} measured nothing (a hold shorter than a job): left out of the "
            "knee fits, thresholds not judged."
        )
    if not result.scenario.get("thresholds") and not any(lv.thresholds for lv in result.levels):
        sentences.append("No thresholds were set.")
    elif any(lv.measured for lv in result.levels):
        broken = [format_level(lv.level) for lv in result.levels if not lv.thresholds_ok]
        if broken:
            sentences.append(f"Thresholds broken at level {', '.join(broken)}.")
        else:
            judged = " judged" if verdict.unmeasured else ""
            sentences.append(f"Every threshold held at every level{judged}.")
    return " ".join(_sentence(text) for text in sentences)


def _bottleneck_section(result: RunResult, baseline: RunResult | None) -> list[str]:
    """The bottleneck sentence and the shares at the knee, for this run and the baseline
    (each its own); nothing when neither measured a level."""
    from gpupoolctl.stress.report_text import bottleneck_lines

    runs = [("", result)]
    if baseline is not None:
        runs = [("This run", result), ("Baseline", baseline)]
    items = []
    for label, run in runs:
        lines = bottleneck_lines(run)
        if not lines:
            continue
        head = f"<b>{_e(label)}</b>: " if label else ""
        rest = "".join(f'<br><span class="note">{_e(line)}</span>' for line in lines[1:])
        items.append(f'<p class="bottleneck">{head}{_e(lines[0])}{rest}</p>')
    if not items:
        return []
    return ["<h2>Bottleneck</h2>", *items]


def _sentence(text: str) -> str:
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def render_html(result: RunResult, baseline: RunResult | None = None) -> str:
    """The whole report page; the same result (and baseline) always gives the same text."""
    name = str(result.scenario.get("name") or "stress run")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{_e(f'Stress report: {name}')}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>{_e(f'Stress report: {name}')}</h1>",
        '<dl class="meta">',
        *(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in _meta(result)),
    ]
    if baseline is not None:
        parts.append(f"<dt>Compared with</dt><dd>{_e(_baseline_meta(baseline))}</dd>")
    parts.append("</dl>")
    if result.stopped_early:
        parts.append(f'<p class="note">The ramp stopped early: {_e(result.stopped_early)}</p>')

    parts.append("<h2>Knees</h2>")
    parts.append("<ul>" + "".join(f"<li>{_e(line)}</li>" for line in knee_lines(result.knees)))
    parts.append("</ul>")

    parts += _bottleneck_section(result, baseline)

    parts.append("<h2>Curves</h2>")
    figures = _figures(result, baseline)
    if not figures:
        parts.append('<p class="note">No level was measured: there is nothing to draw.</p>')
    for key, caption, svg in figures:
        parts.append(
            f'<figure id="{key}">\n{svg}\n<figcaption>{_e(caption)}</figcaption>\n</figure>'
        )

    parts.append("<h2>Per level</h2>")
    parts.append(f"<p>{_e(_verdict(result))}</p>")
    parts.append(_table(result))
    parts.append(_phase_help())
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)


def _phase_help() -> str:
    from gpupoolctl.stress.model import PHASE_HELP

    items = "".join(f"<li><b>{_e(p)}</b>: {_e(PHASE_HELP[p])}</li>" for p in PHASES)
    return f'<p class="note">Phases (column "most time in"):</p><ul class="note">{items}</ul>'


def write_html(
    result: RunResult, path: str | os.PathLike[str], baseline: RunResult | None = None
) -> None:
    """Render and write the page atomically: a temporary file in the same folder, renamed
    over `path`, so a reader never sees half a page."""
    from gpupoolctl.atomic import write_file

    # 0644: a report holds no secrets and is meant to be shared.
    write_file(Path(path), render_html(result, baseline), mode=0o644, what="the report")
