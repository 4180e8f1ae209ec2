"""Stress reports: table rows, knee sentences, the terminal plot and the HTML page."""

from __future__ import annotations

import math
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.errors import GpupoolError, UsageError
from gpupoolctl.stress.formats import format_duration, format_percent, format_rate
from gpupoolctl.stress.knee import usl_throughput
from gpupoolctl.stress.model import (
    Distribution,
    KneePoint,
    Knees,
    LevelResult,
    RunResult,
    ThresholdCheck,
)
from gpupoolctl.stress.report_html import render_html, write_html
from gpupoolctl.stress.report_text import (
    LEVEL_COLUMNS,
    dominant_phase,
    knee_lines,
    level_records,
    level_rows,
    terminal_plot,
)

LEVELS = (1, 2, 4, 8, 16, 32, 64)
LAM, SIGMA, KAPPA = 2.5, 0.05, 0.001  # N* = sqrt(0.95 / 0.001), about 30.8


def _usl(n: float) -> float:
    return usl_throughput(n, LAM, SIGMA, KAPPA)


def _dist(p50: float | None, spread: float = 1.5) -> Distribution:
    if p50 is None:
        return Distribution(0, None, None, None, None, None, None)
    return Distribution(
        count=100,
        mean=p50 * 1.1,
        p50=p50,
        p90=p50 * spread,
        p95=p50 * spread * 1.1,
        p99=p50 * spread * 1.5,
        max=p50 * spread * 2,
    )


def _queue_p50(level: float) -> float:
    """Flat 20 ms, then growing from level 16 (a hockey stick)."""
    return 0.02 if level < 16 else 0.02 * (level / 8) ** 2


def _level(level: float, *, scale: float = 1.0, thresholds=None) -> LevelResult:
    failed = 0 if level < 32 else int(level // 8)
    completed = int(_usl(level) * 30 * scale)
    queue = _queue_p50(level)
    return LevelResult(
        level=float(level),
        model="closed",
        warmup_s=5.0,
        hold_s=30.0,
        window_s=30.0,
        submitted=completed + failed,
        completed=completed,
        failed=failed,
        dropped=0,
        throughput=_usl(level) * scale,
        failure_rate=failed / (completed + failed),
        queue_wait=_dist(queue),
        turnaround=_dist(queue + 1.3),
        phases={"ledger": 0.01, "launch": 0.2, "queue": queue, "run": 1.0},
        harness_s=0.001,
        thresholds=thresholds if thresholds is not None else [],
    )


def _knees() -> Knees:
    return Knees(
        kneedle=KneePoint("kneedle", "diminishing returns", 16.0, _usl(16)),
        usl=KneePoint(
            "usl",
            "capacity peak",
            30.4,
            _usl(30.4),
            extra={
                "lambda": LAM,
                "sigma": SIGMA,
                "kappa": KAPPA,
                "r2": 0.981,
                "peak_err": 2.1,
                "peak_throughput": _usl(30.4),
            },
        ),
        latency=KneePoint(
            "latency", "latency knee", 32.0, 0.528, extra={"baseline": 0.02, "limit": 0.07}
        ),
    )


def _ramp(
    *, name: str = "nightly", knees: Knees | None = None, scale: float = 1.0, phases: bool = True
) -> RunResult:
    """A plausible 7-level closed ramp; the last two levels break a queue-wait threshold."""
    levels = []
    for n in LEVELS:
        p95 = _queue_p50(n) * 1.65
        check = ThresholdCheck("queue_wait.p95 < 250ms", p95, p95 < 0.25)
        lv = _level(n, scale=scale, thresholds=[check])
        if not phases:
            lv.phases = {}
        levels.append(lv)
    return RunResult(
        scenario={"name": name, "model": "closed", "levels": list(LEVELS), "workload": None},
        levels=levels,
        knees=knees if knees is not None else _knees(),
        backend="pool",
        transport="local",
        tool_version="0.9.0",
        created="2025-06-01T02:00:00Z",
        host="admin-1",
        commit="abc123",
    )


# -- formatting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (float("nan"), "-"),
        (0.0, "0 s"),
        (0.00085, "850 us"),
        (0.0000042, "4.2 us"),
        (0.0042, "4.2 ms"),
        (0.012, "12 ms"),
        (0.0125, "12 ms"),
        (0.999, "999 ms"),
        (0.9996, "1.0 s"),
        (1.44, "1.4 s"),
        (9.96, "10 s"),
        (42.4, "42 s"),
        (59.7, "1m00s"),
        (125, "2m05s"),
        (3599.6, "1h00m"),
        (3725, "1h02m"),
        (86400 * 2 + 3 * 3600, "2d03h"),
        (-0.012, "-12 ms"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def _parse_duration(text: str) -> tuple[float, float]:
    """Read format_duration's text back: (seconds, the granularity it was rounded to)."""
    if match := re.fullmatch(r"(\d+(?:\.\d)?) (us|ms|s)", text):
        number, unit = match.groups()
        step = 0.1 if "." in number else 1.0
        return float(number) * _UNITS[unit], step * _UNITS[unit]
    if match := re.fullmatch(r"(\d+)m(\d\d)s", text):
        return int(match[1]) * 60 + int(match[2]), 1.0
    if match := re.fullmatch(r"(\d+)h(\d\d)m", text):
        return int(match[1]) * 3600 + int(match[2]) * 60, 60.0
    match = re.fullmatch(r"(\d+)d(\d\d)h", text)
    assert match, text
    return int(match[1]) * 86400 + int(match[2]) * 3600, 3600.0


@given(st.floats(min_value=1e-6, max_value=1e7, allow_nan=False))
def test_format_duration_reads_back_within_its_rounding(seconds):
    text = format_duration(seconds)
    value, step = _parse_duration(text)
    assert abs(value - seconds) <= step / 2 + 1e-9 * seconds
    # Two or three significant digits below a minute: never coarser than 5 %.
    if seconds < 59.5:
        assert abs(value - seconds) <= 0.05 * seconds


@given(st.floats(min_value=1e-6, max_value=1e6), st.floats(min_value=1e-6, max_value=1e6))
def test_format_duration_keeps_order(a, b):
    low, high = sorted((a, b))
    assert _parse_duration(format_duration(low))[0] <= _parse_duration(format_duration(high))[0]


@pytest.mark.parametrize(
    ("rate", "text"),
    [
        (None, "-"),
        (0, "0"),
        (41.23, "41.2"),
        (1.234, "1.23"),
        (0.1234, "0.123"),
        (0.0000123, "0.0000123"),
        (9.996, "10.0"),
        (99.96, "100"),
        (152.4, "152"),
        (1520.2, "1520"),
    ],
)
def test_format_rate(rate, text):
    assert format_rate(rate) == text


@given(st.floats(min_value=1e-9, max_value=1e9))
def test_format_rate_is_close_and_never_scientific(rate):
    text = format_rate(rate)
    assert "e" not in text
    assert math.isclose(float(text), rate, rel_tol=0.006)


@pytest.mark.parametrize(
    ("fraction", "text"),
    [(None, "-"), (0.0, "0%"), (0.123, "12%"), (0.015, "1.5%"), (0.0004, "0.04%"), (1.0, "100%")],
)
def test_format_percent(fraction, text):
    assert format_percent(fraction) == text


# -- rows ------------------------------------------------------------------------------------


def test_level_rows_have_the_columns_and_readable_numbers():
    rows = level_rows(_ramp())
    assert len(rows) == len(LEVELS)
    assert all(list(row) == list(LEVEL_COLUMNS) for row in rows)
    first, sixteen, last = rows[0], rows[4], rows[-1]
    assert first["level"] == "1"
    assert first["throughput"] == "2.50"
    assert first["failure"] == "0%"
    assert first["queue_p50"] == "20 ms"
    assert first["queue_p95"] == "33 ms"  # 0.02 * 1.5 * 1.1
    assert first["queue_p99"] == "45 ms"
    assert first["turnaround_p95"] == "2.2 s"  # 1.32 * 1.65
    assert sixteen["throughput"] == format_rate(_usl(16))
    assert (sixteen["submitted"], sixteen["completed"], sixteen["failed"]) == (
        int(_usl(16) * 30),
        int(_usl(16) * 30),
        0,
    )
    assert last["failed"] == 8
    assert last["failure"] == format_percent(8 / (last["completed"] + 8))
    assert last["queue_p95"] == "2.1 s"  # 0.02 * 64 * 1.65
    assert first["thresholds"] == "ok"
    assert last["thresholds"] == "queue_wait.p95 < 250ms (2.1 s)"


def test_dominant_phase_is_the_largest_share_of_turnaround():
    rows = level_rows(_ramp())
    # Level 1: run takes 1.0 s of a 1.32 * 1.1 s mean turnaround.
    assert rows[0]["dominant"] == "run 69%"
    # Level 64: queue wait (1.28 s) beats run (1.0 s); its share of 2.58 * 1.1 s.
    assert rows[-1]["dominant"] == "queue 45%"
    assert level_rows(_ramp(phases=False))[0]["dominant"] == "-"


def test_dominant_phase_without_turnaround_uses_the_phases_sum():
    level = _level(1)
    level.turnaround = _dist(None)
    phase, share = dominant_phase(level)
    assert phase == "run"
    assert share == pytest.approx(1.0 / (0.01 + 0.2 + 0.02 + 1.0))


def test_rows_without_thresholds_say_so():
    result = _ramp()
    for lv in result.levels:
        lv.thresholds = []
    assert {row["thresholds"] for row in level_rows(result)} == {"-"}


def test_broken_threshold_without_value():
    result = _ramp()
    result.levels[0].thresholds = [ThresholdCheck("failure_rate < 1%", None, False)]
    result.levels[1].thresholds = [ThresholdCheck("failure_rate < 1%", 0.05, False)]
    result.levels[2].thresholds = [ThresholdCheck("throughput >= 2/s", 1.5, False)]
    rows = level_rows(result)
    assert rows[0]["thresholds"] == "failure_rate < 1% (no value)"
    assert rows[1]["thresholds"] == "failure_rate < 1% (5.0%)"
    assert rows[2]["thresholds"] == "throughput >= 2/s (1.50 jobs/s)"


def test_level_records_are_plain_numbers():
    result = _ramp()
    records = level_records(result)
    assert records[0]["level"] == 1.0
    assert records[0]["queue_p95"] == result.levels[0].queue_wait.p95
    assert records[-1]["throughput"] == result.levels[-1].throughput
    assert records[-1]["dominant"] == "queue"
    assert records[-1]["thresholds_ok"] is False
    assert records[-1]["thresholds_broken"] == ["queue_wait.p95 < 250ms"]
    assert records[0]["thresholds_broken"] == []


# -- knees -----------------------------------------------------------------------------------


def test_knee_lines_label_each_point():
    lines = knee_lines(_knees())
    assert lines == [
        f"Diminishing returns (Kneedle): level 16, {format_rate(_usl(16))} jobs/s",
        "Capacity peak (USL fit, R^2 0.98): N* = 30.4 +/- 2.1, 22.6 jobs/s; "
        "sigma 0.05, kappa 0.001",
        "Latency knee: queue wait p95 leaves its 20 ms baseline at level 32 (528 ms there)",
    ]


def test_knee_lines_give_the_notes_when_absent():
    knees = Knees(
        kneedle=KneePoint("kneedle", "m", None, note="the curve is linear: no knee"),
        usl=KneePoint(
            "usl",
            "m",
            None,
            note="no capacity peak within reach",
            extra={"lambda": 2.0, "sigma": 0.1, "kappa": 0.0},
        ),
        latency=KneePoint("latency", "m", None, note="queue wait never left its baseline"),
    )
    assert knee_lines(knees) == [
        "Diminishing returns (Kneedle): none (the curve is linear: no knee)",
        "Capacity peak (USL fit): none (no capacity peak within reach); fitted sigma 0.1, kappa 0",
        "Latency knee: none (queue wait never left its baseline)",
    ]


def test_knee_lines_keep_a_present_points_note():
    knees = _knees()
    knees.usl.note = "extrapolated beyond the sweep (largest level 64)"
    assert knee_lines(knees)[1].endswith("(extrapolated beyond the sweep (largest level 64))")


def test_knee_lines_without_analysis():
    (line,) = knee_lines(None)
    assert "not analysed" in line


# -- terminal plot ---------------------------------------------------------------------------


def test_terminal_plot_has_axis_labels_and_the_asked_height(capsys):
    text = terminal_plot(_ramp(), width=90, height=30, color=False)
    assert capsys.readouterr().out == ""  # the caller prints, not the plot
    lines = text.splitlines()
    assert len(lines) == 30
    assert max(len(line) for line in lines) <= 90
    assert "\x1b[" not in text
    for label in ("level (concurrency)", "jobs/s", "Throughput", "Queue wait p95 (s)"):
        assert label in text
    # Knees as labelled lines; level ticks read as levels.
    assert "kneedle @ 16" in text
    assert "USL N* @ 30.4" in text
    assert "latency knee @ 32" in text
    assert "64" in text
    assert "baseline" not in text


def test_terminal_plot_with_baseline_has_both_series():
    text = terminal_plot(_ramp(), _ramp(scale=0.9), width=100, height=34, color=False)
    assert len(text.splitlines()) == 34
    assert "throughput" in text
    assert "queue wait p95" in text
    assert text.count("baseline") == 2  # one legend entry per curve


def test_terminal_plot_in_colour_uses_escape_codes():
    assert "\x1b[" in terminal_plot(_ramp(), width=80, height=24, color=True)


def test_terminal_plot_rejects_a_tiny_size():
    with pytest.raises(UsageError, match="too small"):
        terminal_plot(_ramp(), width=20, height=5)


def test_terminal_plot_needs_plotext_6(monkeypatch):
    import sys
    import types

    old = types.ModuleType("plotext")
    old.__version__ = "5.2.8"
    monkeypatch.setitem(sys.modules, "plotext", old)
    with pytest.raises(GpupoolError, match="plotext 6 or later"):
        terminal_plot(_ramp())


def test_terminal_plot_without_levels():
    result = _ramp()
    result.levels = []
    assert "nothing to plot" in terminal_plot(result)


# -- HTML ------------------------------------------------------------------------------------


class _Checker(HTMLParser):
    """Counts elements and keeps track of nesting, to catch unbalanced markup."""

    VOID = frozenset({"meta", "br", "hr", "img", "link", "input"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.counts: dict[str, int] = {}
        self.errors: list[str] = []
        self.script = 0

    def handle_starttag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag == "script":
            self.script += 1
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}> with {self.stack[-3:]} open")
        else:
            self.stack.pop()


def _check(page: str) -> _Checker:
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert checker.errors == []
    assert checker.stack == []
    return checker


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", page, flags=re.S)


def test_html_parses_and_has_one_svg_per_figure():
    page = render_html(_ramp())
    checker = _check(page)
    assert checker.counts["svg"] == 4  # throughput, latency, failures, phases
    assert len(_svgs(page)) == 4
    assert checker.script == 0
    assert "<h1>Stress report: nightly</h1>" in page
    for text in ("pool", "local", "admin-1", "0.9.0", "abc123", "2025-06-01T02:00:00Z"):
        assert f"<dd>{text}</dd>" in page
    # The knee sentences and every level's row.
    for line in knee_lines(_knees()):
        assert line.replace("<", "&lt;") in page
    assert page.count("<tr>") == len(LEVELS) + 1
    assert "queue_wait.p95 &lt; 250ms (2.1 s)" in page


def test_html_without_phases_draws_three_figures():
    assert len(_svgs(render_html(_ramp(phases=False)))) == 3


def test_html_draws_the_knees_and_the_usl_fit():
    page = render_html(_ramp())
    throughput = _svgs(page)[0]
    assert "N*" in page
    assert "USL N* 30.4" in throughput
    assert "USL fit" in throughput
    assert "kneedle 16" in throughput
    assert "latency knee 32" in _svgs(page)[1]


def test_html_without_usl_parameters_draws_no_fit():
    knees = _knees()
    knees.usl = KneePoint("usl", "m", None, note="the USL fit needs at least 5 levels, got 4")
    page = render_html(_ramp(knees=knees))
    assert "USL fit" not in _svgs(page)[0]
    assert "USL N*" not in page
    assert "needs at least 5 levels" in page


def test_html_references_nothing_outside_itself():
    page = render_html(_ramp(), _ramp(scale=0.9))
    allowed = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    found = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert found <= allowed
    # Namespaces only: every use is an xmlns attribute.
    for url in found:
        assert page.count(url) == len(re.findall(rf'xmlns(?::\w+)?="{re.escape(url)}"', page))
    assert "<link" not in page
    assert "src=" not in page


def test_html_escapes_the_scenario_name():
    page = render_html(_ramp(name="<script>alert(1)</script>"))
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert _check(page).script == 0


def test_html_shows_the_baseline_only_when_given():
    legend = re.compile(r">\s*baseline[^<]*<")
    without = render_html(_ramp())
    assert not any(legend.search(svg) for svg in _svgs(without))
    assert "Compared with" not in without
    page = render_html(_ramp(), _ramp(name="last-week", scale=0.9))
    svgs = _svgs(page)
    assert legend.search(svgs[0])  # throughput
    assert legend.search(svgs[1])  # queue wait
    assert legend.search(svgs[2])  # failures
    assert "Compared with</dt><dd>last-week, run 2025-06-01T02:00:00Z" in page


def test_html_svg_ids_are_unique_on_the_page():
    page = render_html(_ramp(), _ramp(scale=0.9))
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))
    # Every reference points at an id of the page.
    refs = re.findall(r'(?:href="#|url\(#)([^")]+)', page)
    assert refs
    assert set(refs) <= set(ids)


def test_html_is_deterministic():
    assert render_html(_ramp(), _ramp(scale=0.9)) == render_html(_ramp(), _ramp(scale=0.9))


def test_html_with_missing_values_and_no_knees():
    result = _ramp(knees=None)
    result.knees = None
    result.levels[3].queue_wait = _dist(None)
    result.levels[3].turnaround = _dist(None)
    result.transport = None
    result.commit = None
    result.stopped_early = "2 levels in a row broke a threshold"
    page = render_html(result)
    _check(page)
    assert "not analysed" in page
    assert "The ramp stopped early: 2 levels in a row broke a threshold" in page
    assert "<dt>Commit</dt><dd>-</dd>" in page


def test_failure_figure_leaves_out_levels_where_no_job_ended():
    from gpupoolctl.stress.report_html import _failure_figure

    result, baseline = _ramp(), _ramp(name="last-week")
    for run in (result, baseline):
        quiet = run.levels[0]  # nothing ended in its window: failure_rate is a stored 0
        quiet.completed, quiet.failed, quiet.failure_rate = 0, 0, 0.0
    figure = _failure_figure(result, baseline, "level")
    current, previous = figure.axes[0].lines[:2]
    assert list(current.get_xdata()) == [float(n) for n in LEVELS[1:]]
    assert list(previous.get_xdata()) == [float(n) for n in LEVELS[1:]]
    # The levels that did end jobs keep their measured percentage, zeros included.
    assert list(current.get_ydata())[:3] == [0.0, 0.0, 0.0]
    assert current.get_ydata()[-1] == pytest.approx(100 * result.levels[-1].failure_rate)


def test_html_without_levels():
    result = _ramp()
    result.levels = []
    page = render_html(result)
    _check(page)
    assert "<svg" not in page
    assert "nothing to draw" in page


def test_html_linear_levels_and_open_model():
    result = _ramp()
    for i, lv in enumerate(result.levels):
        lv.level = 0.5 + 2.0 * i
        lv.model = "open"
    result.knees = None
    page = render_html(result)
    _check(page)
    assert "level (arrivals/s)" in page
    assert ">0.5<" in page


# -- write_html ------------------------------------------------------------------------------


def test_write_html_is_complete_and_leaves_no_temp(tmp_path):
    target = tmp_path / "report.html"
    target.write_text("old report")
    write_html(_ramp(), target, baseline=_ramp(scale=0.9))
    assert target.read_text(encoding="utf-8") == render_html(_ramp(), _ramp(scale=0.9))
    assert target.read_text(encoding="utf-8").rstrip().endswith("</html>")
    assert os.listdir(tmp_path) == ["report.html"]


def test_write_html_failure_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "report.html"
    target.write_text("old report")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(GpupoolError, match=r"report\.html: cannot write the report"):
        write_html(_ramp(), target)
    assert target.read_text() == "old report"
    assert os.listdir(tmp_path) == ["report.html"]


def test_write_html_into_a_missing_folder_is_a_clean_error(tmp_path):
    with pytest.raises(GpupoolError, match="cannot write the report"):
        write_html(_ramp(), Path(tmp_path / "missing" / "report.html"))


def test_a_level_where_no_job_ended_shows_no_failure_rate_not_zero() -> None:
    import dataclasses

    quiet = dataclasses.replace(_level(1), completed=0, failed=0, failure_rate=0.0)
    result = _ramp()
    result.levels[0] = quiet
    assert level_rows(result)[0]["failure"] == format_percent(None)
    assert level_records(result)[0]["failure_rate"] is None
    assert level_rows(result)[1]["failure"] == "0%"  # a measured zero stays a zero
