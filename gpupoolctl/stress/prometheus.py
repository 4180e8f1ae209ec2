"""Saved stress runs as Prometheus metrics (export/prometheus.py writes the format): per
level throughput, queue wait p95 and failure ratio, the knees, and when each run was made."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from pathlib import Path

from gpupoolctl.errors import UsageError
from gpupoolctl.export.prometheus import Family
from gpupoolctl.stress.model import RunResult


def scenario_name(result: RunResult, source: str) -> str:
    """The run's scenario name, or the file's stem when the run has none."""
    name = result.scenario.get("name") if isinstance(result.scenario, dict) else None
    return str(name) if name else Path(source).stem


def level_text(level: float) -> str:
    """A level as a label value: 8 for 8.0, the exact float otherwise (distinct levels
    never share a label)."""
    return str(int(level)) if float(level).is_integer() else repr(float(level))


def stress_families(runs: Sequence[tuple[str, RunResult]]) -> list[Family]:
    """Metrics of saved runs, given as (file name, result). Two runs of the same scenario
    would give the same series twice: that is a usage error naming both files."""
    from gpupoolctl.ledger.units import parse_ts

    throughput = Family(
        "gpupoolctl_stress_throughput_jobs_per_second",
        "gauge",
        "Jobs ended ok per second of a level's steady window.",
    )
    wait = Family(
        "gpupoolctl_stress_queue_wait_p95_seconds",
        "gauge",
        "95th percentile of queue wait (submit to start on the node) at a level.",
    )
    failures = Family(
        "gpupoolctl_stress_failure_ratio",
        "gauge",
        "Failed jobs over ended jobs at a level (0 to 1); absent where no job ended.",
    )
    knees = Family(
        "gpupoolctl_stress_knee_level",
        "gauge",
        "Knee points by method: kneedle (diminishing returns of throughput), usl (capacity "
        "peak N* of the Universal Scalability Law fit), latency (queue wait p95 leaves its "
        "low-load baseline). Absent when the run found none.",
    )
    created = Family(
        "gpupoolctl_stress_run_timestamp_seconds",
        "gauge",
        "When the run was made, in seconds since the epoch.",
    )
    sources: dict[str, str] = {}
    for source, result in runs:
        scenario = scenario_name(result, source)
        if scenario in sources:
            raise UsageError(
                f"--stress: {sources[scenario]} and {source} are both runs of scenario "
                f"{scenario!r}; give one run per scenario"
            )
        sources[scenario] = source
        for level in result.levels:
            labels = {"scenario": scenario, "level": level_text(level.level)}
            throughput.add(level.throughput, **labels)
            if level.measured_failure_rate is not None:
                failures.add(level.measured_failure_rate, **labels)
            if level.queue_wait.p95 is not None:
                wait.add(level.queue_wait.p95, **labels)
        if result.knees is not None:
            for point in (result.knees.kneedle, result.knees.usl, result.knees.latency):
                if point.level is not None and math.isfinite(point.level):
                    knees.add(point.level, scenario=scenario, method=point.method)
        # A run without a readable time still has its levels.
        with contextlib.suppress(UsageError):
            created.add(parse_ts(result.created).timestamp(), scenario=scenario)
    return [throughput, wait, failures, knees, created]
