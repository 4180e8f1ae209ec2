"""What a ramp's results say about the ramp itself, beyond its thresholds.

Two things make a ramp's numbers worthless however its thresholds read:

- a level that measured nothing: no job submitted inside its steady window ended (a hold
  shorter than one job). Its throughput is only the share of warm-up jobs that overlapped
  the window, so it is left out of the knee fits and its thresholds are not judged. When no
  level measured anything, the run as a whole measured nothing: a harness failure (exit 1);
- a level where no job succeeded: every job failed (the workload cannot run here, every
  submit was refused, every job timed out). When no job succeeded at any level, nothing
  could run at all: a harness failure (exit 1); when only some levels are like that, a
  check did not hold (exit 4), like a broken threshold.

`judge` says which, in sentences fit for stderr; the CLI turns them into exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupoolctl.stress.model import LevelResult, RunResult

__all__ = ["Verdict", "judge"]


@dataclass
class Verdict:
    error: str | None = None  # the run measured nothing usable: exit 1
    failures: list[str] = field(default_factory=list)  # a check did not hold: exit 4
    warnings: list[str] = field(default_factory=list)  # weakens the numbers, fails nothing
    unmeasured: list[float] = field(default_factory=list)  # levels that measured nothing

    @property
    def ok(self) -> bool:
        return self.error is None and not self.failures


def judge(result: RunResult) -> Verdict:
    """The run's own verdict (thresholds aside: RunResult.thresholds_ok)."""
    verdict = Verdict()
    levels = result.levels
    measured = [lv for lv in levels if lv.measured]
    verdict.unmeasured = [lv.level for lv in levels if not lv.measured]
    if levels and not measured:
        verdict.error = (
            f"no level measured anything: at every level no job submitted in the steady "
            f"window ({_s(levels[0].hold_s)}) ended; a hold shorter than a job measures "
            "nothing: lengthen --hold to several job lengths"
        )
        return verdict
    if verdict.unmeasured:
        verdict.warnings.append(_unmeasured([lv for lv in levels if not lv.measured]))
    failing = [lv for lv in measured if not lv.succeeded]
    if measured and len(failing) == len(measured):
        failed = sum(lv.failed for lv in measured)
        verdict.error = (
            f"no job succeeded at any level ({failed} failed{_dropped(measured)})"
            f"{_reasons(measured)}"
        )
        return verdict
    for level in failing:
        verdict.failures.append(
            f"level {_g(level.level)}: no job succeeded ({level.failed} failed"
            f"{_dropped([level])}){_reasons([level])}"
        )
    return verdict


def _unmeasured(levels: list[LevelResult]) -> str:
    names = ", ".join(_g(lv.level) for lv in levels)
    holds = sorted({lv.hold_s for lv in levels})
    return (
        f"level{'s' if len(levels) > 1 else ''} {names} measured nothing: no job submitted "
        f"in the {'/'.join(_s(h) for h in holds)} steady window ended (a hold shorter than "
        "a job measures nothing); left out of the knee fits, thresholds not judged: "
        "lengthen --hold"
    )


def _reasons(levels: list[LevelResult]) -> str:
    """The most frequent errors over `levels`, most frequent first."""
    counts: dict[str, int] = {}
    for level in levels:
        for message, count in level.errors.items():
            counts[message] = counts.get(message, 0) + count
    if not counts:
        return ""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    shown = "; ".join(f"{message} ({count}x)" for message, count in ranked[:2])
    return f": {shown}"


def _dropped(levels: list[LevelResult]) -> str:
    dropped = sum(lv.dropped for lv in levels)
    return f", {dropped} arrivals dropped" if dropped else ""


def _g(value: float) -> str:
    return f"{value:g}"


def _s(seconds: float) -> str:
    from gpupoolctl.stress.formats import format_duration

    return format_duration(seconds)
