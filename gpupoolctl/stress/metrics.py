"""Sum one ramp level's samples up into a LevelResult, and read metrics back by name.

The steady window [start, end) is what counts: samples submitted before it (warm-up) or
after it (drain) are left out of the counts and latencies. Throughput credits every job
that ended ok with the share of its life (submit to end) that fell inside the window,
whenever it was submitted: the sum, per second of window, is the completion rate without the
aliasing that plain counting suffers when N closed-model jobs end in waves near an edge
(N jobs of 3 s in a 6 s window count 2N or N depending on where the waves fall).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpupoolctl.stress.histogram import distribution
from gpupoolctl.stress.model import (
    COUNT_METRICS,
    LINK_CLASSES,
    METRICS,
    PHASES,
    Distribution,
    LevelResult,
    Sample,
    ThresholdCheck,
)

__all__ = ["METRICS", "TOP_ERRORS", "metric_value", "normalize_error", "summarize_level"]

TOP_ERRORS = 5
_ERROR_MAX_CHARS = 200

ThresholdEvaluator = Callable[[LevelResult], list[ThresholdCheck]]

# Parts of an error message that differ between jobs but not between causes.
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
# Hashes and hex ids: 8+ hex digits mixing letters and digits (all digits is a number).
_HEX = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I)
_DECIMAL = re.compile(r"\d+\.\d+(?:e[+-]?\d+)?|\d+e[+-]\d+", re.I)  # before _HEX: 1.5e-05
_NUMBER = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")


def normalize_error(message: str) -> str:
    """The error with ids, hashes and numbers replaced, so that "job j-17 timed out after
    600.0 s" and "job j-18 timed out after 600.0 s" count as one cause."""
    text = _UUID.sub("<uuid>", message)
    text = _DECIMAL.sub("<n>", text)
    text = _HEX.sub("<hex>", text)
    text = _NUMBER.sub("<n>", text)
    text = _SPACE.sub(" ", text).strip()
    if len(text) > _ERROR_MAX_CHARS:
        text = text[: _ERROR_MAX_CHARS - 3] + "..."
    return text or "(empty error message)"


def _has_failed(sample: Sample) -> bool:
    # Refused, non-zero exit or timed out: it has an error, or it ended without ok.
    return not sample.ok and (sample.error is not None or sample.ended is not None)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _top_errors(samples: Iterable[Sample]) -> dict[str, int]:
    counts = Counter(
        normalize_error(s.error) if s.error is not None else "ended without success"
        for s in samples
        if _has_failed(s)
    )
    # Most frequent first; ties by message so the result does not depend on sample order.
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked[:TOP_ERRORS])


def summarize_level(
    samples: Iterable[Sample],
    *,
    level: float,
    model: str,
    warmup_s: float,
    hold_s: float,
    window: tuple[float, float],
    dropped: int = 0,
    thresholds: Sequence[ThresholdCheck] = (),
    evaluate: ThresholdEvaluator | None = None,
    node_events: Iterable[Mapping[str, Any]] = (),
) -> LevelResult:
    """One level's LevelResult from its samples.

    `window` is the steady window [start, end) in time.time() seconds. `thresholds` are
    checks already evaluated; `evaluate`, when given, is called with the finished result
    and its checks are added after them. `node_events` are what the backend saw happen to
    nodes during the whole level (Backend.events_between over warm-up, hold and drain):
    each "node-lost" one counts in lost_nodes. Restarts and recovered jobs count over the
    samples submitted in the steady window, as completed and failed do.
    """
    start, end = window
    if end < start:
        raise ValueError(f"the steady window ends before it starts: {window!r}")
    window_s = end - start
    samples = list(samples)
    inside = [s for s in samples if start <= s.submitted < end]
    completed = sum(1 for s in inside if s.ok)
    failed = sum(1 for s in inside if _has_failed(s))
    credited = sum(_share_inside(s, start, end) for s in samples if s.ok)
    lost_nodes = sum(1 for e in node_events if e.get("event") == "node-lost")

    waits = [w for w in (s.queue_wait for s in inside) if w is not None]
    launches = [t for t in (s.launch for s in inside) if t is not None]
    turnarounds = [t for t in (s.turnaround for s in inside) if t is not None]
    phases = {
        phase: _mean(measured)
        for phase in PHASES
        if (measured := [s.phases[phase] for s in inside if phase in s.phases])
    }

    reporting = [s for s in inside if s.work is not None or s.comm_links or "comm" in s.phases]
    comm_links = {
        link: math.fsum(s.comm_links.get(link, 0.0) for s in reporting) / len(reporting)
        for link in _link_classes(reporting)
    }
    bound_by = Counter(s.bound_by for s in inside if s.bound_by is not None)
    worked = [s for s in samples if s.ok and s.work is not None]
    work_credited = math.fsum(s.work * _share_inside(s, start, end) for s in worked if s.work)
    work_throughput = (work_credited / window_s if window_s > 0 else 0.0) if worked else None

    result = LevelResult(
        level=level,
        model=model,
        warmup_s=warmup_s,
        hold_s=hold_s,
        window_s=window_s,
        submitted=len(inside),
        completed=completed,
        failed=failed,
        dropped=dropped,
        throughput=credited / window_s if window_s > 0 else 0.0,
        failure_rate=failed / (completed + failed) if completed + failed else 0.0,
        queue_wait=distribution(waits),
        turnaround=distribution(turnarounds),
        phases=phases,
        harness_s=_mean([s.harness_s for s in inside]) if inside else 0.0,
        errors=_top_errors(inside),
        thresholds=list(thresholds),
        launch=distribution(launches),
        restarts=sum(s.restarts for s in inside),
        recovered=sum(1 for s in inside if s.recovered),
        lost_nodes=lost_nodes,
        work_throughput=work_throughput,
        comm_links=comm_links,
        bound_by=dict(sorted(bound_by.items(), key=lambda item: (-item[1], item[0]))),
    )
    if evaluate is not None:
        result.thresholds.extend(evaluate(result))
    return result


def _link_classes(samples: Iterable[Sample]) -> list[str]:
    """The link classes the samples spent time on: LINK_CLASSES order, then any others."""
    seen = {link for s in samples for link in s.comm_links}
    return [link for link in LINK_CLASSES if link in seen] + sorted(seen - set(LINK_CLASSES))


def _share_inside(sample: Sample, start: float, end: float) -> float:
    """The share of a finished job's life (submit to end) inside [start, end)."""
    if sample.ended is None:
        return 0.0
    life = sample.ended - sample.submitted
    if life <= 0:
        return 1.0 if start <= sample.ended < end else 0.0
    overlap = min(sample.ended, end) - max(sample.submitted, start)
    return max(0.0, overlap) / life


def metric_value(level: LevelResult, name: str) -> float | None:
    """The value of a metric named as in METRICS ("throughput", "queue_wait.p95",
    "phase.run", ...) for one level; None when the level has no value for it (no job
    started, a phase not measured). An unknown name raises KeyError listing the valid
    ones."""
    if name not in METRICS:
        raise KeyError(f"unknown metric {name!r}; valid metrics: {', '.join(METRICS)}")
    if name == "throughput":
        return level.throughput
    if name == "work_throughput":
        return level.work_throughput
    if name == "failure_rate":
        return level.failure_rate
    if name == "harness":
        return level.harness_s
    if name in COUNT_METRICS:
        return float(getattr(level, name))
    family, _, part = name.partition(".")
    if family == "phase":
        return level.phases.get(part)
    dist: Distribution = getattr(level, family)
    return dist.get(part)
